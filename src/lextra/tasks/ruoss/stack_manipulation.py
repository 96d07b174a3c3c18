"""Ruoss et al.'s stack_manipulation (context-free): a stack and POP/PUSH actions, answered by the final stack."""

from __future__ import annotations

import numpy as np

from lextra.tasks.base import TaskBatch
from lextra.tasks.registry import TRAINING_TASKS
from lextra.tasks.ruoss.suite import RuossTask

POP, PUSH0, PUSH1, END = 2, 3, 4, 5


@TRAINING_TASKS.register("ruoss.stack_manipulation")
class StackManipulation(RuossTask):
    """Input: a stack of k bits, k uniform in 1..L-1, given bottom to top, then L - k actions uniform over POP,
    PUSH0, PUSH1 (a POP on an empty stack does nothing); output L + 1 symbols: the final stack top to bottom,
    the terminator, then 0s. The score counts the symbols up to the terminator, the loss all (the authors'
    `stack_manipulation`: loss on every position, `accuracy_mask` up to the terminator). At L = 1 the input is
    one bit b and the output `b $`. Input indices as theirs; their output terminator (index 2) is our `$`."""

    summary = "stack + POP/PUSH actions -> the final stack, top first (Ruoss 2023, context-free)"
    alphabet = ("0", "1", "POP", "PUSH0", "PUSH1", "$")

    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        length = self.check_length(length)
        rows = np.arange(count)
        if length == 1:
            inputs = rng.integers(0, 2, size=(count, 1), dtype=np.int64)
            outputs = np.concatenate([inputs, np.full((count, 1), END, np.int64)], axis=1)
            return TaskBatch(inputs, outputs, np.ones((count, 2), bool))
        stack_length = rng.integers(1, length, size=count)
        inputs = np.where(
            np.arange(length)[None, :] < stack_length[:, None],
            rng.integers(0, 2, size=(count, length), dtype=np.int64),
            rng.integers(POP, PUSH1 + 1, size=(count, length), dtype=np.int64),
        )
        # run every row's symbols as a stack machine: a bit (the initial stack) or PUSH pushes, POP pops if it can
        stack = np.zeros((count, length), np.int64)
        height = np.zeros(count, np.int64)
        for symbol in inputs.T:
            push = symbol != POP
            stack[rows[push], height[push]] = np.where(symbol[push] >= PUSH0, symbol[push] - PUSH0, symbol[push])
            height = np.where(push, height + 1, np.maximum(height - 1, 0))
        # top first: output j is stack[height - 1 - j] while j < height, then the terminator, then 0s
        column = np.arange(length + 1)[None, :]
        below = np.clip(height[:, None] - 1 - column, 0, length - 1)
        outputs = np.where(column < height[:, None], stack[rows[:, None], below], 0)
        outputs[rows, height] = END
        return TaskBatch(inputs, outputs, column <= height[:, None])
