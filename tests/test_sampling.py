"""Training windows: gathered across shard files as from one stream, and drawn in i.i.d. or epoch order."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lextra.data.windows import JoinedTokens
from lextra.errors import DataError


def _pieces(sizes: list[int], dtype: type = np.uint16, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 60_000, size, dtype=np.int64).astype(dtype) for size in sizes]


def _expected(pieces: list[np.ndarray], starts: torch.Tensor, length: int) -> torch.Tensor:
    joined = np.concatenate(pieces).astype(np.int64)
    return torch.from_numpy(np.stack([joined[s : s + length + 1] for s in starts.tolist()]))


@pytest.mark.parametrize("sizes", [[500], [40, 3, 300, 7, 7, 250], [100, 100, 100]])
def test_joined_pieces_give_every_window_of_the_joined_stream(sizes: list[int]) -> None:
    pieces = _pieces(sizes)
    joined = JoinedTokens(pieces)
    length = 16
    assert len(joined) == sum(sizes)
    every = torch.arange(0, sum(sizes) - length)  # windows inside one piece and across two, three and four
    got = joined.windows(every, length)
    assert got.dtype == torch.long and torch.equal(got, _expected(pieces, every, length))
    shuffled = every[torch.randperm(every.numel(), generator=torch.Generator().manual_seed(0))][:37]
    assert torch.equal(joined.windows(shuffled, length), _expected(pieces, shuffled, length))


def test_pieces_that_cannot_share_one_view_are_copied_row_by_row() -> None:
    buffer = np.arange(1000, dtype=np.uint16)
    odd = np.frombuffer(buffer.tobytes() + b"\0", dtype=np.uint16, count=300, offset=1)  # not 2-byte aligned
    strided = buffer[::2]  # not contiguous
    for pieces in ([buffer[:200], odd], [strided, buffer[:100]]):
        joined = JoinedTokens(pieces)
        every = torch.arange(0, len(joined) - 9)
        assert torch.equal(joined.windows(every, 9), _expected(pieces, every, 9))


def test_windows_outside_the_stream_are_refused() -> None:
    joined = JoinedTokens(_pieces([50, 50]))
    with pytest.raises(DataError, match=r"^a training window starts at 90, outside 0\.\.89 \(windows of 11 tokens"):
        joined.windows(torch.tensor([0, 90]), 10)
    with pytest.raises(DataError, match="starts at -1"):
        joined.windows(torch.tensor([-1]), 10)
    with pytest.raises(DataError, match="one dtype"):
        JoinedTokens([np.zeros(3, np.uint8), np.zeros(3, np.uint16)])
