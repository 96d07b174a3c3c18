"""Multi-query associative recall, MQAR (Arora et al. 2023, Zoology: Measuring and Improving Recall in Efficient
Language Models, arXiv 2312.04927): key-value pairs, then queries of their keys among filler; recall each value."""

from __future__ import annotations

import math

import numpy as np

from lextra.errors import ConfigError
from lextra.tasks.base import PAD, AlgorithmicTask, LengthRange, Suite, TaskBatch
from lextra.tasks.registry import TRAINING_TASKS

ZOOLOGY = Suite(
    name="zoology",
    paper="Arora et al. 2023, Zoology: Measuring and Improving Recall in Efficient Language Models (arXiv 2312.04927)",
    code="HazyResearch/zoology: zoology/data/multiquery_ar.py, multiquery_ar (formerly data/associative_recall.py)",
    notes=(
        "vocab 8192, keys from one half and values from the other; 64/128/256 tokens with 4/8/16 pairs (their "
        "configs also test 64-1024 tokens with up to 256 pairs); query gaps power-law, power_a 0.01; labels only "
        "at the queries, per-token accuracy"
    ),
)
#: training at Zoology's shortest setting (64 tokens, 4 pairs); every test length is scored, so the default test
#: range stops at 4x (256, their longest training length); `--lengths 65-1024` reaches their longest test
TRAIN = LengthRange(64, 64)
TEST = LengthRange(65, 256)
#: `pairs` counts the pairs per this many tokens under shift="pairs" (Zoology: 4 per 64, 8 per 128, 16 per 256)
REFERENCE = 64
SHIFTS = ("pairs", "gaps")
FILLERS = ("random", "zero")


@TRAINING_TASKS.register("mqar")
class MQAR(AlgorithmicTask):
    """Zoology's layout (their `multiquery_ar`, num_passes 1): P key-value pairs `k v k v ...`, then the query
    region: P query slots at even offsets, each query a pair's key (every key once, in random order), the slots
    drawn without replacement with p(i) ~ i^(power_a - 1) (power_a 1: uniform), filler everywhere else; length =
    the input's tokens (Zoology's `input_seq_len`). Inline style: the answer to a query is the prediction at the
    query itself (the next position holds filler, not the value), scored per token over the queried values.

    `vocab` counts keys and values only (`k0..`, `v0..`) and filler `_` is extra (Zoology's key 0); where lextra
    departs: `filler="random"` draws filler from the values, where Zoology's `random_non_queries` draws it from the
    whole vocabulary, so a filler there can be a key that reads as a spurious query; `"zero"` is one filler token
    (their `random_non_queries=False`, their paper's figure configs). Values are distinct within a row, as theirs.

    Length shift: `shift="pairs"` holds Zoology's density, `pairs` per 64 tokens (L * pairs / 64 pairs at length
    L: 4, 8, 16 at 64, 128, 256 by default), `shift="gaps"` holds `pairs` at every length, so only the query
    region, and the power-law gaps drawn over it, grows.
    """

    summary = "k v pairs, queries among filler -> the queried values (Zoology MQAR, Arora 2023)"
    suite = ZOOLOGY
    style = "inline"
    score = "per_token"
    mixed_lengths = True
    train_lengths, test_lengths = TRAIN, TEST
    min_length = 16
    alphabet = (*(f"k{i}" for i in range(128)), *(f"v{i}" for i in range(128)), "_")

    def __init__(
        self,
        *,
        vocab: int = 256,
        pairs: int = 4,
        shift: str = "pairs",
        power_a: float = 0.01,
        filler: str = "random",
    ) -> None:
        if shift not in SHIFTS:
            raise ConfigError(f"task mqar: shift={shift!r} is not one of {', '.join(SHIFTS)}")
        if filler not in FILLERS:
            raise ConfigError(f"task mqar: filler={filler!r} is not one of {', '.join(FILLERS)}")
        if isinstance(pairs, bool) or not isinstance(pairs, int | np.integer) or pairs < 1:
            raise ConfigError(f"task mqar: pairs={pairs!r} must be a positive integer (Zoology: 4 at 64 tokens)")
        if shift == "pairs" and pairs > REFERENCE // 4:
            raise ConfigError(
                f"task mqar: pairs={pairs} per {REFERENCE} tokens leaves no room for the queries (each pair takes 4 "
                f"tokens: key, value, query, filler); use pairs <= {REFERENCE // 4} or shift='gaps'"
            )
        if isinstance(vocab, bool) or not isinstance(vocab, int | np.integer) or vocab < 2 * pairs:
            raise ConfigError(
                f"task mqar: vocab={vocab!r} holds fewer than {pairs} keys and {pairs} values; use vocab >= {2 * pairs}"
            )
        if not 0.0 < float(power_a) < math.inf:
            raise ConfigError(f"task mqar: power_a={power_a!r} must be positive (Zoology: 0.01; 1.0 is uniform)")
        self.vocab, self.pairs, self.shift, self.filler = int(vocab), int(pairs), shift, filler
        self.power_a = float(power_a)
        self.keys = self.vocab // 2  # keys from the lower half, values from the upper, as Zoology's
        keys, values = (f"k{i}" for i in range(self.keys)), (f"v{i}" for i in range(self.vocab - self.keys))
        # the class's alphabet and smallest length are the default options'; these options' are the instance's
        self.alphabet = (*keys, *values, "_")
        self.min_length = self._min_length()

    @property
    def filler_id(self) -> int:
        return self.vocab

    def pairs_at(self, length: int) -> int:
        """The number of key-value pairs at task length `length`."""
        return self.pairs * length // REFERENCE if self.shift == "pairs" else self.pairs

    def _min_length(self) -> int:
        if self.shift == "gaps":
            return 4 * self.pairs
        return -(-REFERENCE // self.pairs)  # the first length with one pair (4 tokens per pair then hold)

    def check_length(self, length: int) -> int:
        """`length` as an int, else a ConfigError: too short for its pairs, or more pairs than `vocab` holds."""
        if isinstance(length, bool) or not isinstance(length, int | np.integer):
            raise ConfigError(f"task mqar: a length is a whole number of tokens, got {length!r}")
        length, pairs = int(length), self.pairs_at(int(length))
        if length < self.min_length:
            why = (
                f"its {pairs} pairs take 4 tokens each (key, value, query and its filler)"
                if self.shift == "gaps"
                else f"at {self.pairs} pairs per {REFERENCE} tokens it holds no pair"
            )
            raise ConfigError(f"task mqar: length {length} is too short, {why}; use lengths from {self.min_length}")
        if pairs > self.keys or pairs > self.vocab - self.keys:
            raise ConfigError(
                f"task mqar: length {length} needs {pairs} distinct keys and values, vocab={self.vocab} holds "
                f"{self.keys} keys; raise vocab to {2 * pairs} or more"
            )
        return length

    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        length = self.check_length(length)
        pairs = self.pairs_at(length)
        context = 2 * pairs
        slots = (length - context) // 2  # query slots: the even offsets of the query region
        keys = _distinct(rng, count, self.keys, pairs)
        values = self.keys + _distinct(rng, count, self.vocab - self.keys, pairs)
        inputs = np.empty((count, length), np.int64)
        inputs[:, 0:context:2], inputs[:, 1:context:2] = keys, values
        if self.filler == "random":
            inputs[:, context:] = rng.integers(self.keys, self.vocab, size=(count, length - context))
        else:
            inputs[:, context:] = self.filler_id
        # the query slots: P of them without replacement, p(i) ~ (i + 1)^(power_a - 1) (Gumbel top-k draws them as
        # successive weighted draws do, Zoology's np.random.choice(replace=False, p=p)), then read in order
        scores = (float(self.power_a) - 1.0) * np.log(np.arange(1, slots + 1)) + rng.gumbel(size=(count, slots))
        chosen = np.sort(np.argpartition(-scores, pairs - 1, axis=1)[:, :pairs], axis=1)
        order = np.argsort(rng.random((count, pairs)), axis=1)  # which pair each query asks, in reading order
        rows = np.arange(count)[:, None]
        inputs[rows, context + 2 * chosen] = keys[rows, order]
        outputs = np.full((count, length), PAD, np.int64)
        outputs[rows, context + 2 * chosen] = values[rows, order]
        return TaskBatch(inputs, outputs)


def _distinct(rng: np.random.Generator, count: int, size: int, k: int) -> np.ndarray:
    """(count, k) integers in [0, size), distinct within each row, each row a uniform ordered draw."""
    if k * k <= size:  # few collisions: draw with replacement and redraw the rows that repeat one
        out = rng.integers(0, size, size=(count, k), dtype=np.int64)
        redo = _repeats(out)
        while redo.any():
            out[redo] = rng.integers(0, size, size=(int(redo.sum()), k), dtype=np.int64)
            redo[redo] = _repeats(out[redo])
        return out
    keys = rng.random((count, size))
    if k < size:
        chosen = np.argpartition(keys, k - 1, axis=1)[:, :k]
        return np.take_along_axis(chosen, np.argsort(np.take_along_axis(keys, chosen, axis=1), axis=1), axis=1)
    return np.argsort(keys, axis=1)


def _repeats(rows: np.ndarray) -> np.ndarray:
    ordered = np.sort(rows, axis=1)
    return (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
