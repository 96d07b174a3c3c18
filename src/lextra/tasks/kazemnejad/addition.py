"""Kazemnejad et al.'s addition task (`s2s_addition`): `Compute a + b ?` answered by `The answer is a+b .`."""

from __future__ import annotations

import numpy as np

from lextra.errors import ConfigError
from lextra.tasks.base import PAD, TaskBatch
from lextra.tasks.kazemnejad.suite import ARITHMETIC_TEST, ARITHMETIC_TRAIN, KazemnejadTask, pack, strip_zeros
from lextra.tasks.registry import TRAINING_TASKS

COMPUTE, PLUS, QUESTION, THE, ANSWER, IS, DOT = range(10, 17)


@TRAINING_TASKS.register("kazemnejad.addition")
class Addition(KazemnejadTask):
    """Two numbers, digit by digit (no leading zeros), and their sum (Kazemnejad et al. 2023, arXiv 2305.19466).
    The authors draw a digit-count pair (uniform over pairs, 4..8 each in training; at test at least one 9..16)
    and the numbers uniformly with those counts; a length here is the longer count, the pair uniform among those
    with that maximum, the other count from `min_digits` (the builder's `--train_min`)."""

    summary = "Compute a + b ? -> The answer is a+b . (Kazemnejad 2023)"
    alphabet = (*"0123456789", "Compute", "+", "?", "The", "answer", "is", ".")
    train_lengths, test_lengths = ARITHMETIC_TRAIN, ARITHMETIC_TEST

    def __init__(self, *, min_digits: int = 4) -> None:
        super().__init__()
        if min_digits < 1:
            raise ConfigError(f"task kazemnejad.addition: min_digits must be >= 1, got {min_digits}")
        self.min_digits = min_digits

    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        length = self.check_length(length)
        low = min(self.min_digits, length)
        span = length - low
        pair = rng.integers(0, 2 * span + 1, size=count)  # (L, low..L) then (low..L-1, L)
        first = np.where(pair <= span, length, low + pair - span - 1)
        second = np.where(pair <= span, low + pair, length)
        a, b = self._operand(first, length, rng), self._operand(second, length, rng)
        total = np.zeros((count, length + 1), np.int64)
        carry = np.zeros(count, np.int64)
        a0, b0 = np.where(a == PAD, 0, a), np.where(b == PAD, 0, b)
        for column in range(length - 1, -1, -1):
            digit = a0[:, column] + b0[:, column] + carry
            total[:, column + 1], carry = digit % 10, digit // 10
        total[:, 0] = carry
        inputs = pack(count, COMPUTE, a, PLUS, b, QUESTION)
        return TaskBatch(inputs, pack(count, THE, ANSWER, IS, strip_zeros(total), DOT))

    @staticmethod
    def _operand(digits: np.ndarray, width: int, rng: np.random.Generator) -> np.ndarray:
        """Numbers of `digits` digits each (a first digit 1-9 unless one digit), right-aligned in `width`."""
        count = len(digits)
        values = rng.integers(0, 10, size=(count, width), dtype=np.int64)
        start = width - digits
        lead = rng.integers(1, 10, size=count, dtype=np.int64)
        rows = np.arange(count)
        values[rows, start] = np.where(digits > 1, lead, values[rows, start])
        return np.where(np.arange(width)[None, :] >= start[:, None], values, PAD)
