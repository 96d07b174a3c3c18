"""The tiled engine of the training-free extension methods: query blocks x the method's passes x key tiles, each
tile one flash call returning its rows' log-sum-exp, merged exactly (`lextra.extend.attention` describes the
layout: skipped, unmasked, causal and band-cut tiles, the last split into `SUB` x `SUB` pieces)."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from lextra.attention.backends import TILE, merge_tiles
from lextra.errors import ConfigError
from lextra.extend.base import Pass
from lextra.extend.capsinks import PLAIN_SCORES, LayerScores
from lextra.positions.base import PositionScheme

#: a tile a band edge cuts is split into pieces of this many queries x keys; the edge's pieces get float masks
SUB = 256
#: float masks of such pieces kept per call (256 KiB each)
MASK_CACHE = 16
#: stands for a hidden row's log-sum-exp (-inf) under autograd: exp(LSE_FLOOR - real) is exactly 0
LSE_FLOOR = -1e30
_EMPTY, _FULL, _CAUSAL, _MASKED = range(4)


class TileRun:
    """What the tiled loop needs of its caller: the scheme rotating q and k (None: they are used as they are),
    the passes of a query block, the period query blocks do not straddle, the sequence length for
    length-dependent scalings, and a name for errors."""

    def __init__(
        self,
        scheme: PositionScheme | None,
        passes: Callable[[int, int], list[Pass]],
        period: int | None,
        seq_len: int | None,
        label: str,
        scores: LayerScores = PLAIN_SCORES,
    ) -> None:
        self.scheme, self.passes, self.period, self.seq_len, self.label = scheme, passes, period, seq_len, label
        self.scores, self.cap = scores, scores.flex

    def queries(self, qc: Tensor, k: Tensor, at: Tensor) -> Tensor:
        if self.scheme is None:
            return qc
        return self.scheme.rotate(qc, k[..., :0, :], at, at[:0], self.seq_len)[0]

    def keys(self, qc: Tensor, kc: Tensor, q_at: Tensor, k_at: Tensor) -> Tensor:
        if self.scheme is None:
            return kc
        return self.scheme.rotate(qc[..., :1, :], kc, q_at[:1], k_at, self.seq_len)[1]


def tiled_passes(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    run: TileRun,
    q_pos: Tensor,
    k_pos: Tensor,
    scale: float,
    rows: Tensor | None,
    block_size: int | None,
) -> Tensor:
    """Query blocks x passes x key tiles, merged by log-sum-exp (see the module docstring)."""
    B, H, Lq, _ = q.shape
    Lk = k.shape[-2]
    if Lq == 0 or Lk == 0:
        return q.new_zeros(B, H, Lq, v.shape[-1])
    block = max(1, int(block_size or TILE))
    if run.scheme is not None and run.scheme.rotate_span is not None:
        block = min(block, run.scheme.rotate_span)
    call = _TiledCall(q, k, v, run, q_pos, k_pos, scale, rows, block)
    q_sorted = all(a <= b for a, b in itertools.pairwise(call.q_list))
    out = None if call.grad else q.new_empty(B, H, Lq, v.shape[-1])
    outputs: list[Tensor] = []
    for start, stop in query_blocks(call.q_list, block if q_sorted else 1, run.period):
        acc = call.block(start, stop)
        if out is None:
            outputs.append(acc.to(v.dtype))
        else:
            out[..., start:stop, :] = acc
    return out if out is not None else torch.cat(outputs, dim=-2)


class _TiledCall:
    """One `tiled_passes` call: its inputs, the positions' host-side facts and the float masks its tiles share; `block`
    computes a query block's output (fp32) over every pass and key tile."""

    def __init__(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        run: TileRun,
        q_pos: Tensor,
        k_pos: Tensor,
        scale: float,
        rows: Tensor | None,
        block: int,
    ) -> None:
        self.q, self.k, self.v, self.run, self.q_pos, self.k_pos = q, k, v, run, q_pos, k_pos
        self.scale, self.rows, self.width = scale, rows, block
        self.q_list, self.k_list = q_pos.tolist(), k_pos.tolist()
        self.k_sorted = all(a <= b for a, b in itertools.pairwise(self.k_list))
        self.contiguous = contiguous_run(self.q_list) and contiguous_run(self.k_list)
        self.grad = torch.is_grad_enabled()
        self.masks: dict[tuple[int, ...], Tensor] = {}

    def block(self, start: int, stop: int) -> Tensor:
        """The output (B, H, stop - start, Dv) fp32 of queries start:stop."""
        B, H = self.q.shape[:2]
        m_lo, m_hi = min(self.q_list[start:stop]), max(self.q_list[start:stop])
        acc: Tensor | None = None
        lse: Tensor | None = None
        if not self.grad:  # merged into in place, a slice at a time where band edges split a tile
            acc = torch.zeros(B, H, stop - start, self.v.shape[-1], dtype=torch.float32, device=self.q.device)
            lse = torch.full((B, H, stop - start), float("-inf"), device=self.q.device)
        for p in self.run.passes(m_lo, m_hi):
            acc, lse = self._pass(p, start, stop, (m_lo, m_hi), acc, lse)
        if acc is None or lse is None or bool((lse <= LSE_FLOOR).any()):
            raise ConfigError(
                f"{self.run.label}: queries at {m_lo}..{m_hi} see no key; their own positions must be keys"
            )
        return self.run.scores.finish(acc, lse, slice(start, stop))

    def _key_range(self, p: Pass, m_lo: int, m_hi: int) -> tuple[int, int, int] | None:
        """The key indices [i0, i1) pass `p` may show queries m_lo..m_hi and the index its lower distance edge
        crosses (the anchor of `_tiles`); None when it shows them no key."""
        first_pos, last_pos = max(p.keys[0], m_lo - p.distance[1]), min(p.keys[1], m_hi - p.distance[0])
        if last_pos < first_pos:
            return None
        if self.k_sorted:
            k_list = self.k_list
            i0, i1 = bisect.bisect_left(k_list, first_pos), bisect.bisect_right(k_list, last_pos)
            anchor = min(max(bisect.bisect_left(k_list, m_lo - p.distance[0]), i0), i1)
        else:
            i0, i1, anchor = 0, len(self.k_list), 0
        return None if i1 <= i0 else (i0, i1, anchor)

    def _pass(
        self, p: Pass, start: int, stop: int, span: tuple[int, int], acc: Tensor | None, lse: Tensor | None
    ) -> tuple[Tensor | None, Tensor | None]:
        """Merge pass `p` over queries start:stop (positions `span`) into (acc, lse), one key tile at a time."""
        keys = self._key_range(p, *span)
        if keys is None:
            return acc, lse
        qp, qc = self.q_pos[start:stop], self.q[..., start:stop, :]
        q_at = p.q_at(qp)
        qr = self.run.queries(qc, self.k, q_at)
        if self.rows is not None:
            factor = self.rows[..., start:stop, None].to(qr.dtype)
            fresh = not self.grad and qr.data_ptr() != qc.data_ptr()  # the rotation's own output: scaled in place
            qr = qr.mul_(factor) if fresh else qr * factor
        for lo, hi in _tiles(*keys, stop - start, self.width):
            acc, lse = self._tile(p, (qp, qc, qr, q_at), span, lo, hi, acc, lse)
        return acc, lse

    def _tile(
        self,
        p: Pass,
        queries: tuple[Tensor, Tensor, Tensor, Tensor],
        span: tuple[int, int],
        lo: int,
        hi: int,
        acc: Tensor | None,
        lse: Tensor | None,
    ) -> tuple[Tensor | None, Tensor | None]:
        """Merge keys lo:hi under pass `p` into (acc, lse): `queries` = positions, q, rotated q and the positions
        they are rotated at; the tile's pieces (`_pieces`) one flash call each."""
        qp, qc, qr, q_at = queries
        k_list = self.k_list
        n_lo, n_hi = (k_list[lo], k_list[hi - 1]) if self.k_sorted else (min(k_list[lo:hi]), max(k_list[lo:hi]))
        kind = _classify(p, *span, n_lo, n_hi, self.contiguous)
        if kind == _EMPTY:
            return acc, lse
        kr = self.run.keys(qc, self.k[..., lo:hi, :], q_at, p.k_at(self.k_pos[lo:hi]))
        vc = self.v[..., lo:hi, :]
        tile = (p, span[0], n_lo, qp, self.k_pos[lo:hi])
        for r0, r1, c0, c1, piece, mask in _pieces(tile, kind, self.contiguous and not self.grad, self.masks):
            part, part_lse = self.run.scores.attend(
                qr[..., r0:r1, :], kr[..., c0:c1, :], vc[..., c0:c1, :], self.scale, causal=piece == _CAUSAL, mask=mask
            )
            if self.grad:
                acc, lse = merge_out_of_place(acc, lse, part, part_lse)
            else:
                assert acc is not None and lse is not None  # allocated above without autograd
                lse[..., r0:r1] = merge_tiles(acc[..., r0:r1, :], lse[..., r0:r1], part, part_lse)[1]
            del part, part_lse  # freed before the next tile allocates its own
        return acc, lse


def contiguous_run(positions: list[int]) -> bool:
    """Whether positions go up by exactly 1 (tiles then map index offsets to distances)."""
    return all(b - a == 1 for a, b in itertools.pairwise(positions))


def query_blocks(q_list: Sequence[int], block: int, period: int | None) -> list[tuple[int, int]]:
    """Index ranges of at most `block` sorted queries, cut where positions cross a multiple of `period`."""
    ranges, start, n = [], 0, len(q_list)
    while start < n:
        stop = min(start + block, n)
        if period:
            boundary = (q_list[start] // period + 1) * period
            stop = min(stop, bisect.bisect_left(q_list, boundary, start, stop))
        ranges.append((start, stop))
        start = stop
    return ranges


def _tiles(i0: int, i1: int, anchor: int, rows: int, width: int) -> list[tuple[int, int]]:
    """Key index ranges covering [i0, i1): first `rows` keys from `anchor` (the tile a pass's lower distance edge
    crosses, exactly causal when it is the square on that edge), then on to i1, then back from the anchor to i0."""
    tiles, lo = [], anchor
    size = rows
    while lo < i1:
        tiles.append((lo, min(lo + size, i1)))
        lo, size = lo + size, width
    hi = anchor
    while hi > i0:
        tiles.append((max(i0, hi - width), hi))
        hi -= width
    return tiles


def _classify(p: Pass, m_lo: int, m_hi: int, n_lo: int, n_hi: int, contiguous: bool) -> int:
    """What pass `p` shows of a tile of queries m_lo..m_hi and keys n_lo..n_hi: nothing, everything, exactly the
    causal triangle (key j <= query i, so the kernel's own causal mask applies), or a part needing a mask."""
    d_lo, d_hi = p.distance
    k_lo, k_hi = p.keys
    if n_hi < k_lo or n_lo > k_hi or m_hi - n_lo < d_lo or m_lo - n_hi > d_hi:
        return _EMPTY
    inside = k_lo <= n_lo and n_hi <= k_hi
    if inside and m_lo - n_hi >= d_lo and m_hi - n_lo <= d_hi:
        return _FULL
    if inside and contiguous and m_lo - n_lo == d_lo and m_hi - n_lo <= d_hi:
        return _CAUSAL
    return _MASKED


def _pieces(
    tile: tuple[Pass, int, int, Tensor, Tensor], kind: int, split: bool, cache: dict[tuple[int, ...], Tensor]
) -> list[tuple[int, int, int, int, int, Tensor | None]]:
    """(rows r0:r1, keys c0:c1, kind, mask) of a tile (pass, first query and key positions, their positions):
    the tile itself, or, when a band edge cuts it and positions are contiguous, its `SUB` x `SUB` pieces, of which
    those the pass hides are dropped and only those the edge crosses get a (small) mask."""
    p, m_lo, n_lo, qp, kp = tile
    c, t = qp.numel(), kp.numel()
    if kind != _MASKED:
        return [(0, c, 0, t, kind, None)]
    if not split:
        return [(0, c, 0, t, kind, _tile_mask(p, qp, kp, m_lo, n_lo, split, cache))]
    pieces = []
    for r0 in range(0, c, SUB):
        r1 = min(r0 + SUB, c)
        for c0 in range(0, t, SUB):
            c1 = min(c0 + SUB, t)
            piece = _classify(p, m_lo + r0, m_lo + r1 - 1, n_lo + c0, n_lo + c1 - 1, True)
            if piece == _EMPTY:
                continue
            mask = None
            if piece == _MASKED:
                mask = _tile_mask(p, qp[r0:r1], kp[c0:c1], m_lo + r0, n_lo + c0, True, cache)
            pieces.append((r0, r1, c0, c1, piece, mask))
    return pieces


def _tile_mask(
    p: Pass, qp: Tensor, kp: Tensor, m_lo: int, n_lo: int, contiguous: bool, cache: dict[tuple[int, ...], Tensor]
) -> Tensor:
    """The tile's float mask (1, 1, c, t), 0 where `p` shows the pair and -inf elsewhere. With contiguous
    positions it depends only on the tile's shape and offset, so equal tiles of later blocks reuse it."""
    c, t = qp.numel(), kp.numel()
    if not contiguous:
        return _float_mask(p.visible(qp[:, None], kp[None, :]))
    clip = (max(0, min(t, p.keys[0] - n_lo)), max(0, min(t, p.keys[1] - n_lo + 1)))
    key = (c, t, m_lo - n_lo, *p.distance, *clip)
    mask = cache.get(key)
    if mask is None:
        rows = torch.arange(c, device=qp.device)[:, None] + m_lo
        cols = torch.arange(t, device=qp.device)[None, :] + n_lo
        mask = _float_mask(p.visible(rows, cols))
        if len(cache) >= MASK_CACHE:
            cache.clear()
        cache[key] = mask
    return mask


def _float_mask(visible: Tensor) -> Tensor:
    return torch.zeros(visible.shape, device=visible.device).masked_fill_(~visible, float("-inf"))[None, None]


def merge_out_of_place(acc: Tensor | None, lse: Tensor | None, part: Tensor, part_lse: Tensor) -> tuple[Tensor, Tensor]:
    """`merge_tiles` under autograd (no in-place updates); a row a tile hides is given a log-sum-exp far below
    any real one instead of -inf, so that no gradient divides 0 by 0."""
    part_lse = part_lse.clamp(min=LSE_FLOOR)
    if acc is None or lse is None:
        return part.float(), part_lse
    total = torch.logaddexp(lse, part_lse)
    return acc * torch.exp(lse - total)[..., None] + part.float() * torch.exp(part_lse - total)[..., None], total
