"""Ruoss et al.'s cycle_navigation (regular): moves on a cycle of 5 states, answered by the final state."""

from __future__ import annotations

import numpy as np

from lextra.tasks.base import TaskBatch
from lextra.tasks.registry import TRAINING_TASKS
from lextra.tasks.ruoss.suite import RuossTask

#: the authors' cycle length (fixed in their code)
CYCLE = 5


@TRAINING_TASKS.register("ruoss.cycle_navigation")
class CycleNavigation(RuossTask):
    """Input L actions uniform over the authors' indices {0, 1, 2}, which their code reads as moves -1, 0, +1
    (symbols L, S, R); output one symbol, the final state sum(a - 1) mod 5 from state 0 (the authors'
    `cycle_navigation.CycleNavigation`). Their output index p (0..4) is our symbol 3 + p ("0".."4"); the
    paper's 0/1/-1 move labels are index 1/2/0 in the code."""

    summary = "moves L/S/R on a 5-cycle -> the final state (Ruoss 2023, regular)"
    alphabet = ("L", "S", "R", *(str(p) for p in range(CYCLE)))

    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        length = self.check_length(length)
        actions = rng.integers(0, 3, size=(count, length), dtype=np.int64)
        final = (actions - 1).sum(axis=1, keepdims=True) % CYCLE
        return TaskBatch(actions, 3 + final)
