"""Training batches for retrieval tasks: windows of length + 1 tokens ending with the answer, optionally mixed
with language-model windows, each a pure function of (seed, step, rank) so a resumed run sees the same data.

A task spec is `NAME` (task rows only), `NAME+lm` (half task rows, half corpus windows) or `NAME:RATIO` (that
fraction of task rows). `lextra.train.BATCH_SOURCES` holds `NAME` and `NAME+lm` for every task; call
`register_task_spec` for other ratios (the `lextra retrieval train` command does). Tasks other than `TASKS` train
through `ROW_TASKS` (`lextra.evaluate.ruler` adds its `ruler.*` tasks there).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from lextra.data import TrainStream
from lextra.data.prepare import PreparedData
from lextra.errors import ConfigError
from lextra.evaluate.retrieval.tasks import TASK_NAMES, RetrievalTask, build_task
from lextra.train import BATCH_SOURCES, TrainConfig


class RowTask(Protocol):
    """What training needs of a task: its name and one row of exactly `length` tokens, answer last."""

    name: str

    def training_row(self, length: int, rng: random.Random) -> list[int]: ...


#: training tasks beyond `TASKS`: name -> the task built for a run (its config and prepared data: train split,
#: tokenizer); a builder refuses a training length its rows cannot fill
ROW_TASKS: dict[str, Callable[[TrainConfig, PreparedData], RowTask]] = {}


def known_training_tasks() -> list[str]:
    """Every task name a spec may use: `TASKS` and `ROW_TASKS`."""
    return [*TASK_NAMES, *ROW_TASKS]


@dataclass(frozen=True)
class TaskSpec:
    """A retrieval task and the fraction of batch rows it fills (the rest are language-model windows)."""

    name: str
    ratio: float = 1.0

    @property
    def spec(self) -> str:
        return self.name if self.ratio == 1.0 else f"{self.name}:{self.ratio:g}"


def parse_task_spec(spec: str) -> TaskSpec:
    """`passkey` -> ratio 1; `passkey+lm` -> 0.5; `passkey:0.3` -> 0.3; unknown names and ratios are errors."""
    text = spec.strip()
    if text.endswith("+lm"):
        name, ratio_text = text[: -len("+lm")], "0.5"
    else:
        name, _, ratio_text = text.partition(":")
    try:
        ratio = float(ratio_text) if ratio_text else 1.0
    except ValueError:
        raise ConfigError(f"task spec {spec!r}: the ratio after ':' must be a number in (0, 1]") from None
    known = known_training_tasks()
    if name not in known:
        raise ConfigError(f"unknown retrieval task {name!r} in {spec!r}; known: {', '.join(known)}")
    if not 0.0 < ratio <= 1.0:
        raise ConfigError(f"task spec {spec!r}: the task ratio must be in (0, 1], got {ratio}")
    return TaskSpec(name, ratio)


def row_seed(*parts: object) -> int:
    """A 63-bit seed from the parts alone (SHA-256), so nearby steps, ranks and rows are unrelated."""
    key = ":".join(str(p) for p in ("lextra-retrieval", *parts)).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "little") & (2**63 - 1)


class RetrievalSource:
    """Rows of `task` (prompt + answer, answer last) at uniform random depths, mixed with corpus windows."""

    def __init__(self, task: RowTask, ratio: float = 1.0, lm: TrainStream | None = None) -> None:
        if ratio < 1.0 and lm is None:
            raise ConfigError("mixing a retrieval task with language modelling needs a corpus stream")
        self.task, self.ratio, self.lm = task, ratio, lm

    def batch(
        self, step: int, batch_size: int, length: int, seed: int, rank: int = 0, world_size: int = 1
    ) -> torch.Tensor:
        """(batch_size, length + 1) int64; rows and their kinds depend on (seed, step, rank) only."""
        if not 0 <= rank < world_size:
            raise ConfigError(f"rank must be in [0, world_size={world_size}), got {rank}")
        lm_rows = self.lm.batch(step, batch_size, length, seed, rank, world_size) if self.ratio < 1.0 else None
        rows = []
        for row in range(batch_size):
            rng = random.Random(row_seed(self.task.name, seed, step, rank, row))
            if lm_rows is not None and rng.random() >= self.ratio:
                rows.append(lm_rows[row])
                continue
            rows.append(torch.tensor(self.task.training_row(length + 1, rng), dtype=torch.long, device="cpu"))
        return torch.stack(rows)


def source_factory(spec: str):
    """The `BATCH_SOURCES` factory for a task spec: code-key hides needles in the train split's files."""
    parsed = parse_task_spec(spec)

    def factory(config: TrainConfig, data: PreparedData) -> RetrievalSource:
        if parsed.name in ROW_TASKS:
            task: RowTask = ROW_TASKS[parsed.name](config, data)
        else:
            task = build_task(parsed.name, data.tokenizer, data.splits["train"])
        lm = TrainStream.from_documents(data.splits["train"], data.tokenizer) if parsed.ratio < 1.0 else None
        return RetrievalSource(task, parsed.ratio, lm)

    return factory


def evaluation_task(spec: str, data: PreparedData, distractors: int = 4) -> RetrievalTask:
    """The task of `spec` for evaluation prompts: code-key hides its needles in the test split's files."""
    name = parse_task_spec(spec).name
    if name in ROW_TASKS:
        raise ConfigError(f"task {name!r} is evaluated by its own suite, not by retrieval eval (e.g. `lextra ruler`)")
    return build_task(name, data.tokenizer, data.splits["test"], distractors=distractors)


def register_task_spec(spec: str) -> str:
    """Make `spec` a valid `TrainConfig.task` (idempotent); returns it unchanged."""
    parse_task_spec(spec)
    BATCH_SOURCES.setdefault(spec, source_factory(spec))
    return spec


for _name in TASK_NAMES:
    register_task_spec(_name)
    register_task_spec(f"{_name}+lm")
