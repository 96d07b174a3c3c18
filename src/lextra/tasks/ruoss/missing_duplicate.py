"""Ruoss et al.'s missing_duplicate (context-sensitive): a string written twice with one symbol hidden, answered
by the hidden symbol."""

from __future__ import annotations

import numpy as np

from lextra.tasks.base import TaskBatch
from lextra.tasks.registry import TRAINING_TASKS
from lextra.tasks.ruoss.suite import RuossTask

MISSING, EMPTY = 2, 3


@TRAINING_TASKS.register("ruoss.missing_duplicate")
class MissingDuplicate(RuossTask):
    """Input: w w for w uniform in {0,1}^(L//2), one position uniform in 0..2(L//2)-1 replaced by `?`, then `#`
    (the empty token) if L is odd; output one symbol, the hidden bit (the authors'
    `missing_duplicate_string.MissingDuplicateString`). At L = 1 the input is `1` and the output 1, as in their
    code. Indices as theirs: 0, 1, ? (missing), # (empty)."""

    summary = "string twice with one symbol hidden -> the hidden symbol (Ruoss 2023, context-sensitive)"
    alphabet = ("0", "1", "?", "#")

    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        length = self.check_length(length)
        if length == 1:
            return TaskBatch(np.ones((count, 1), np.int64), np.ones((count, 1), np.int64))
        half = rng.integers(0, 2, size=(count, length // 2), dtype=np.int64)
        doubled = np.concatenate([half, half], axis=1)
        hidden = rng.integers(0, doubled.shape[1], size=count)
        rows = np.arange(count)
        answer = doubled[rows, hidden]
        doubled[rows, hidden] = MISSING
        inputs = np.concatenate([doubled, np.full((count, length % 2), EMPTY, np.int64)], axis=1)
        return TaskBatch(inputs, answer[:, None])
