"""Ruoss et al.'s bucket_sort (context-sensitive): a string over 5 symbols, answered by the string sorted."""

from __future__ import annotations

import numpy as np

from lextra.tasks.base import TaskBatch
from lextra.tasks.registry import TRAINING_TASKS
from lextra.tasks.ruoss.duplicate_string import check_at_least
from lextra.tasks.ruoss.suite import RuossTask


@TRAINING_TASKS.register("ruoss.bucket_sort")
class BucketSort(RuossTask):
    """Input uniform over {0..symbols-1}^L, output its L symbols in increasing order (the authors'
    `bucket_sort.BucketSort`, `vocab_size` = `symbols`, 5 in the paper)."""

    summary = "string over 5 symbols -> the string sorted (Ruoss 2023, context-sensitive)"
    alphabet: tuple[str, ...] = ("0", "1", "2", "3", "4")

    def __init__(self, *, symbols: int = 5) -> None:
        super().__init__()
        self.symbols = check_at_least("ruoss.bucket_sort", "symbols", symbols, 1)
        self.alphabet = tuple(str(s) for s in range(symbols))  # follows the option

    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        length = self.check_length(length)
        inputs = rng.integers(0, self.symbols, size=(count, length), dtype=np.int64)
        return TaskBatch(inputs, np.sort(inputs, axis=1))
