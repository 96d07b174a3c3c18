"""Kazemnejad et al.'s reverse task (`s2s_reverse`): `Reverse: x1 .. xL [SEP]` answered by `xL .. x1`."""

from __future__ import annotations

import numpy as np

from lextra.tasks.base import TaskBatch
from lextra.tasks.kazemnejad.suite import SEQUENCE_TEST, SEQUENCE_TRAIN, SYMBOLS, KazemnejadTask, choose, pack
from lextra.tasks.registry import TRAINING_TASKS

#: the builder's `--task_type` values (split prefixes mc, mc2x, mcrv)
VARIANTS = ("multi_char", "multi_char_2x", "multi_char_rev_cop")
REVERSE, SEP, NEXT = range(len(SYMBOLS), len(SYMBOLS) + 3)


@TRAINING_TASKS.register("kazemnejad.reverse")
class Reverse(KazemnejadTask):
    """L tokens drawn uniformly from 100 after `Reverse:`, answered reversed (Kazemnejad et al. 2023, arXiv
    2305.19466); `multi_char_2x` answers `rev [NEXT] rev`, `multi_char_rev_cop` `rev [NEXT] tokens`. The authors'
    tokens are the first 100 one-token T5 strings; here 100 symbols."""

    summary = "Reverse: tokens [SEP] -> the tokens reversed (Kazemnejad 2023)"
    alphabet = (*SYMBOLS, "Reverse:", "[SEP]", "[NEXT]")
    train_lengths, test_lengths = SEQUENCE_TRAIN, SEQUENCE_TEST

    def __init__(self, *, variant: str = "multi_char") -> None:
        super().__init__()
        self.variant = choose("kazemnejad.reverse", "variant", variant, VARIANTS)

    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        length = self.check_length(length)
        source = rng.integers(0, len(SYMBOLS), size=(count, length), dtype=np.int64)
        reverse = source[:, ::-1]
        if self.variant == "multi_char":
            target = reverse.copy()
        else:
            target = pack(count, reverse, NEXT, reverse if self.variant == "multi_char_2x" else source)
        return TaskBatch(pack(count, REVERSE, source, SEP), target)
