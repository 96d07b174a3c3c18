"""Ruoss et al.'s parity_check (regular): a binary string, answered by its number of 1s modulo 2."""

from __future__ import annotations

import numpy as np

from lextra.tasks.base import TaskBatch
from lextra.tasks.registry import TRAINING_TASKS
from lextra.tasks.ruoss.suite import RuossTask


@TRAINING_TASKS.register("ruoss.parity_check")
class ParityCheck(RuossTask):
    """Input uniform {0,1}^L, output one symbol: the count of 1s mod 2 (the authors' `parity_check.ParityCheck`,
    as the paper describes it)."""

    summary = "binary string -> its number of 1s mod 2 (Ruoss 2023, regular)"

    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        length = self.check_length(length)
        inputs = rng.integers(0, 2, size=(count, length), dtype=np.int64)
        return TaskBatch(inputs, inputs.sum(axis=1, keepdims=True) % 2)
