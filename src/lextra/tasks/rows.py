"""Training batches of a row task (retrieval prompts, RULER prompts): windows of length + 1 tokens ending with the
answer, optionally mixed with language-model windows, each a pure function of (seed, step, rank) so a resumed run
sees the same data."""

from __future__ import annotations

import hashlib
import random
from typing import Any, Protocol

import torch

from lextra.data.prepare import PreparedData
from lextra.errors import ConfigError
from lextra.tasks.registry import TRAINING_TASKS, TaskSpec


class RowTask(Protocol):
    """What training needs of a task: its name and one row of exactly `length` tokens, answer last."""

    @property
    def name(self) -> str: ...

    def training_row(self, length: int, rng: random.Random) -> list[int]: ...


def row_seed(*parts: object) -> int:
    """A 63-bit seed from the parts alone (SHA-256), so nearby steps, ranks and rows are unrelated."""
    key = ":".join(str(p) for p in ("lextra-retrieval", *parts)).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "little") & (2**63 - 1)


class RowSource:
    """Rows of `task` (prompt + answer, answer last), mixed with corpus windows where `ratio` < 1."""

    def __init__(self, task: RowTask, ratio: float = 1.0, lm: Any = None) -> None:
        if ratio < 1.0 and lm is None:
            raise ConfigError("mixing a retrieval task with language modelling needs a corpus stream")
        self.task, self.ratio, self.lm = task, ratio, lm

    def batch(
        self, step: int, batch_size: int, length: int, seed: int, rank: int = 0, world_size: int = 1
    ) -> torch.Tensor:
        """(batch_size, length + 1) int64; rows and their kinds depend on (seed, step, rank) only."""
        if not 0 <= rank < world_size:
            raise ConfigError(f"rank must be in [0, world_size={world_size}), got {rank}")
        lm_rows = (
            None
            if self.lm is None or self.ratio >= 1.0
            else self.lm.batch(step, batch_size, length, seed, rank, world_size)
        )
        packed = lm_rows is not None and lm_rows.dim() == 3  # packed documents: (B, 2, L + 1), ids second
        rows = []
        for row in range(batch_size):
            rng = random.Random(row_seed(self.task.name, seed, step, rank, row))
            if lm_rows is not None and rng.random() >= self.ratio:
                rows.append(lm_rows[row])
                continue
            tokens = torch.tensor(self.task.training_row(length + 1, rng), dtype=torch.long, device="cpu")
            rows.append(torch.stack((tokens, torch.zeros_like(tokens))) if packed else tokens)  # a row: one document
        return torch.stack(rows)


def row_source(spec: TaskSpec, config: Any, data: PreparedData) -> RowSource:
    """The batches of a row task's spec for a run (its `TrainConfig` and prepared data): the task's rows over the
    train split, and its corpus windows where the spec's ratio is below 1."""
    task: RowTask = TRAINING_TASKS.get(spec.name).rows(config, data, spec.options)
    return RowSource(task, spec.ratio, data.stream if spec.ratio < 1.0 else None)
