"""Kazemnejad et al.'s parity task (`s2s_parity`): `Is the number of 1's even in the sequence [ .. ] ?`."""

from __future__ import annotations

import numpy as np

from lextra.tasks.base import LengthRange, TaskBatch
from lextra.tasks.kazemnejad.suite import ARITHMETIC_TEST, KazemnejadTask, listed, pack
from lextra.tasks.registry import TRAINING_TASKS

WORDS: tuple[str, ...] = ("Is", "the", "number", "of", "1's", "even", "in", "sequence", "[", ",", "]", "?")
WORDS += ("The", "answer", "is", "Yes", "No", ".")
IS_, THE, NUMBER, OF, ONES, EVEN, IN, SEQUENCE, OPEN, COMMA, CLOSE, QUESTION = range(2, 14)
THE_, ANSWER, IS, YES, NO, DOT = range(14, 20)


@TRAINING_TASKS.register("kazemnejad.parity")
class Parity(KazemnejadTask):
    """L uniform bits, answered `Yes` when the number of 1s is even, else `No` (Kazemnejad et al. 2023, arXiv
    2305.19466); the builder's training lengths start at 3."""

    summary = "Is the number of 1's even in the sequence [ bits ] ? -> The answer is Yes/No . (Kazemnejad 2023)"
    alphabet = ("0", "1", *WORDS)
    train_lengths, test_lengths = LengthRange(3, 8), ARITHMETIC_TEST

    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        length = self.check_length(length)
        bits = rng.integers(0, 2, size=(count, length), dtype=np.int64)
        answer = np.where(bits.sum(axis=1) % 2 == 0, YES, NO)[:, None]
        words = (IS_, THE, NUMBER, OF, ONES, EVEN, IN, THE, SEQUENCE, OPEN)
        inputs = pack(count, *words, listed(bits, COMMA), CLOSE, QUESTION)
        return TaskBatch(inputs, pack(count, THE_, ANSWER, IS, answer, DOT))
