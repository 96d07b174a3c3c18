"""Ruoss et al.'s modular_arithmetic_brackets (context-free): a bracketed expression mod m, answered by its value."""

from __future__ import annotations

import numpy as np

from lextra.errors import ConfigError
from lextra.tasks.base import TaskBatch
from lextra.tasks.registry import TRAINING_TASKS
from lextra.tasks.ruoss.suite import RuossTask

#: the symbols after the digits, in the authors' order (`alphabet_to_int`); `x` is in their one-hot width only
SYMBOLS = ("+", "-", "*", "(", ")", "x")


def check_modulus(task: str, modulus: int) -> int:
    if isinstance(modulus, bool) or not isinstance(modulus, int) or modulus < 2:
        raise ConfigError(f"task {task}: modulus must be an int >= 2, got {modulus!r}")
    return modulus


def sample_expressions(
    length: int, count: int, modulus: int, mult: bool, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """`count` expressions of `length` symbols drawn as the authors' `generate_one_expression_and_result` draws
    them, and their values: (count, length) symbols (digit d is d, then + - * ( ) are modulus + 0..4) and
    (count,) values. Vectorised over all rows, one level of the expression tree at a time."""
    plus, minus, lpar, rpar = modulus, modulus + 1, modulus + 3, modulus + 4
    tokens = np.empty((count, length), np.int64)
    value = np.zeros(count * max(length, 1), np.int64)  # one per tree node; a node spans >= 1 symbol
    row, start, size, node = np.arange(count), np.zeros(count, np.int64), np.full(count, length), np.arange(count)
    next_node = count
    internal: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    while row.size:
        leaf = size < 5
        # a leaf of length 1..4 is d, -d, (d), (-d)
        r, s, z = row[leaf], start[leaf], size[leaf]
        digit = rng.integers(0, modulus, size=r.size)
        negated = (z == 2) | (z == 4)
        value[node[leaf]] = np.where(negated, -digit, digit) % modulus
        bracketed = z >= 3
        tokens[r[bracketed], s[bracketed]] = lpar
        tokens[r[bracketed], (s + z - 1)[bracketed]] = rpar
        tokens[r[negated], (s + (z == 4))[negated]] = minus
        tokens[r, s + np.array([0, 0, 1, 1, 2])[z]] = digit
        # a longer one is (left op right), the left part of length uniform in 1..size-4
        r, s, z, n = row[~leaf], start[~leaf], size[~leaf], node[~leaf]
        left = rng.integers(1, z - 3)
        op = rng.integers(0, 3 if mult else 2, size=r.size)
        tokens[r, s], tokens[r, s + 1 + left], tokens[r, s + z - 1] = lpar, plus + op, rpar
        left_node = next_node + np.arange(r.size)
        right_node = left_node + r.size
        next_node += 2 * r.size
        internal.append((n, left_node, right_node, op))
        row, node = np.concatenate([r, r]), np.concatenate([left_node, right_node])
        start, size = np.concatenate([s + 1, s + 2 + left]), np.concatenate([left, z - 3 - left])
    for n, left_node, right_node, op in reversed(internal):
        a, b = value[left_node], value[right_node]
        value[n] = np.where(op == 0, a + b, np.where(op == 1, a - b, a * b)) % modulus
    return tokens, value[:count]


@TRAINING_TASKS.register("ruoss.modular_arithmetic_brackets")
class ModularArithmeticBrackets(RuossTask):
    """Input: a random fully bracketed expression of exactly L symbols, grown top down as the authors'
    `generate_one_expression_and_result` does (length 1..4: d, -d, (d), (-d); else `(left op right)` with the
    left length uniform in 1..L-4, op uniform over + - *, digits uniform mod m); output one symbol, its value
    mod m. The paper's runs use m = 5 and mult=True (`*` drawn; the class default of the authors' code is False).
    Indices as theirs: digit d is d, + - * ( ) x are m..m+5 (`x` is in their one-hot width but never drawn)."""

    summary = "bracketed expression mod m -> the value (Ruoss 2023, context-free)"
    alphabet = (*(str(d) for d in range(5)), *SYMBOLS)

    def __init__(self, *, modulus: int = 5, mult: bool = True) -> None:
        super().__init__()
        self.modulus = check_modulus("ruoss.modular_arithmetic_brackets", modulus)
        self.mult = bool(mult)
        self.alphabet = (*(str(d) for d in range(modulus)), *SYMBOLS)  # follows the option

    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        length = self.check_length(length)
        tokens, values = sample_expressions(length, count, self.modulus, self.mult, rng)
        return TaskBatch(tokens, values[:, None])
