"""The suite record of Kazemnejad et al.'s tasks and the helpers their files share: the authors' strings become
whole-word symbols, and rows of different lengths are packed left and right-padded with `PAD`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from lextra.errors import ConfigError
from lextra.tasks.base import PAD, AlgorithmicTask, LengthRange, Suite

KAZEMNEJAD = Suite(
    name="kazemnejad",
    paper=(
        "Kazemnejad et al. 2023, The Impact of Positional Encoding on Length Generalization in Transformers "
        "(arXiv 2305.19466)"
    ),
    code="McGill-NLP/length-generalization (scripts/dataset_builders, src/data/data_instance_processor)",
    notes=(
        "decoder-only T5-base-sized model (~107M parameters; NoPE, T5 bias, ALiBi, rotary, absolute sinusoid); "
        "prompt ++ answer with the loss on the answer; 40K steps, batch 64, AdamW lr 3e-5, weight decay 0.05; fixed "
        "data sets mixing the training lengths, tested up to twice the longest; exact match of the answer, greedy"
    ),
    extra={"steps": 40_000, "batch_size": 64, "learning_rate": 3e-5, "weight_decay": 0.05, "parameters": "107M"},
)
#: copy and reverse: `--train_min 4` (the builders' default) to `--train_max 20`, tested 21..40 (`*_tr20_ts40`)
SEQUENCE_TRAIN = LengthRange(4, 20)
SEQUENCE_TEST = LengthRange(21, 40)
#: addition, sort and summation: 4..8 in training, 9..16 at test (`len_tr8_ts16`); parity's builder starts at 3
ARITHMETIC_TRAIN = LengthRange(4, 8)
ARITHMETIC_TEST = LengthRange(9, 16)

#: 100 one-character symbols standing for the authors' first 100 one-token T5 strings (copy, reverse): their
#: candidate characters (those T5 keeps as one token come first), then Greek letters for the vocabulary words
SYMBOLS: tuple[str, ...] = (
    *"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ!$%&()*+,-./:;<=>",
    *"αβγδεζηθικλμνξοπρστυφ",
)
assert len(SYMBOLS) == 100 and len(set(SYMBOLS)) == 100


def choose(task: str, option: str, value: str, choices: Sequence[str]) -> str:
    """`value` if it is one of `choices`, else a ConfigError listing them."""
    if value not in choices:
        raise ConfigError(f"task {task}: {option}={value!r} is not one of {', '.join(choices)}")
    return value


def pack(count: int, *parts: int | np.ndarray) -> np.ndarray:
    """Rows made of `parts` side by side (an int: that symbol in every row; an (n, w) array whose PAD entries are
    absent), each row's symbols moved left in order and the rows right-padded with PAD to the longest."""
    columns = [np.full((count, 1), p, np.int64) if isinstance(p, int) else np.asarray(p, np.int64) for p in parts]
    grid = np.concatenate(columns, axis=1)
    present = grid != PAD
    if present.all():
        return grid
    order = np.argsort(~present, axis=1, kind="stable")
    width = int(present.sum(axis=1).max(initial=0))
    return np.take_along_axis(grid, order[:, :width], axis=1)


def listed(items: np.ndarray, separator: int) -> np.ndarray:
    """(n, k) symbols or (n, k, w) numbers (PAD-padded digits) -> (n, ...) with `separator` between items."""
    items = items[:, :, None] if items.ndim == 2 else items
    n, k, _ = items.shape
    joined = np.concatenate([items, np.full((n, k, 1), separator, np.int64)], axis=2).reshape(n, -1)
    return joined[:, :-1]


def strip_zeros(digits: np.ndarray) -> np.ndarray:
    """Digits (..., w), most significant first -> the leading zeros (all but the units digit) set to PAD."""
    nonzero = digits != 0
    nonzero[..., -1] = True
    return np.where(np.cumsum(nonzero, axis=-1) > 0, digits, PAD)


def number_digits(values: np.ndarray, width: int) -> np.ndarray:
    """Non-negative ints (...) below 10**width -> their decimal digits (..., width), leading zeros as PAD."""
    powers = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    return strip_zeros((np.asarray(values, np.int64)[..., None] // powers) % 10)


class KazemnejadTask(AlgorithmicTask):
    """What every task of the suite shares: decoder style (answers decoded after the input), exact match, lengths
    mixed within a batch as the authors' data sets are. Registered subclasses only; this class is not a task."""

    suite: ClassVar[Suite] = KAZEMNEJAD
    style: ClassVar[str] = "decoder"
    score: ClassVar[str] = "exact"
    mixed_lengths: ClassVar[bool] = True
