"""Kazemnejad et al.'s summation task (`s2s_sum`): `Compute: v1 + .. + vL . [SEP]`, answered modulo 10."""

from __future__ import annotations

import numpy as np

from lextra.errors import ConfigError
from lextra.tasks.base import TaskBatch
from lextra.tasks.kazemnejad.suite import ARITHMETIC_TEST, ARITHMETIC_TRAIN, KazemnejadTask, listed, number_digits, pack
from lextra.tasks.registry import TRAINING_TASKS

COMPUTE, PLUS, DOT, SEP, THE, ANSWER, IS = range(10, 17)


@TRAINING_TASKS.register("kazemnejad.summation")
class Summation(KazemnejadTask):
    """L digits 1-9, answered by their sum modulo `modulo` written digit by digit (Kazemnejad et al. 2023, arXiv
    2305.19466; the authors' `s2s_sum` configuration uses modulo 10)."""

    summary = "Compute: v1 + .. + vL . [SEP] -> The answer is sum % 10 . (Kazemnejad 2023)"
    alphabet = (*"0123456789", "Compute:", "+", ".", "[SEP]", "The", "answer", "is")
    train_lengths, test_lengths = ARITHMETIC_TRAIN, ARITHMETIC_TEST

    def __init__(self, *, modulo: int = 10) -> None:
        super().__init__()
        if modulo < 2:
            raise ConfigError(f"task kazemnejad.summation: modulo must be >= 2, got {modulo}")
        self.modulo = modulo

    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        length = self.check_length(length)
        values = rng.integers(1, 10, size=(count, length), dtype=np.int64)
        answer = number_digits(values.sum(axis=1) % self.modulo, len(str(self.modulo - 1)))
        inputs = pack(count, COMPUTE, listed(values, PLUS), DOT, SEP)
        return TaskBatch(inputs, pack(count, THE, ANSWER, IS, answer, DOT))
