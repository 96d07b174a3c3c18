"""Ruoss et al.'s duplicate_string (context-sensitive): a string, answered by the string written twice."""

from __future__ import annotations

import numpy as np

from lextra.errors import ConfigError
from lextra.tasks.base import TaskBatch
from lextra.tasks.registry import TRAINING_TASKS
from lextra.tasks.ruoss.suite import RuossTask


def check_at_least(task: str, name: str, value: int, low: int) -> int:
    """`value` if it is an int >= `low`, else a ConfigError naming the option."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"task {task}: {name} must be an int >= {low}, got {value!r}")
    return value


@TRAINING_TASKS.register("ruoss.duplicate_string")
class DuplicateString(RuossTask):
    """Input uniform over {0..symbols-1}^L, output the L symbols `duplication` times in a row, 2L by default
    (the authors' `duplicate_string.DuplicateString`, whose `vocab_size` is `symbols` here; the paper: binary
    strings, written twice)."""

    summary = "string -> the string twice (Ruoss 2023, context-sensitive)"

    def __init__(self, *, symbols: int = 2, duplication: int = 2) -> None:
        super().__init__()
        self.symbols = check_at_least("ruoss.duplicate_string", "symbols", symbols, 1)
        self.duplication = check_at_least("ruoss.duplicate_string", "duplication", duplication, 1)
        self.alphabet = tuple(str(s) for s in range(symbols))  # follows the option

    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        length = self.check_length(length)
        inputs = rng.integers(0, self.symbols, size=(count, length), dtype=np.int64)
        return TaskBatch(inputs, np.tile(inputs, (1, self.duplication)))
