"""The training tasks a run can draw rows from (`TrainConfig.task`): one registry that every task module of
`lextra.tasks` registers into (the algorithmic tasks, the retrieval tasks' rows, RULER's rows); importing
`lextra.tasks` imports them all, so the registry is complete whatever the caller imported.

A task spec is one spec of the registry grammar: `NAME[:RATIO][,ratio=R][,option=value...]`, the ratio (the
fraction of batch rows the task fills, the rest language-model windows; default 1) its positional option and the
task's own options typed by their declarations; the older `NAME+lm` (`lextra.registry.split_compound`) is ratio 0.5.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from lextra.errors import ConfigError
from lextra.registry import Option, Registry, format_spec, parse_spec, split_compound


class TrainingTask(ABC):
    """Base class of `TRAINING_TASKS`: one task's rows for training, never instantiated. Its spec options are
    `ratio` and the task's own (`task_options`)."""

    name: ClassVar[str] = "task"
    summary: ClassVar[str] = ""
    positional: ClassVar[str | None] = "ratio"
    #: whether `lextra retrieval eval` evaluates the task (RULER's rows are evaluated by `lextra ruler`)
    retrieval_evaluated: ClassVar[bool] = True

    @classmethod
    def task_options(cls) -> list[Option]:
        """The task's own options (none here)."""
        return []

    @classmethod
    def spec_options(cls) -> list[Option]:
        """The task's own options, then `ratio`."""
        return [*cls.task_options(), Option("ratio", 1.0, "float")]

    @classmethod
    @abstractmethod
    def rows(cls, config: Any, data: Any, options: dict[str, Any]) -> Any:
        """The task's row maker for a run (its `TrainConfig` and prepared data): an object with `name` and
        `training_row(length, rng)`; it refuses a training length its rows cannot fill."""


TRAINING_TASKS: Registry[TrainingTask] = Registry("training task")


@dataclass(frozen=True)
class TaskSpec:
    """A training task, the fraction of batch rows it fills (the rest are language-model windows) and the
    task's own options (e.g. passkey's `digits`)."""

    name: str
    ratio: float = 1.0
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> str:
        head = self.name if self.ratio == 1.0 else f"{self.name}:{self.ratio:g}"
        return format_spec(head, self.options)


def parse_task_spec(spec: str) -> TaskSpec:
    """A task spec read by `TRAINING_TASKS.parse`: `passkey` -> ratio 1, `passkey:0.3` or `passkey,ratio=0.3` ->
    0.3, `passkey,digits=7` sets the task's option, `passkey+lm` is ratio 0.5. Unknown names and options, values
    of the wrong type and ratios outside (0, 1] are ConfigErrors."""
    parts = split_compound(spec.strip())
    text = parts[0]
    if parts[1:] == ["lm"]:
        text += ",ratio=0.5"
    elif len(parts) > 1:
        raise ConfigError(f"task spec {spec!r}: only '+lm' may follow the task (its rows mixed half with corpus text)")
    parsed = parse_spec(text, "training task")
    if parsed.name not in TRAINING_TASKS:
        known = ", ".join(TRAINING_TASKS.names())
        raise ConfigError(f"unknown training task {parsed.name!r} in {spec!r}; `lextra list` shows them: {known}")
    if parsed.positional is not None and "ratio" in parsed.options:
        raise ConfigError(f"task spec {spec!r} gives the ratio twice (after ':' and as ratio=)")
    own = set(parsed.options) - {"ratio"}
    if own and not TRAINING_TASKS.get(parsed.name).task_options():
        raise ConfigError(
            f"task {parsed.name!r} takes no options of its own, got {', '.join(sorted(own))}; "
            "drop them (only ratio= applies)"
        )
    name, options = TRAINING_TASKS.parse(parsed)
    ratio = options.pop("ratio", 1.0)
    if not 0.0 < ratio <= 1.0:
        raise ConfigError(f"task spec {spec!r}: the task ratio must be in (0, 1], got {ratio}")
    return TaskSpec(name, ratio, options)
