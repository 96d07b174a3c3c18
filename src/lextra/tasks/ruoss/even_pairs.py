"""Ruoss et al.'s even_pairs (regular): a binary string, answered by the parity of its unequal neighbour pairs."""

from __future__ import annotations

import numpy as np

from lextra.tasks.base import TaskBatch
from lextra.tasks.registry import TRAINING_TASKS
from lextra.tasks.ruoss.suite import RuossTask


@TRAINING_TASKS.register("ruoss.even_pairs")
class EvenPairs(RuossTask):
    """Input uniform {0,1}^L, output one symbol: the number of adjacent pairs `01` and `10` mod 2 (1: odd), i.e.
    whether the first and last symbols differ; 0 at L = 1 (the authors' `even_pairs.EvenPairs`, as the paper
    describes it)."""

    summary = "binary string -> parity of its 01/10 pairs (Ruoss 2023, regular)"

    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        length = self.check_length(length)
        inputs = rng.integers(0, 2, size=(count, length), dtype=np.int64)
        unequal = (inputs[:, :-1] != inputs[:, 1:]).sum(axis=1, keepdims=True)
        return TaskBatch(inputs, (unequal % 2).astype(np.int64))
