"""Training batches for retrieval tasks: windows of length + 1 tokens ending with the answer, optionally mixed
with language-model windows, each a pure function of (seed, step, rank) so a resumed run sees the same data.

A task spec is `NAME` (task rows only), `NAME:RATIO` or `NAME,ratio=RATIO` (that fraction of task rows, the rest
corpus windows), with the task's options as `,key=value` (`passkey,digits=7`); the older `NAME+lm` is ratio 0.5.
`lextra.train.BATCH_SOURCES` holds `NAME` and `NAME+lm` for every task; any other spec registers on first use
(`register_task_spec`, a `BATCH_SOURCE_RESOLVERS` entry). Every retrieval task, plugins' included, is a training
task of `lextra.training_tasks.TRAINING_TASKS` (`lextra.evaluate.ruler.training` adds its `ruler.*` rows there),
whose parser reads the specs (`parse_task_spec`).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from typing import Any, Protocol

import torch

from lextra.data import TrainStream
from lextra.data.prepare import PreparedData
from lextra.errors import ConfigError
from lextra.evaluate.retrieval.tasks import TASK_NAMES, TASKS, RetrievalTask, build_task
from lextra.registry import Option
from lextra.train import BATCH_SOURCE_RESOLVERS, BATCH_SOURCES, TrainConfig
from lextra.training_tasks import TRAINING_TASKS, TrainingTask, parse_task_spec


class RowTask(Protocol):
    """What training needs of a task: its name and one row of exactly `length` tokens, answer last."""

    @property
    def name(self) -> str: ...

    def training_row(self, length: int, rng: random.Random) -> list[int]: ...


def known_training_tasks() -> list[str]:
    """Every task name a spec may use: the registered training tasks (retrieval tasks and RULER rows)."""
    return TRAINING_TASKS.names()


def _register_retrieval_task(name: str, task: type[RetrievalTask]) -> None:
    """The training task of retrieval task `name`: its rows are `build_task`'s over the train split."""

    class RetrievalTraining(TrainingTask):
        summary = task.summary

        @classmethod
        def task_options(cls) -> list[Option]:
            return TASKS.options(name)

        @classmethod
        def rows(cls, config: TrainConfig, data: PreparedData, options: dict[str, Any]) -> RowTask:
            return build_task(name, data.tokenizer, data.splits["train"], **options)

    TRAINING_TASKS.register(name)(RetrievalTraining)


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
        lm_rows = (
            None
            if self.lm is None or self.ratio >= 1.0
            else self.lm.batch(step, batch_size, length, seed, rank, world_size)
        )
        rows = []
        for row in range(batch_size):
            rng = random.Random(row_seed(self.task.name, seed, step, rank, row))
            if lm_rows is not None and rng.random() >= self.ratio:
                rows.append(lm_rows[row])
                continue
            rows.append(torch.tensor(self.task.training_row(length + 1, rng), dtype=torch.long, device="cpu"))
        return torch.stack(rows)


def source_factory(spec: str) -> Callable[[TrainConfig, PreparedData], RetrievalSource]:
    """The `BATCH_SOURCES` factory for a task spec: code-key hides needles in the train split's files."""
    parsed = parse_task_spec(spec)

    def factory(config: TrainConfig, data: PreparedData) -> RetrievalSource:
        task: RowTask = TRAINING_TASKS.get(parsed.name).rows(config, data, parsed.options)
        lm = None
        if parsed.ratio < 1.0:
            stream = data.stream
            lm = stream if stream is not None else TrainStream.from_documents(data.splits["train"], data.tokenizer)
        return RetrievalSource(task, parsed.ratio, lm)

    return factory


def evaluation_task(spec: str, data: PreparedData, distractors: int = 4) -> RetrievalTask:
    """The task of `spec` for evaluation prompts: code-key hides its needles in the test split's files."""
    parsed = parse_task_spec(spec)
    if not TRAINING_TASKS.get(parsed.name).retrieval_evaluated:
        raise ConfigError(
            f"task {parsed.name!r} is evaluated by its own suite, not by retrieval eval (e.g. `lextra ruler`)"
        )
    options = {"distractors": distractors, **parsed.options}
    return build_task(parsed.name, data.tokenizer, data.splits["test"], **options)


def register_task_spec(spec: str) -> str:
    """Make `spec` a valid `TrainConfig.task` (idempotent); returns it unchanged."""
    parse_task_spec(spec)
    BATCH_SOURCES.setdefault(spec, source_factory(spec))
    return spec


TASKS.on_register(_register_retrieval_task)
for _name in TASK_NAMES:
    register_task_spec(_name)
    register_task_spec(f"{_name}+lm")
# any other spec (`passkey:0.3`, `kv,ratio=0.2`, a task registered later) registers on first use
BATCH_SOURCE_RESOLVERS.append(register_task_spec)
