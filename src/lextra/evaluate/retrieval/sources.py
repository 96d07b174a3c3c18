"""Training batches for retrieval tasks: windows of length + 1 tokens ending with the answer, optionally mixed
with language-model windows, each a pure function of (seed, step, rank) so a resumed run sees the same data.

A task spec is `NAME` (task rows only), `NAME:RATIO` or `NAME,ratio=RATIO` (that fraction of task rows, the rest
corpus windows), with the task's options as `,key=value` (`passkey,digits=7`); the older `NAME+lm` is ratio 0.5.
`lextra.train.BATCH_SOURCES` holds `NAME` and `NAME+lm` for every task; any other spec registers on first use
(`register_task_spec`, a `BATCH_SOURCE_RESOLVERS` entry). Tasks other than `TASKS` train
through `ROW_TASKS` (`lextra.evaluate.ruler` adds its `ruler.*` tasks there).
"""

from __future__ import annotations

import hashlib
import importlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from lextra.data import TrainStream
from lextra.data.prepare import PreparedData
from lextra.errors import ConfigError
from lextra.evaluate.retrieval.tasks import TASK_NAMES, TASKS, RetrievalTask, build_task
from lextra.registry import format_spec, parse_spec
from lextra.train import BATCH_SOURCE_RESOLVERS, BATCH_SOURCES, TrainConfig


class RowTask(Protocol):
    """What training needs of a task: its name and one row of exactly `length` tokens, answer last."""

    name: str

    def training_row(self, length: int, rng: random.Random) -> list[int]: ...


#: training tasks beyond `TASKS`: name -> the task built for a run (its config and prepared data: train split,
#: tokenizer); a builder refuses a training length its rows cannot fill
ROW_TASKS: dict[str, Callable[[TrainConfig, PreparedData], RowTask]] = {}


def known_training_tasks() -> list[str]:
    """Every task name a spec may use: `TASKS` and `ROW_TASKS` (the RULER rows are registered first)."""
    importlib.import_module("lextra.evaluate.ruler")
    return [*TASKS.names(), *ROW_TASKS]


@dataclass(frozen=True)
class TaskSpec:
    """A retrieval task, the fraction of batch rows it fills (the rest are language-model windows) and the
    task's own options (e.g. passkey's `digits`)."""

    name: str
    ratio: float = 1.0
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> str:
        head = self.name if self.ratio == 1.0 else f"{self.name}:{self.ratio:g}"
        return format_spec(head, self.options)


def parse_task_spec(spec: str) -> TaskSpec:
    """A task spec in the one grammar, `NAME[:RATIO][,ratio=R][,option=value...]`: `passkey` -> ratio 1,
    `passkey:0.3` or `passkey,ratio=0.3` -> 0.3, `passkey,digits=7` sets the task's option; the older
    `passkey+lm` is ratio 0.5. Unknown names and options, and ratios outside (0, 1], are errors."""
    text = spec.strip()
    if text.endswith("+lm"):
        text = f"{text[: -len('+lm')]},ratio=0.5"
    parsed = parse_spec(text, "retrieval task")
    known = known_training_tasks()
    if parsed.name not in known:
        raise ConfigError(f"unknown retrieval task {parsed.name!r} in {spec!r}; known: {', '.join(known)}")
    raw = dict(parsed.options)
    ratio_text = raw.pop("ratio", None)
    if parsed.positional is not None:
        if ratio_text is not None:
            raise ConfigError(f"task spec {spec!r} gives the ratio twice (after ':' and as ratio=)")
        ratio_text = parsed.positional
    try:
        ratio = float(ratio_text) if ratio_text is not None else 1.0
    except ValueError:
        raise ConfigError(f"task spec {spec!r}: the ratio (after ':' or ratio=) must be a number in (0, 1]") from None
    if not 0.0 < ratio <= 1.0:
        raise ConfigError(f"task spec {spec!r}: the task ratio must be in (0, 1], got {ratio}")
    options: dict[str, Any] = {}
    if raw:
        if parsed.name not in TASKS:
            raise ConfigError(f"task {parsed.name!r} has no options, got {', '.join(raw)}; its options: ratio")
        TASKS.check_options(parsed.name, raw)
        kinds = {o.name: o.annotation for o in TASKS.options(parsed.name)}
        options = {key: TASKS.convert(parsed.name, key, value, kinds[key]) for key, value in raw.items()}
    return TaskSpec(parsed.name, ratio, options)


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
            task = build_task(parsed.name, data.tokenizer, data.splits["train"], **parsed.options)
        lm = None
        if parsed.ratio < 1.0:
            stream = data.stream
            lm = stream if stream is not None else TrainStream.from_documents(data.splits["train"], data.tokenizer)
        return RetrievalSource(task, parsed.ratio, lm)

    return factory


def evaluation_task(spec: str, data: PreparedData, distractors: int = 4) -> RetrievalTask:
    """The task of `spec` for evaluation prompts: code-key hides its needles in the test split's files."""
    parsed = parse_task_spec(spec)
    if parsed.name in ROW_TASKS:
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


for _name in TASK_NAMES:
    register_task_spec(_name)
    register_task_spec(f"{_name}+lm")
# any other spec (`passkey:0.3`, `kv,ratio=0.2`, a task registered later) registers on first use
BATCH_SOURCE_RESOLVERS.append(register_task_spec)
