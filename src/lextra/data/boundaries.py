"""Document boundaries of a token stream (`DocumentStarts`): where each document unit starts, searched without
copying anything the size of the corpus; what packed documents (`lextra.data.packing`) read windows by."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class DocumentStarts:
    """Where each document unit of a token stream starts, as sorted arrays of starts, one per piece of the stream
    (a prepared split's shard files: each its offsets' first column, mapped; or one array), each shifted by its
    piece's first stream position. Lookups search these arrays, so nothing the size of the corpus is copied."""

    def __init__(self, bases: Sequence[int], starts: Sequence[np.ndarray], length: int) -> None:
        kept = [(int(base), array) for base, array in zip(bases, starts, strict=True) if array.size]
        self.bases = np.array([base for base, _ in kept], dtype=np.int64)
        self.starts = [array for _, array in kept]
        self.length = int(length)
        self.count = int(sum(array.size for array in self.starts))

    def start_of(self, position: int) -> int:
        """The start of the unit holding stream position `position` (the last start at or before it)."""
        piece = int(np.searchsorted(self.bases, position, side="right")) - 1
        while piece >= 0:
            array = self.starts[piece]
            index = int(np.searchsorted(array, position - self.bases[piece], side="right")) - 1
            if index >= 0:
                return int(array[index]) + int(self.bases[piece])
            piece -= 1
        return 0

    def starts_after(self, low: int, high: int) -> np.ndarray:
        """The unit starts in (low, high], in order, then the first start past `high` (or the stream's end)."""
        found: list[np.ndarray] = []
        piece = max(int(np.searchsorted(self.bases, low, side="right")) - 1, 0)
        after = self.length
        for index in range(piece, len(self.starts)):
            base, array = int(self.bases[index]), self.starts[index]
            first = int(np.searchsorted(array, low - base, side="right"))
            last = int(np.searchsorted(array, high - base, side="right"))
            found.append(np.asarray(array[first:last], dtype=np.int64) + base)
            if last < array.size:
                after = int(array[last]) + base
                break
        inside = np.concatenate(found) if found else np.zeros(0, dtype=np.int64)
        return np.concatenate((inside, [after])).astype(np.int64)
