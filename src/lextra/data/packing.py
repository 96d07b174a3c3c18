"""Packed documents (`--pack documents`, docs/running.md): training windows filled with whole documents, each token
tagged with its document (0, 1, ... within the row, -1 for padding), so a step attends within each document.

A document's unit is its tokens plus the separator after it. A window's start is drawn as without packing, then
moved back to the start of its unit; whole units follow while they fit, the rest is padding, unless the unit that
does not fit is longer than a window, whose head then fills it. A packed batch is (B, 2, L + 1): tokens, ids.
"""

from __future__ import annotations

from itertools import islice
from typing import Any

import numpy as np
import torch

from lextra.data.corpora.sources import iter_documents
from lextra.data.orders import EpochOrder
from lextra.data.windows import DocumentStarts, WindowSource
from lextra.errors import ConfigError, DataError

#: how a run fills its training windows: `none` cuts them from the token stream across document boundaries;
#: `documents` fills them with whole documents, masked to each and positioned from each one's start
PACK_MODES: tuple[str, ...] = ("none", "documents")

#: the document id of padding in a packed batch
PADDING = -1


def check_pack(pack: str, where: str = "training config:") -> str:
    """`pack` when it is one of `PACK_MODES`; one-line `ConfigError` otherwise."""
    if pack not in PACK_MODES:
        raise ConfigError(f"{where} pack must be one of {', '.join(PACK_MODES)}, got {pack!r}")
    return pack


def pack_window(starts: DocumentStarts, drawn: int, need: int) -> tuple[int, np.ndarray]:
    """Where the packed window of `need` tokens drawn at `drawn` begins, and its (need,) document ids."""
    first = starts.start_of(drawn)
    following = starts.starts_after(first, first + need)
    begin = first if int(following[0]) - first <= need else drawn  # a unit longer than a window is split
    end = begin + need
    ids = np.full(need, PADDING, dtype=np.int64)
    unit_start = begin
    for document, unit_end in enumerate(starts.starts_after(begin, end).tolist()):
        if unit_end <= end:  # a whole unit
            ids[unit_start - begin : unit_end - begin] = document
        elif unit_start == begin or unit_end - unit_start > need:  # longer than a window: its head fills the rest
            ids[unit_start - begin :] = document
        if unit_end >= end:  # the rest is padding unless the unit that does not fit was split above
            break
        unit_start = unit_end
    return begin, ids


class PackedDocuments:
    """A training source's batches as packed windows: the same draws, each window moved to a document's start and
    filled with whole documents (`pack_window`). `batch` gives (B, 2, L + 1): tokens, then document ids."""

    def __init__(self, source: Any, starts: DocumentStarts) -> None:
        #: what draws the windows (a `WindowSource`: a stream, an `EpochOrder`, a weighted mixture)
        self.source: WindowSource = source
        self.document_starts = starts

    def __len__(self) -> int:
        return len(self.source)

    def batch(
        self, step: int, batch_size: int, length: int, seed: int, rank: int = 0, world_size: int = 1
    ) -> torch.Tensor:
        """A (batch_size, 2, length + 1) int64 packed batch, a pure function of (seed, step, rank)."""
        drawn = self.source.draw_starts(step, batch_size, length, seed, rank, world_size)
        begins, ids = [], []
        for start in drawn.tolist():
            begin, row = pack_window(self.document_starts, int(start), length + 1)
            begins.append(begin)
            ids.append(row)
        tokens = self.source.windows(torch.tensor(begins, dtype=torch.long), length)
        return torch.stack((tokens, torch.from_numpy(np.stack(ids))), dim=1)


def check_pack_corpus(corpus: str | None, limit_chars: int | None = None) -> None:
    """Refuse, before anything is written, a corpus of fewer than two documents (it has no boundaries to pack by),
    reading at most two; a corpus that cannot be read is left to the data loader's own message."""
    if corpus is None:
        return
    try:
        count = len(list(islice(iter_documents(corpus, limit_chars=limit_chars), 2)))
    except (DataError, OSError, ValueError):
        return
    if count < 2:
        raise ConfigError(
            f"--pack documents needs document boundaries, but the corpus {corpus!r} is a single document; give a "
            "corpus of several documents (a folder, JSONL or Parquet rows) or drop --pack"
        )


def stream_document_starts(stream: object) -> DocumentStarts:
    """The document starts of a training stream: a prepared folder's (its offsets, mapped) or an in-memory
    `TrainStream`'s; a `ConfigError` when the stream keeps no boundaries or holds a single document."""
    if isinstance(stream, EpochOrder):
        stream = stream.stream
    shards = getattr(stream, "shards", None)
    if shards is not None:  # a weighted mixture's folder
        stream = shards
    make = getattr(stream, "document_starts", None)
    starts: DocumentStarts | None = make() if make is not None else None
    if starts is None or starts.count < 2:
        what = "keeps no document boundaries" if starts is None else "is a single document"
        raise ConfigError(
            f"--pack documents needs document boundaries, but the training stream {what}; give a corpus of several "
            "documents (a folder, JSONL or Parquet rows) or drop --pack"
        )
    return starts
