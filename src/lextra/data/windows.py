"""Token tensors: training windows, a pure function of (seed, step, rank), and whole-document evaluation windows
(stitched across documents only when none is long enough, which they report)."""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import torch
from numpy.lib.stride_tricks import as_strided

from lextra.data.corpora import Document
from lextra.data.tokenizers import ByteTokenizer, Tokenizer
from lextra.errors import DataError


def _compact_dtype(max_id: int) -> type[np.integer]:
    """The smallest storage dtype used here for token ids up to `max_id`: uint8 for bytes, else int32."""
    if max_id < 256:
        return np.uint8
    return np.int32 if max_id < 2**31 else np.int64


def encode_arrays(tokenizer: Tokenizer, docs: Sequence[Document]) -> list[np.ndarray]:
    """Token ids of each document (uint8 for bytes, else int64; read-only for bytes)."""
    if isinstance(tokenizer, ByteTokenizer):
        return [np.frombuffer(doc.text.encode("utf-8"), dtype=np.uint8) for doc in docs]
    return [np.asarray(ids, dtype=np.int64) for ids in tokenizer.encode_many([doc.text for doc in docs])]


def encode_documents(docs: Sequence[Document], tokenizer: Tokenizer, *, compact: bool = False) -> list[torch.Tensor]:
    """One 1-D token tensor per document, in order, skipping documents that encode to nothing: int64, or with
    `compact` uint8 (vocabularies of at most 256) or int32, 8 or 2 times less memory (`TrainStream` takes either)."""
    dtype = _compact_dtype(tokenizer.vocab_size - 1) if compact else np.int64
    return [torch.from_numpy(ids.astype(dtype)) for ids in encode_arrays(tokenizer, docs) if ids.size]


def window_starts(
    n: int, step: int, batch_size: int, length: int, seed: int, rank: int = 0, world_size: int = 1
) -> torch.Tensor:
    """The (batch_size,) int64 starts of a batch of training windows of `length + 1` tokens in a stream of `n`
    tokens: uniform over every valid offset, seeded from (seed, step, rank) alone; every stream draws here."""
    check_batch(n, step, batch_size, length, rank, world_size)
    key = f"lextra-train-windows:{seed}:{step}:{rank}".encode()  # a 63-bit seed, unrelated for nearby steps
    generator = torch.Generator().manual_seed(int.from_bytes(hashlib.sha256(key).digest()[:8], "little") & (2**63 - 1))
    return torch.randint(0, n - length, (batch_size,), generator=generator, device="cpu")


def check_batch(n: int, step: int, batch_size: int, length: int, rank: int, world_size: int) -> None:
    """Refuse a step, batch size, length or rank out of range, and a stream shorter than one window."""
    for label, value, low in (("step", step, 0), ("batch_size", batch_size, 1), ("length", length, 1)):
        if value < low:
            raise DataError(f"{label} must be >= {low}, got {value}")
    if not 0 <= rank < world_size:
        raise DataError(f"rank must be in [0, world_size={world_size}), got {rank}")
    if n < length + 1:
        raise DataError(
            f"the training stream has {n} tokens, fewer than training length + 1 = {length + 1}; "
            "use a smaller training length or a bigger corpus"
        )


def mixture_window_starts(
    ranges: Sequence[tuple[int, int]],
    weights: Sequence[float],
    step: int,
    batch_size: int,
    length: int,
    seed: int,
    rank: int = 0,
    world_size: int = 1,
) -> torch.Tensor:
    """The (batch_size,) int64 window starts of a weighted mixture: each window's part is drawn with probability
    `weights[k]`, then its start uniformly among the offsets whose `length + 1` tokens lie inside that part's
    [start, stop) range of the stream; a pure function of (seed, step, rank), like `window_starts`."""
    check_batch(max(stop - start for start, stop in ranges), step, batch_size, length, rank, world_size)
    if len(weights) != len(ranges) or any(not w > 0 for w in weights):
        raise DataError(f"a mixture needs one positive weight per part, got {list(weights)} for {len(ranges)} parts")
    for index, (start, stop) in enumerate(ranges):
        if stop - start < length + 1:
            raise DataError(
                f"part {index + 1} of the mixture has {max(stop - start, 0)} training tokens, fewer than training "
                f"length + 1 = {length + 1}; use a smaller training length or give that part more text"
            )
    key = f"lextra-mixture-windows:{seed}:{step}:{rank}".encode()
    generator = torch.Generator().manual_seed(int.from_bytes(hashlib.sha256(key).digest()[:8], "little") >> 1)
    parts = torch.multinomial(
        torch.tensor(list(weights), dtype=torch.float64), batch_size, replacement=True, generator=generator
    )
    starts = torch.empty(batch_size, dtype=torch.long)
    for index, (start, stop) in enumerate(ranges):
        rows = (parts == index).nonzero().flatten()
        if rows.numel():
            starts[rows] = start + torch.randint(0, stop - start - length, (rows.numel(),), generator=generator)
    return starts


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


def _window_rows(tokens: np.ndarray, rows: int, length: int) -> np.ndarray:
    """A read-only (rows, length + 1) strided view of `tokens` whose row i is tokens [i, i + length + 1): every
    window as a row, without a copy (rows past the array's end must never be read)."""
    step = tokens.strides[0]
    return as_strided(np.asarray(tokens), shape=(rows, length + 1), strides=(step, step), writeable=False)


class JoinedTokens:
    """A token stream stored as consecutive flat arrays of one dtype (a split's mapped shard files, or one array),
    whose `windows` are one numpy row gather from a strided view of every window.

    The view starts at the lowest array's address and reaches each array at a fixed row offset; windows that cross
    a boundary read a seam (the L tokens either side of it, copied once into one small array the view reaches
    too). One `searchsorted` finds each start's segment (an array's inside or a seam) and its row offset; only
    rows of real windows are read.
    """

    def __init__(self, pieces: Sequence[np.ndarray]) -> None:
        if not pieces or len({piece.dtype for piece in pieces}) != 1:
            raise DataError("a joined token stream needs one or more flat arrays of one dtype")
        if any(piece.ndim != 1 or not piece.flags.c_contiguous for piece in pieces):
            raise DataError("a joined token stream needs flat contiguous arrays (copy a strided one first)")
        self.pieces = [np.asarray(piece) for piece in pieces if piece.size]  # an empty one holds no window
        if not self.pieces:
            raise DataError("a joined token stream needs at least one token")
        sizes = np.array([piece.size for piece in self.pieces], dtype=np.int64)
        #: piece k holds the stream's tokens [bounds[k], bounds[k + 1])
        self.bounds = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        self._layouts: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}

    def __len__(self) -> int:
        return int(self.bounds[-1])

    def span(self, start: int, stop: int) -> np.ndarray:
        """Tokens [start, stop) of the stream, as a new array."""
        first = int(np.searchsorted(self.bounds, start, side="right")) - 1
        pieces = []
        for index in range(max(first, 0), len(self.pieces)):
            low, high = int(self.bounds[index]), int(self.bounds[index + 1])
            if low >= stop:
                break
            pieces.append(self.pieces[index][max(start - low, 0) : min(stop, high) - low])
        return np.concatenate(pieces) if pieces else self.pieces[0][:0].copy()

    def _layout(self, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """For windows of `length + 1` tokens: the view of every window as a row, its segments' first starts and
        row offsets, and the seams it reads (kept alive here)."""
        if length in self._layouts:
            return self._layouts[length]
        bounds, count = self.bounds, len(self.pieces)
        if count == 1:
            view = _window_rows(self.pieces[0], max(len(self) - length, 0), length)
            layout = (view, np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64), self.pieces[0][:0])
            self._layouts[length] = layout
            return layout
        seam_spans = [(max(int(b) - length, 0), min(int(b) + length, len(self))) for b in bounds[1:-1]]
        seams = np.concatenate([self.span(low, high) for low, high in seam_spans] or [self.pieces[0][:0]])
        arrays = [*self.pieces, seams]
        item = seams.itemsize
        addresses = np.array([array.ctypes.data for array in arrays], dtype=np.int64)
        lowest = int(np.argmin(addresses))
        if np.any((addresses - addresses[lowest]) % item):
            raise DataError("the token arrays are not aligned to their dtype; copy them first")
        rows = (addresses - addresses[lowest]) // item  # each array's first row in the view
        extent = int(max(row + array.size for row, array in zip(rows.tolist(), arrays, strict=True)))
        view = _window_rows(arrays[lowest], max(extent - length, 0), length)
        firsts, shifts = [], []
        seam_row = int(rows[-1])
        for k in range(count):
            firsts.append(int(bounds[k]))
            shifts.append(int(rows[k]) - int(bounds[k]))
            if k + 1 < count:  # starts whose window crosses the boundary at bounds[k + 1] read the seam
                low, high = seam_spans[k]
                firsts.append(max(int(bounds[k]), int(bounds[k + 1]) - length))
                shifts.append(seam_row - low)
                seam_row += high - low
        layout = (view, np.array(firsts, dtype=np.int64), np.array(shifts, dtype=np.int64), seams)
        self._layouts[length] = layout
        return layout

    def windows(self, starts: torch.Tensor, length: int) -> torch.Tensor:
        """The (len(starts), length + 1) int64 windows of the stream at `starts` (each in [0, len - length))."""
        at = starts.numpy().astype(np.int64, copy=False)
        last = len(self) - length  # starts are < last
        if at.size and (last < 1 or not bool((at.view(np.uint64) < np.uint64(max(last, 0))).all())):
            bad = int(at[(at < 0) | (at >= last)][0])
            raise DataError(
                f"a training window starts at {bad}, outside 0..{last - 1} (windows of {length + 1} tokens in a "
                f"stream of {len(self)})"
            )
        view, firsts, shifts, _ = self._layout(length)
        if len(self.pieces) == 1:
            return torch.from_numpy(view[at].astype(np.int64))
        segment = np.searchsorted(firsts, at, side="right") - 1
        return torch.from_numpy(view[at + shifts[segment]].astype(np.int64))


class WindowSource(ABC):
    """Where training windows are drawn: `draw_starts` gives a step's window starts (i.i.d. by default), `windows` reads
    them, and `batch` is both, a pure function of (seed, step, rank)."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def windows(self, starts: torch.Tensor, length: int) -> torch.Tensor:
        """The (len(starts), length + 1) int64 windows of the stream at `starts`."""

    def draw_starts(
        self, step: int, batch_size: int, length: int, seed: int, rank: int = 0, world_size: int = 1
    ) -> torch.Tensor:
        """The (batch_size,) window starts of rank `rank`'s rows of global batch `step` (`window_starts`)."""
        return window_starts(len(self), step, batch_size, length, seed, rank, world_size)

    def batch(
        self, step: int, batch_size: int, length: int, seed: int, rank: int = 0, world_size: int = 1
    ) -> torch.Tensor:
        """A (batch_size, length + 1) int64 batch: inputs `batch[:, :-1]`, targets `batch[:, 1:]`."""
        return self.windows(self.draw_starts(step, batch_size, length, seed, rank, world_size), length)


class TrainStream(WindowSource):
    """The training documents' tokens joined into one stream (with an optional separator token between them)."""

    def __init__(self, token_docs: Sequence[torch.Tensor], separator: int | None = None) -> None:
        """Concatenate the 1-D token tensors, stored as uint8 if every id (and the separator) fits, else int32."""
        arrays = [t.detach().reshape(-1).cpu().numpy() for t in token_docs if t.numel() > 0]
        if not arrays:
            raise DataError("the training split has no tokens; use a bigger corpus or other split fractions")
        if separator is not None and separator < 0:
            raise DataError(f"the separator token id must be non-negative, got {separator}")
        pieces = arrays
        if separator is not None:
            common = np.result_type(*arrays)
            gap = np.array(
                [separator], dtype=common if np.can_cast(np.min_scalar_type(separator), common) else np.int64
            )
            pieces = [piece for array in arrays for piece in (gap, array)][1:]
        flat = np.concatenate(pieces)
        if flat.dtype != np.uint8:  # numpy reductions: fast even on tens of millions of tokens
            if int(flat.min()) < 0:
                raise DataError(f"token ids must be non-negative, found {int(flat.min())}")
            flat = flat.astype(_compact_dtype(int(flat.max())), copy=False)
        self.tokens = torch.from_numpy(np.ascontiguousarray(flat))
        self.separator = separator
        self.num_documents = len(arrays)
        sizes = np.array([array.size for array in arrays], dtype=np.int64) + (0 if separator is None else 1)
        #: where each document starts in the stream (its separator ends the one before)
        self.starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        self._joined = JoinedTokens([self.tokens.numpy()])

    @classmethod
    def from_documents(cls, docs: Sequence[Document], tokenizer: Tokenizer) -> TrainStream:
        """Encode the training documents compactly and join them with the tokenizer's separator."""
        return cls(encode_documents(docs, tokenizer, compact=True), separator=tokenizer.separator_id)

    def __len__(self) -> int:
        """Number of tokens in the stream, separators included."""
        return int(self.tokens.numel())

    def windows(self, starts: torch.Tensor, length: int) -> torch.Tensor:
        return self._joined.windows(starts, length)

    def document_starts(self) -> DocumentStarts:
        """Where each document starts in the stream (`lextra.data.packing`)."""
        return DocumentStarts([0], [self.starts], len(self))


def eval_sequences(
    token_docs: Sequence[torch.Tensor], length: int, max_sequences: int, *, separator: int | None = None
) -> tuple[list[torch.Tensor], bool]:
    """Up to `max_sequences` windows of `length + 1` tokens and whether documents were stitched (`eval_pieces`)."""
    sequences, stitched, _ = eval_pieces(token_docs, length + 1, max_sequences, separator=separator)
    return sequences, stitched


def eval_pieces(
    token_docs: Sequence[torch.Tensor], need: int, max_pieces: int, *, separator: int | None = None
) -> tuple[list[torch.Tensor], bool, list[tuple[int, int]]]:
    """Up to `max_pieces` int64 pieces of exactly `need` tokens, whether documents were stitched, and where each
    piece starts: (document index, offset), or (-1, offset in the joined text) when stitched.

    Pieces lie inside documents of at least `need` tokens: each one's opening piece in corpus order, then their
    second pieces, and so on. When no document is that long, the documents joined (by `separator` when given) are
    cut into consecutive pieces instead, and the flag says so.
    """
    if need < 2:
        raise DataError(f"evaluation length must be >= 1, got {need - 1}")
    if max_pieces < 1:
        raise DataError(f"max_sequences must be >= 1, got {max_pieces}")
    docs = [(i, t.reshape(-1)) for i, t in enumerate(token_docs) if t.numel() > 0]
    if not docs:
        raise DataError("no evaluation tokens; the evaluation split is empty, use a bigger corpus")
    long_docs = [(i, t) for i, t in docs if t.numel() >= need]
    pieces: list[torch.Tensor] = []
    origins: list[tuple[int, int]] = []
    if long_docs:
        round_index = 0
        while long_docs and len(pieces) < max_pieces:
            start, stop = round_index * need, (round_index + 1) * need
            long_docs = [(i, t) for i, t in long_docs if t.numel() >= stop]
            for i, t in long_docs[: max_pieces - len(pieces)]:
                pieces.append(t[start:stop].to(torch.long, copy=True))
                origins.append((i, start))
            round_index += 1
        return pieces, False, origins
    parts = [t.long() for _, t in docs]
    if separator is not None:
        parts = [piece for t in parts for piece in (torch.tensor([separator]), t)][1:]
    stream = torch.cat(parts)
    if stream.numel() < need:
        raise DataError(
            f"the evaluation text has {stream.numel()} tokens in all, fewer than the {need} needed; "
            "evaluate at a shorter length or use a bigger corpus"
        )
    count = min(max_pieces, stream.numel() // need)
    return (
        [stream[i * need : (i + 1) * need].clone() for i in range(count)],
        True,
        [(-1, i * need) for i in range(count)],
    )
