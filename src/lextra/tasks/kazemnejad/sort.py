"""Kazemnejad et al.'s sort task (`s2s_sort`): `Sort the following list [ .. ] .` answered by the sorted list."""

from __future__ import annotations

import numpy as np

from lextra.tasks.base import TaskBatch
from lextra.tasks.kazemnejad.suite import (
    ARITHMETIC_TEST,
    ARITHMETIC_TRAIN,
    KazemnejadTask,
    choose,
    listed,
    number_digits,
    pack,
)
from lextra.tasks.registry import TRAINING_TASKS

#: single token (split `len_sngd_tr8_ts16`) or multi digit (`len_mltd_tr8_ts16`)
VARIANTS = ("single_token", "multi_digit")
#: the single-token variant's 50 tokens in their sort order (the authors' first 50 one-token T5 strings)
TOKENS = tuple("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN")
WORDS = ("Sort", "the", "following", "list", "[", ",", "]", ".", "The", "sorted", "is")
SORT, THE, FOLLOWING, LIST, OPEN, COMMA, CLOSE, DOT, THE_, SORTED, IS = range(len(TOKENS), len(TOKENS) + len(WORDS))


@TRAINING_TASKS.register("kazemnejad.sort")
class Sort(KazemnejadTask):
    """A list of L items, answered sorted (Kazemnejad et al. 2023, arXiv 2305.19466): `single_token` draws from 50
    tokens ordered by their index (the authors': the first 50 one-token T5 strings, here 0-9 a-z A-N),
    `multi_digit` numbers 10..9999 written digit by digit; items comma-separated, as the authors' strings."""

    summary = "Sort the following list [ .. ] . -> The sorted list is [ .. ] . (Kazemnejad 2023)"
    alphabet = (*TOKENS, *WORDS)
    train_lengths, test_lengths = ARITHMETIC_TRAIN, ARITHMETIC_TEST

    def __init__(self, *, variant: str = "single_token") -> None:
        super().__init__()
        self.variant = choose("kazemnejad.sort", "variant", variant, VARIANTS)

    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        length = self.check_length(length)
        if self.variant == "single_token":
            items = rng.integers(0, len(TOKENS), size=(count, length), dtype=np.int64)
            source, target = items, np.sort(items, axis=1)
        else:
            items = rng.integers(10, 10_000, size=(count, length), dtype=np.int64)
            source, target = number_digits(items, 4), number_digits(np.sort(items, axis=1), 4)
        inputs = pack(count, SORT, THE, FOLLOWING, LIST, OPEN, listed(source, COMMA), CLOSE, DOT)
        outputs = pack(count, THE_, SORTED, LIST, IS, OPEN, listed(target, COMMA), CLOSE, DOT)
        return TaskBatch(inputs, outputs)
