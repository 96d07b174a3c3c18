"""Ruoss et al.'s odds_first (context-sensitive): a string, answered by its odd-position symbols, then the even."""

from __future__ import annotations

import numpy as np

from lextra.tasks.base import TaskBatch
from lextra.tasks.registry import TRAINING_TASKS
from lextra.tasks.ruoss.duplicate_string import check_at_least
from lextra.tasks.ruoss.suite import RuossTask


@TRAINING_TASKS.register("ruoss.odds_first")
class OddsFirst(RuossTask):
    """Input uniform over {0..symbols-1}^L, output the L symbols reordered as s[1::2] ++ s[0::2] (the authors'
    `odds_first.OddsFirst`, `vocab_size` = `symbols`, 2 in the paper). The paper writes s1 s3 s5 ... s2 s4 ...
    (1-indexed odd positions first); the code puts the 1-indexed even positions s2 s4 ... first, as here."""

    summary = "string -> symbols at (0-indexed) odd positions, then even ones (Ruoss 2023, context-sensitive)"

    def __init__(self, *, symbols: int = 2) -> None:
        super().__init__()
        self.symbols = check_at_least("ruoss.odds_first", "symbols", symbols, 1)
        self.alphabet = tuple(str(s) for s in range(symbols))  # follows the option

    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        length = self.check_length(length)
        inputs = rng.integers(0, self.symbols, size=(count, length), dtype=np.int64)
        return TaskBatch(inputs, np.concatenate([inputs[:, 1::2], inputs[:, ::2]], axis=1))
