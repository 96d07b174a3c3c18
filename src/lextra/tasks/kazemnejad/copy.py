"""Kazemnejad et al.'s copy task (`s2s_copy`): `Copy: x1 .. xL [SEP]` answered by the tokens again."""

from __future__ import annotations

import numpy as np

from lextra.tasks.base import TaskBatch
from lextra.tasks.kazemnejad.suite import SEQUENCE_TEST, SEQUENCE_TRAIN, SYMBOLS, KazemnejadTask, choose, pack
from lextra.tasks.registry import TRAINING_TASKS

#: the builder's `--copy_task_type` values (split prefixes cmc, cmc2x, rsc, rsc2x, rdc)
VARIANTS = (
    "copy_multi_char",
    "copy_multi_char_2x",
    "repeat_single_char",
    "repeat_single_2x_char",
    "repeat_double_char",
)
COPY, SEP, NEXT, REPLACE, WITH, IN = range(len(SYMBOLS), len(SYMBOLS) + 6)


@TRAINING_TASKS.register("kazemnejad.copy")
class Copy(KazemnejadTask):
    """L tokens drawn uniformly from 100 after `Copy:`, copied (Kazemnejad et al. 2023, arXiv 2305.19466); the
    `_2x` variants answer twice (`[NEXT]` between, or one token 2L times), `repeat_double_char` reads `Replace a
    with b in a .. a`. The authors' tokens are T5 one-token strings (the repeat variants use each of the first few
    hundred once per length); here 100 symbols, drawn per row."""

    summary = "Copy: tokens [SEP] -> the tokens (Kazemnejad 2023)"
    alphabet = (*SYMBOLS, "Copy:", "[SEP]", "[NEXT]", "Replace", "with", "in")
    train_lengths, test_lengths = SEQUENCE_TRAIN, SEQUENCE_TEST

    def __init__(self, *, variant: str = "copy_multi_char") -> None:
        super().__init__()
        self.variant = choose("kazemnejad.copy", "variant", variant, VARIANTS)

    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        length = self.check_length(length)
        n = len(SYMBOLS)
        if self.variant.startswith("copy"):
            source = rng.integers(0, n, size=(count, length), dtype=np.int64)
            target = source if self.variant == "copy_multi_char" else pack(count, source, NEXT, source)
            return TaskBatch(pack(count, COPY, source, SEP), target)
        token = rng.integers(0, n, size=(count, 1), dtype=np.int64)
        source = np.repeat(token, length, axis=1)
        if self.variant == "repeat_single_char":
            return TaskBatch(pack(count, COPY, source, SEP), source)
        if self.variant == "repeat_single_2x_char":
            return TaskBatch(pack(count, COPY, source, SEP), np.repeat(token, 2 * length, axis=1))
        other = (token + rng.integers(1, n, size=(count, 1), dtype=np.int64)) % n  # uniform over the others
        inputs = pack(count, REPLACE, token, WITH, other, IN, source, SEP)
        return TaskBatch(inputs, np.repeat(other, length, axis=1))
