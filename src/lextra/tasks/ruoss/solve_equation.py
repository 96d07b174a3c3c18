"""Ruoss et al.'s solve_equation (context-free): a bracketed equation mod m with one unknown x, answered by x."""

from __future__ import annotations

import numpy as np

from lextra.tasks.base import TaskBatch
from lextra.tasks.registry import TRAINING_TASKS
from lextra.tasks.ruoss.modular_arithmetic_brackets import check_modulus, sample_expressions
from lextra.tasks.ruoss.suite import RuossTask

#: the symbols after the digits, in the authors' order for this task (`alphabet_to_int`: no `*`)
SYMBOLS = ("+", "-", "(", ")", "x", "=")


@TRAINING_TASKS.register("ruoss.solve_equation")
class SolveEquation(RuossTask):
    """Input `E = v`: a modular_arithmetic_brackets expression E of L - 2 symbols drawn with + and - only (the
    authors' `solve_equation`, mult=False), one digit of it replaced by `x`, and its value v; output one symbol,
    the replaced digit (the unique solution). As in their code the digit is the first one at or after a uniform
    position of E, cyclically, so not uniform over E's digits; at L < 3 every input symbol and the output are 0.
    Indices as theirs: digit d is d, + - ( ) x = are m..m+5; m = 5 in the paper."""

    summary = "bracketed equation mod m with one x -> x (Ruoss 2023, context-free)"
    alphabet = (*(str(d) for d in range(5)), *SYMBOLS)

    def __init__(self, *, modulus: int = 5) -> None:
        super().__init__()
        self.modulus = check_modulus("ruoss.solve_equation", modulus)
        self.alphabet = (*(str(d) for d in range(modulus)), *SYMBOLS)  # follows the option

    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        length = self.check_length(length)
        m = self.modulus
        if length < 3:
            return TaskBatch(np.zeros((count, length), np.int64), np.zeros((count, 1), np.int64))
        width = length - 2
        tokens, values = sample_expressions(width, count, m, False, rng)
        tokens = np.where(tokens >= m + 3, tokens - 1, tokens)  # ( ) sit at m+2, m+3 here (no `*`)
        # the authors' choice of the unknown: a uniform position, then forward (cyclically) to the next digit
        position = rng.integers(0, width, size=count)
        column = np.arange(width)
        next_digit = np.where(tokens < m, column, width)
        next_digit = np.minimum.accumulate(next_digit[:, ::-1], axis=1)[:, ::-1]
        rows = np.arange(count)
        chosen = next_digit[rows, position]
        chosen = np.where(chosen < width, chosen, next_digit[:, 0])
        solution = tokens[rows, chosen]
        tokens[rows, chosen] = m + 4
        inputs = np.concatenate([tokens, np.full((count, 1), m + 5, np.int64), values[:, None]], axis=1)
        return TaskBatch(inputs, solution[:, None])
