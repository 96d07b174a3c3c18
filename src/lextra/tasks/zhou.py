"""Zhou et al.'s decimal addition (Zhou et al. 2024, Transformers Can Achieve Length Generalization But Not Robustly,
arXiv 2402.09371): two N-digit numbers written least significant digit first, each digit after its index hint,
e.g. 576 + 361 = 937 as `a6b7c5+a1b6c3=a7b3c9` (their Figure 2)."""

from __future__ import annotations

import string

import numpy as np

from lextra.errors import ConfigError
from lextra.tasks.base import PAD, AlgorithmicTask, LengthRange, Suite, TaskBatch
from lextra.tasks.registry import TRAINING_TASKS

ZHOU = Suite(
    name="zhou",
    paper="Zhou et al. 2024, Transformers Can Achieve Length Generalization But Not Robustly (arXiv 2402.09371)",
    code="none released; the format is the paper's Figure 2 and Appendix B.1",
    notes=(
        "decoder (causal LM), 25M parameters: 6 blocks, width 512, 8 heads, FIRE + randomized positions; 30M "
        "examples, length uniform in 1-40, reversed format with index hints from 102 symbols; test 1,000 examples "
        "per length up to 100, greedy decoding, exact match"
    ),
)
#: the authors' training range and the test range lextra uses by default (their Figures 1 and 3 reach 100 digits)
TRAIN = LengthRange(1, 40)
TEST = LengthRange(41, 100)

PLUS, EQUALS = 10, 11
#: the index-hint letters, one character each and all distinct: a-z, A-Z, then Greek and Cyrillic letters that
#: do not look like Latin ones (the paper's 102 hints are "a pre-defined ordered index set", symbols unnamed)
HINT_LETTERS = (
    string.ascii_lowercase
    + string.ascii_uppercase
    + "αβγδεζηθικλμνξπρστυφχψω"
    + "ΓΔΘΛΞΠΣΦΨΩ"
    + "бвгджзийклмнптфцчшщъыьэюя"
)


@TRAINING_TASKS.register("zhou.addition")
class ZhouAddition(AlgorithmicTask):
    """Input `A+B=`, output the sum; length N = the digits of each operand, both operands N digits (the authors
    draw one length per example, then the two operands independently; a leading digit is nonzero when N > 1).

    As the authors (Appendix B.1): every number is written with N + 1 digits (a zero padding "to accommodate
    potential carry-induced extra digits"; `pad=False` writes Figure 2's unpadded form, the sum then N or N + 1
    digits); the hints of a row are a run of consecutive symbols from an ordered set of `hint_symbols` (102),
    its start drawn at random for every example, in training and at inference alike; every number of the row
    starts its run at the same symbol and the hints follow the writing order (so with `reverse=False` the first,
    most significant digit takes the first hint, as Zhou et al. 2023's `a4b2+a3b9=a8b1`). Exact match.
    """

    summary = "A+B= -> A+B, digits reversed, each after an index hint (Zhou 2024)"
    suite = ZHOU
    style = "decoder"
    score = "exact"
    mixed_lengths = True
    train_lengths, test_lengths = TRAIN, TEST
    alphabet = (*string.digits, "+", "=", *HINT_LETTERS[:102])

    def __init__(
        self, *, index_hints: bool = True, reverse: bool = True, pad: bool = True, hint_symbols: int = 102
    ) -> None:
        integer = isinstance(hint_symbols, int | np.integer) and not isinstance(hint_symbols, bool)
        if not integer or not 2 <= hint_symbols <= len(HINT_LETTERS):
            raise ConfigError(
                f"task zhou.addition: hint_symbols={hint_symbols!r} must be an integer in 2-{len(HINT_LETTERS)} "
                f"(the paper uses 102; a length N needs N + 1)"
            )
        self.index_hints, self.reverse, self.pad, self.hint_symbols = index_hints, reverse, pad, hint_symbols
        hints = HINT_LETTERS[:hint_symbols] if index_hints else ""
        self.alphabet = (*string.digits, "+", "=", *hints)  # the class's alphabet is the default options'

    def check_length(self, length: int) -> int:
        length = super().check_length(length)
        if self.index_hints and length + 1 > self.hint_symbols:
            raise ConfigError(
                f"task zhou.addition: length {length} needs {length + 1} index hints (the sum's digits), "
                f"hint_symbols={self.hint_symbols} has fewer; raise hint_symbols to {length + 1} or more "
                f"(at most {len(HINT_LETTERS)}) or use lengths up to {self.hint_symbols - 1}"
            )
        return length

    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        length = self.check_length(length)
        a = rng.integers(0, 10, size=(count, length), dtype=np.int64)
        b = rng.integers(0, 10, size=(count, length), dtype=np.int64)
        if length > 1:  # an N-digit number: its most significant digit (the last here) is not zero
            a[:, -1] = rng.integers(1, 10, size=count)
            b[:, -1] = rng.integers(1, 10, size=count)
        start = (
            rng.integers(0, self.hint_symbols - length, size=count) if self.index_hints else np.zeros(count, np.int64)
        )
        return self.write(a, b, start)

    def write(self, a: np.ndarray, b: np.ndarray, start: np.ndarray) -> TaskBatch:
        """The examples `a + b`: operand digits (n, N), least significant first, and each row's first hint index
        `start` (n,) (ignored without hints)."""
        n, length = a.shape
        total = a + b
        # carry out of digit i: the carry generated at the last digit j <= i whose sum is not 9 (a 9 passes one on)
        stops = np.where(total != 9, np.arange(length), -1)
        last = np.maximum.accumulate(stops, axis=1)
        carry = (last >= 0) & (np.take_along_axis(total, np.maximum(last, 0), axis=1) >= 10)
        carry_in = np.concatenate([np.zeros((n, 1), bool), carry[:, :-1]], axis=1)
        digits = np.concatenate([(total + carry_in) % 10, carry[:, -1:].astype(np.int64)], axis=1)
        width = length + 1 if self.pad else length
        zero = np.zeros((n, width - length), np.int64)
        full = np.full(n, width)
        sum_digits = full if self.pad else length + carry[:, -1]
        inputs = np.concatenate(
            [
                self._number(np.concatenate([a, zero], axis=1), full, start),
                np.full((n, 1), PLUS),
                self._number(np.concatenate([b, zero], axis=1), full, start),
                np.full((n, 1), EQUALS),
            ],
            axis=1,
        )
        return TaskBatch(inputs, self._number(digits[:, : int(sum_digits.max(initial=width))], sum_digits, start))

    def _number(self, digits: np.ndarray, count: np.ndarray, start: np.ndarray) -> np.ndarray:
        """Rows of `count` digits (least significant first in `digits`) written in the task's order, each after
        its hint; PAD after a row's last symbol."""
        n, width = digits.shape
        column = np.arange(width)[None, :]
        present = column < count[:, None]
        if not self.reverse:  # most significant first: the j-th written digit is digit count - 1 - j
            digits = np.take_along_axis(digits, np.clip(count[:, None] - 1 - column, 0, None), axis=1)
        if not self.index_hints:
            return np.where(present, digits, PAD)
        out = np.empty((n, 2 * width), np.int64)
        out[:, 0::2] = PLUS + 2 + start[:, None] + column  # the hint letters follow the digits, '+' and '='
        out[:, 1::2] = digits
        return np.where(np.repeat(present, 2, axis=1), out, PAD)
