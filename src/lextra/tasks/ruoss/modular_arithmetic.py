"""Ruoss et al.'s modular_arithmetic (regular): an expression of digits mod m and + - *, answered by its value."""

from __future__ import annotations

import numpy as np

from lextra.errors import ConfigError
from lextra.tasks.base import TaskBatch
from lextra.tasks.registry import TRAINING_TASKS
from lextra.tasks.ruoss.suite import RuossTask

#: the operator symbols after the digits, in the authors' order (`OP_BY_CHARACTER`); `_` (blank) is never drawn
OPERATORS = ("+", "-", "*", "_")


@TRAINING_TASKS.register("ruoss.modular_arithmetic")
class ModularArithmetic(RuossTask):
    """Input: digits uniform in 0..m-1 at even positions, operators uniform over + - * at odd positions; output
    one symbol, the value mod m with * binding tighter than + and - (the authors' `modular_arithmetic`, m = 5
    in the paper). Indices as theirs: digit d is d, + - * _ are m..m+3 (`_` is in their one-hot width but never
    drawn). As their code does, an even length L is cut to L - 1 (the input has L - 1 symbols); their int32
    products could wrap for ~16 chained nonzero factors, which this exact arithmetic does not reproduce."""

    summary = "digits mod m with + - * -> the value (Ruoss 2023, regular)"
    alphabet = (*(str(d) for d in range(5)), *OPERATORS)

    def __init__(self, *, modulus: int = 5) -> None:
        super().__init__()
        if isinstance(modulus, bool) or not isinstance(modulus, int) or modulus < 2:
            raise ConfigError(f"task ruoss.modular_arithmetic: modulus must be an int >= 2, got {modulus!r}")
        self.modulus = modulus
        # the alphabet follows the option (the class's is the paper's m = 5)
        self.alphabet = (*(str(d) for d in range(modulus)), *OPERATORS)

    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        length = self.check_length(length)
        length -= 1 - length % 2  # the authors' code: an even length becomes odd by subtracting one
        m = self.modulus
        digits = rng.integers(0, m, size=(count, length // 2 + 1), dtype=np.int64)
        ops = rng.integers(0, 3, size=(count, length // 2), dtype=np.int64)  # 0: +, 1: -, 2: *
        inputs = np.empty((count, length), np.int64)
        inputs[:, ::2], inputs[:, 1::2] = digits, m + ops
        # left to right: `total` holds the finished additive terms, `term` the signed product being built
        total = np.zeros(count, np.int64)
        term = digits[:, 0] % m
        for k in range(length // 2):
            op, digit = ops[:, k], digits[:, k + 1]
            multiply = op == 2
            total = np.where(multiply, total, (total + term) % m)
            term = np.where(multiply, term * digit, np.where(op == 1, -digit, digit)) % m
        return TaskBatch(inputs, ((total + term) % m)[:, None])
