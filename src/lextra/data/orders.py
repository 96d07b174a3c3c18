"""The order of training windows, a pure function of (seed, step, rank) either way: i.i.d. (`window_starts`) or
epoch order (every non-overlapping window once per epoch, in a permutation keyed by (seed, epoch))."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from typing import TypeVar

import numpy as np
import torch

from lextra.data.windows import WindowSource, check_batch
from lextra.errors import DataError

ORDERS: tuple[str, ...] = ("iid", "epoch")
"""Orders of training windows: `iid` draws uniformly (with replacement) from every offset; `epoch` visits the
non-overlapping windows in a fresh permutation per epoch (`epoch_window_starts`)."""

EPOCH_ROUNDS = 6
"""Feistel rounds of the epoch permutation (Luby & Rackoff 1988 show 4 make a pseudo-random permutation)."""

_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_SHIFT_1, _SHIFT_2 = np.uint64(30), np.uint64(31)


def check_order(order: str) -> str:
    """`order` when it is one of `ORDERS`; one-line `DataError` otherwise."""
    if order not in ORDERS:
        raise DataError(f"unknown window order {order!r}; use one of {', '.join(ORDERS)}")
    return order


def epoch_windows(n: int, length: int) -> int:
    """How many non-overlapping windows of `length + 1` tokens an epoch of `n` tokens has: they start at 0, length,
    2 length, ... (neighbours share one token, so each token is an input once and a target once)."""
    return max((n - 1) // length, 0)


@functools.lru_cache(maxsize=64)
def _epoch_keys(seed: int, epoch: int) -> tuple[int, ...]:
    """The Feistel round keys of one epoch's permutation, from (seed, epoch) alone."""
    digest = hashlib.sha256(f"lextra-epoch-order:{seed}:{epoch}".encode()).digest()
    more = hashlib.sha256(digest).digest()
    raw = digest + more
    return tuple(int.from_bytes(raw[8 * r : 8 * r + 8], "little") for r in range(EPOCH_ROUNDS))


def _mix(values: np.ndarray, key: np.uint64) -> np.ndarray:
    """A 64-bit hash of each value under `key` (the SplitMix64 finaliser of their sum; Steele et al. 2014)."""
    h = values + key
    h = (h ^ (h >> _SHIFT_1)) * _MIX_1
    h = (h ^ (h >> _SHIFT_2)) * _MIX_2
    return h ^ (h >> _SHIFT_1)


def epoch_permutation(index: np.ndarray, windows: int, keys: Sequence[int]) -> np.ndarray:
    """Where each `index` in [0, windows) goes under a keyed pseudo-random permutation of [0, windows), in memory
    and time O(len(index)).

    A Feistel network on Z_a x Z_b (a = ceil(sqrt(windows)), b = ceil(windows / a)) with modular addition and
    alternating halves (FFX; Bellare, Ristenpart, Rogaway & Stegers 2009), round r keyed by `keys[r]`; values past
    `windows` are walked back into range by applying it again (cycle walking; Black & Rogaway 2002).
    """
    if windows == 1:
        return np.zeros_like(index)
    a = int(np.ceil(np.sqrt(windows)))
    b = -(-windows // a)
    a_, b_ = np.uint64(a), np.uint64(b)
    round_keys = [np.uint64(key) for key in keys]
    out = index.astype(np.uint64)
    todo = np.arange(out.size)
    while todo.size:
        x = out[todo]
        left: np.ndarray = x // b_  # in Z_a
        right: np.ndarray = x % b_  # in Z_b
        for r in range(EPOCH_ROUNDS):
            size = a_ if r % 2 == 0 else b_
            left, right = right, (left + _mix(right, round_keys[r]) % size) % size
        # after an even number of rounds left is in Z_a and right in Z_b again
        out[todo] = left * b_ + right
        todo = todo[out[todo] >= np.uint64(windows)]
    return out.astype(np.int64)


EPOCH_BLOCK = 8192
"""Consecutive positions of an epoch whose windows are permuted together and kept (64 KiB), so the permutation's
per-call cost is paid once per block, not per batch."""


@functools.lru_cache(maxsize=8)
def _epoch_block(seed: int, epoch: int, windows: int, block: int) -> np.ndarray:
    """The windows at positions [block EPOCH_BLOCK, (block + 1) EPOCH_BLOCK) of epoch `epoch` (read-only)."""
    low = block * EPOCH_BLOCK
    index = np.arange(low, min(low + EPOCH_BLOCK, windows), dtype=np.int64)
    out = epoch_permutation(index, windows, _epoch_keys(seed, epoch))
    out.setflags(write=False)
    return out


def epoch_window_starts(
    n: int, step: int, batch_size: int, length: int, seed: int, rank: int = 0, world_size: int = 1
) -> torch.Tensor:
    """The (batch_size,) int64 window starts of batch `step` in epoch order, a pure function of its arguments.

    The epochs (each `epoch_windows(n, length)` windows, permuted by `epoch_permutation`) follow one another as one
    sequence cut into global batches of `batch_size * world_size` windows, of which rank `r` takes rows
    [r batch_size, (r + 1) batch_size). The last `(n - 1) mod length` tokens are never drawn.
    """
    check_batch(n, step, batch_size, length, rank, world_size)
    windows = epoch_windows(n, length)
    first = (step * world_size + rank) * batch_size
    epoch, position = divmod(first, windows)
    block, offset = divmod(position, EPOCH_BLOCK)
    if position + batch_size <= min(windows, (block + 1) * EPOCH_BLOCK):  # one epoch, one block: one slice
        table = _epoch_block(seed, epoch, windows, block)
        return torch.from_numpy(table[offset : offset + batch_size] * length)
    epochs, index = np.divmod(first + np.arange(batch_size, dtype=np.int64), windows)
    blocks = index // EPOCH_BLOCK
    out = np.empty(batch_size, dtype=np.int64)
    cuts = np.flatnonzero((np.diff(epochs) != 0) | (np.diff(blocks) != 0)) + 1
    for low, high in zip([0, *cuts.tolist()], [*cuts.tolist(), batch_size], strict=True):
        epoch, block = int(epochs[low]), int(blocks[low])
        out[low:high] = _epoch_block(seed, epoch, windows, block)[index[low:high] - block * EPOCH_BLOCK]
    return torch.from_numpy(out * length)


class EpochOrder(WindowSource):
    """A stream's training windows in epoch order (`epoch_window_starts`)."""

    def __init__(self, stream: WindowSource) -> None:
        self.stream = stream

    def __len__(self) -> int:
        return len(self.stream)

    def draw_starts(
        self, step: int, batch_size: int, length: int, seed: int, rank: int = 0, world_size: int = 1
    ) -> torch.Tensor:
        return epoch_window_starts(len(self.stream), step, batch_size, length, seed, rank, world_size)

    def windows(self, starts: torch.Tensor, length: int) -> torch.Tensor:
        return self.stream.windows(starts, length)

    def position(self, step: int, batch_size: int, length: int) -> dict[str, int]:
        """Where the run stands after `step` global batches: its epoch, the windows of it drawn, windows per epoch."""
        windows = epoch_windows(len(self.stream), length)
        epoch, window = divmod(step * batch_size, max(windows, 1))
        return {"epoch": epoch, "window": window, "windows": windows}


Stream = TypeVar("Stream", bound=WindowSource)


def in_order(stream: Stream, order: str) -> Stream | EpochOrder:
    """The batches of `stream` in `order` (`ORDERS`): the stream's own i.i.d. `batch`, or `EpochOrder`."""
    return EpochOrder(stream) if check_order(order) == "epoch" else stream
