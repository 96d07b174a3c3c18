"""Ruoss et al.'s reverse_string (context-free): a binary string, answered by the string reversed."""

from __future__ import annotations

import numpy as np

from lextra.tasks.base import TaskBatch
from lextra.tasks.registry import TRAINING_TASKS
from lextra.tasks.ruoss.suite import RuossTask


@TRAINING_TASKS.register("ruoss.reverse_string")
class ReverseString(RuossTask):
    """Input {0,1}^L, output the L symbols in reverse order; per-token accuracy (the authors'
    `reverse_string.ReverseString`)."""

    summary = "binary string -> its reverse (Ruoss 2023, context-free)"

    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        length = self.check_length(length)
        inputs = rng.integers(0, 2, size=(count, length), dtype=np.int64)
        return TaskBatch(inputs, inputs[:, ::-1].copy())
