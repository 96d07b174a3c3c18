"""The tiling engine: query blocks x passes x key tiles, each tile one flash call that also returns its rows'
log-sum-exp, merged exactly as flash attention merges its tiles (`merge_tiles`). Rotary schemes rotate one
tile's queries and keys at a time, so no rotated copy of q or k is ever held in full.

`tiled_passes` runs a block's passes (`lextra.attention.masks.Pass`): hidden tiles are skipped, fully shown ones run
unmasked, a tile a band edge cuts is split into `SUB` x `SUB` pieces. The `tiled` backend runs it over an extension
method's passes (`tiled_extension`) and a mask's bands (`tiled_bands`); `tiled_causal_attention` is one causal pass.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from lextra.attention.backends.common import (
    TILE,
    attention_with_lse,
    block_sinks,
    block_tau,
    blockwise,
    cap_scores,
    contiguous,
    lse_kernel_applies,
    masked_bias,
    merge_tiles,
    query_blocks,
    row_factor,
    scores_with_lse,
    toeplitz_possible,
)
from lextra.attention.backends.scored import scored_tiles
from lextra.attention.context import AttentionBackend, AttentionContext
from lextra.attention.flex import with_sinks
from lextra.attention.masks import CausalMask, Mask, Pass, same_position
from lextra.errors import ConfigError
from lextra.positions.base import PositionScheme

#: a tile a band edge cuts is split into pieces of this many queries x keys; the edge's pieces get float masks
SUB = 256
#: float masks of such pieces kept per call (256 KiB each)
MASK_CACHE = 16
#: stands for a hidden row's log-sum-exp (-inf) under autograd: exp(LSE_FLOOR - real) is exactly 0
LSE_FLOOR = -1e30
_EMPTY, _FULL, _CAUSAL, _MASKED = range(4)


#: (query positions, key positions, query rows, causal) -> the tile's float score bias (1, H, c, n) over the
#: temperature, the causal square's hidden pairs -inf when `causal`
TileBias = Callable[[Tensor, Tensor, slice, bool], Tensor]


@dataclass
class TileRun:
    """What the tiled loop needs of its caller: the scheme rotating q and k (None: as they are), the passes of a
    query block, the period blocks do not straddle, the sequence length, a name for errors, softcap, sinks, a
    per-tile score bias (`TileBias`) and the keys per tile past a block's first (None: the block's size)."""

    scheme: PositionScheme | None
    passes: Callable[[int, int], list[Pass]]
    period: int | None
    seq_len: int | None
    label: str
    softcap: float | None = None
    sinks: Tensor | None = None
    bias: TileBias | None = None
    key_width: int | None = None

    @classmethod
    def of_passes(cls, ctx: AttentionContext) -> tuple[TileRun, Tensor | None]:
        """The run of the context's extension passes, and the queries' logit factor (`row_factor`)."""
        passes = ctx.passes
        assert passes is not None  # the dispatch runs this under an extension's passes
        run = cls(ctx.scheme, passes.passes, passes.period, ctx.seq_len or 1, repr(passes), ctx.softcap, ctx.sinks)
        return run, row_factor(passes.query_scale(ctx.q_pos), ctx.tau, ctx.q_pos.numel(), ctx.device)

    def check_seen(self, lse: Tensor | None, m_lo: int, m_hi: int) -> None:
        """A ConfigError where a merged row saw no key (its log-sum-exp at the floor)."""
        if lse is None or bool((lse <= LSE_FLOOR).any()):
            raise ConfigError(f"{self.label}: queries at {m_lo}..{m_hi} see no key; their own positions must be keys")

    def queries(self, qc: Tensor, k: Tensor, at: Tensor) -> Tensor:
        if self.scheme is None:
            return qc
        return self.scheme.rotate(qc, k[..., :0, :], at, at[:0], self.seq_len)[0]

    def keys(self, qc: Tensor, kc: Tensor, q_at: Tensor, k_at: Tensor) -> Tensor:
        if self.scheme is None:
            return kc
        return self.scheme.rotate(qc[..., :1, :], kc, q_at[:1], k_at, self.seq_len)[1]


def tiled_passes(
    q: Tensor, k: Tensor, v: Tensor, run: TileRun, ctx: AttentionContext, rows: Tensor | None, block_size: int | None
) -> Tensor:
    """Query blocks x passes x key tiles, merged by log-sum-exp; `rows` the queries' logit factor (1|H, Lq)."""
    B, H, Lq, _ = q.shape
    Lk = k.shape[-2]
    if Lq == 0 or Lk == 0:
        return q.new_zeros(B, H, Lq, v.shape[-1])
    block = max(1, int(block_size or TILE))
    if run.scheme is not None and run.scheme.rotate_span is not None:
        block = min(block, run.scheme.rotate_span)
    call = _TiledCall(q, k, v, run, ctx, rows, block)
    q_sorted = all(a <= b for a, b in itertools.pairwise(call.q_list))
    return blockwise(q, v, query_blocks(call.q_list, block if q_sorted else 1, run.period), call.block)


class _TiledCall:
    """One `tiled_passes` call: its inputs, the positions' host-side facts and the float masks its tiles share."""

    def __init__(
        self, q: Tensor, k: Tensor, v: Tensor, run: TileRun, ctx: AttentionContext, rows: Tensor | None, block: int
    ) -> None:
        self.q, self.k, self.v, self.run, self.q_pos, self.k_pos = q, k, v, run, ctx.q_pos, ctx.k_pos
        self.scale, self.rows, self.width = ctx.scale, rows, run.key_width or block
        self.q_list, self.k_list = ctx.q_pos.tolist(), ctx.k_pos.tolist()
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
        self.run.check_seen(lse, m_lo, m_hi)
        assert acc is not None and lse is not None
        sinks = self.run.sinks
        return acc if sinks is None else with_sinks(acc, lse, block_sinks(sinks, start, stop))

    def _key_range(self, p: Pass, m_lo: int, m_hi: int) -> tuple[int, int, int] | None:
        """The key indices [i0, i1) pass `p` may show queries m_lo..m_hi and the index its lower distance edge
        crosses; None when it shows them no key."""
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
            factor = self.rows[..., start:stop, None]
            if qr.dtype != factor.dtype:  # scaled in fp32, rounded to q's dtype once
                qr = (qr.float() * factor).to(qr.dtype)
            elif not self.grad and qr.data_ptr() != qc.data_ptr():  # the rotation's own output: scaled in place
                qr = qr.mul_(factor)
            else:
                qr = qr * factor
        for lo, hi in _tiles(*keys, stop - start, self.width):
            acc, lse = self._tile(p, (qp, qc, qr, q_at, start), span, lo, hi, acc, lse)
        return acc, lse

    def _tile(
        self,
        p: Pass,
        queries: tuple[Tensor, Tensor, Tensor, Tensor, int],
        span: tuple[int, int],
        lo: int,
        hi: int,
        acc: Tensor | None,
        lse: Tensor | None,
    ) -> tuple[Tensor | None, Tensor | None]:
        """Merge keys lo:hi under pass `p` into (acc, lse), one flash call per piece (`_pieces`)."""
        qp, qc, qr, q_at, row = queries
        k_list = self.k_list
        n_lo, n_hi = (k_list[lo], k_list[hi - 1]) if self.k_sorted else (min(k_list[lo:hi]), max(k_list[lo:hi]))
        kind = _classify(p, *span, n_lo, n_hi, self.contiguous)
        if kind == _EMPTY:
            return acc, lse
        kr = self.run.keys(qc, self.k[..., lo:hi, :], q_at, p.k_at(self.k_pos[lo:hi]))
        vc = self.v[..., lo:hi, :]
        tile = (p, span[0], n_lo, qp, self.k_pos[lo:hi])
        for r0, r1, c0, c1, piece, mask in _pieces(tile, kind, self.contiguous and not self.grad, self.masks):
            banded = mask is not None  # a band edge's mask may hide a row's every key; a causal bias never does
            if self.run.bias is not None:
                bias = self.run.bias(
                    qp[r0:r1], self.k_pos[lo + c0 : lo + c1], slice(row + r0, row + r1), piece == _CAUSAL
                )
                mask, piece = (bias if mask is None else bias + mask), _MASKED
            part, part_lse = tile_attention(
                qr[..., r0:r1, :],
                kr[..., c0:c1, :],
                vc[..., c0:c1, :],
                self.scale,
                self.run.softcap,
                causal=piece == _CAUSAL,
                mask=mask,
                empty_rows=banded,
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


def _tiles(i0: int, i1: int, anchor: int, rows: int, width: int) -> list[tuple[int, int]]:
    """Key index ranges covering [i0, i1): `rows` keys from `anchor` (the tile on a pass's lower distance edge),
    then on to i1, then back from the anchor to i0."""
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
    causal triangle, or a part needing a mask."""
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
    """(rows r0:r1, keys c0:c1, kind, mask) of a tile: the tile itself, or with contiguous positions its `SUB` x
    `SUB` pieces the pass does not hide, only those a band edge crosses masked."""
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
    """The tile's float mask (1, 1, c, t), 0 where `p` shows the pair and -inf elsewhere (cached by shape and
    offset for contiguous positions)."""
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
    """`merge_tiles` under autograd (out of place); a hidden row's log-sum-exp is `LSE_FLOOR`, not -inf."""
    part_lse = part_lse.clamp(min=LSE_FLOOR)
    if acc is None or lse is None:
        return part.float(), part_lse
    total = torch.logaddexp(lse, part_lse)
    return acc * torch.exp(lse - total)[..., None] + part.float() * torch.exp(part_lse - total)[..., None], total


def tile_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scale: float,
    softcap: float | None,
    *,
    causal: bool = False,
    mask: Tensor | None = None,
    empty_rows: bool = True,
) -> tuple[Tensor, Tensor]:
    """One tile of a pass: its output and rows' log-sum-exp (fp32) as `attention_with_lse` gives them; with a
    softcap the scores are written out in fp32 and capped before the mask."""
    if softcap is None:
        return attention_with_lse(q, k, v, scale, causal=causal, mask=mask, empty_rows=empty_rows)
    if not torch.is_grad_enabled():
        out, lse = scored_tiles(q, k, v, scale, softcap, mask=None if mask is None else _rows(mask), causal=causal)
        return out.to(v.dtype), lse
    scores = cap_scores((q.float() @ k.float().transpose(-1, -2)) * scale, softcap)
    return scores_with_lse(scores, v, causal=causal, mask=mask)


def _rows(mask: Tensor) -> Callable[[int, int, int, int], Tensor]:
    """A float mask (.., c, n) read a piece at a time (`scored_tiles`)."""
    return lambda r0, r1, c0, c1: mask[..., r0:r1, c0:c1]


#: FIRE's tiles (bias per query and key): query block x key chunk, a (H, 256, 2048) fp32 bias is 16 MiB
BIAS_TILE = 256
BIAS_KEY_CHUNK = 2048
#: the tiled path replaces the fused call for rotary schemes from this many (query, key) pairs on (4k x 4k)
TILED_MIN_PAIRS = 4096 * 4096


def tiles_apply(
    scheme: PositionScheme | None,
    mask: Mask,
    q_pos: Tensor,
    k_pos: Tensor,
    device: torch.device | str,
    dtype: torch.dtype = torch.float32,
) -> bool:
    """Whether `tiled_causal_attention` computes this call: `lse_kernel_applies`, an exactly causal mask,
    contiguous positions with every query's own among the keys, and no per-distance table bias."""
    if not lse_kernel_applies(torch.device(device), dtype):
        return False
    if not mask.exactly_causal or (scheme is not None and scheme.content_dependent):
        return False
    if q_pos.numel() == 0 or k_pos.numel() == 0 or not (contiguous(q_pos) and contiguous(k_pos)):
        return False
    if scheme is not None and scheme.has_bias and toeplitz_possible(scheme, mask, q_pos):
        return False
    return int(k_pos[0]) <= int(q_pos[0]) and int(q_pos[-1]) <= int(k_pos[-1])


def tiled_causal_attention(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
    """Causal attention as the tiling engine's one causal pass, without autograd (CPU): each query block attends
    its diagonal square (one causal flash call) and earlier keys in chunks, merged by log-sum-exp. A bias (FIRE's)
    is built per tile in blocks of `BIAS_TILE` queries x `BIAS_KEY_CHUNK` keys (`tile_bias`)."""
    scheme, tau, block_size = ctx.scheme, ctx.tau, ctx.block_size
    has_bias = scheme is not None and scheme.has_bias
    block = max(1, int(block_size or (BIAS_TILE if has_bias else TILE)))
    key_width = max(block, BIAS_KEY_CHUNK) if has_bias and block_size is None else block
    if scheme is not None and scheme.rotate_span is not None:
        block = key_width = min(block, scheme.rotate_span)
    bias: TileBias | None = None
    if has_bias and scheme is not None:
        biased = scheme
        workspace: dict[str, Tensor] = {}  # the bias buffers, reused tile after tile (`PositionScheme.bias_into`)

        def bias(qp: Tensor, kp: Tensor, rows: slice, causal: bool) -> Tensor:
            tau_rows = None if tau is None else block_tau(tau, rows.start, rows.stop)
            return tile_bias(biased, qp, kp, tau_rows, causal, workspace)

    rotary = scheme if scheme is not None and scheme.transforms_qk else None
    run = TileRun(rotary, _causal_pass, None, ctx.seq_len, "causal", None, ctx.sinks, bias, key_width)
    rows = row_factor(None, tau, ctx.q_pos.numel(), q.device)
    return tiled_passes(q, k, v, run, ctx, rows, block)


def _causal_pass(q_first: int, q_last: int) -> list[Pass]:
    """A causal call's one pass: every key at distance 0 or more, q and k rotated at their own positions."""
    return [CAUSAL_PASS]


CAUSAL_PASS = Pass("causal", same_position, same_position)


def tile_bias(
    scheme: PositionScheme, qp: Tensor, kp: Tensor, tau: Tensor | None, causal: bool, workspace: dict[str, Tensor]
) -> Tensor:
    """One tile's bias (1, H, c, n) in the flash kernel's mask form: divided by tau, causal square masked."""
    allowed = CausalMask().allowed(qp, kp) if causal else None
    return masked_bias(scheme.bias_into(qp, kp, workspace), tau, allowed)[None]


def tiled_extension(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
    """Attention under the context's extension method: query blocks x its passes x key tiles, equal to the
    reference's formula without its Lq x Lk tensors."""
    run, rows = TileRun.of_passes(ctx)
    return tiled_passes(q, k, v, run, ctx, rows, ctx.block_size)


def tiled_bands(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
    """Attention of (already rotated, or position-free) q, k, v under a mask that states its bands (`Mask.band`:
    causal, window, BCA), each block one pass; blocks `max(TILE, mask.period)` long by default."""
    mask = ctx.mask

    def passes(q_first: int, q_last: int) -> list[Pass]:
        rule = mask.band(q_first, q_last)
        if rule is None:
            raise ConfigError(f"mask {mask!r} states no key range and distance band for queries {q_first}..{q_last}")
        keys, distance = rule
        return [Pass("mask", same_position, same_position, distance, keys)]

    run = TileRun(None, passes, mask.period, None, repr(mask))
    rows = row_factor(None, ctx.tau, ctx.q_pos.numel(), q.device)
    block = ctx.block_size or max(TILE, mask.period or 0)
    return tiled_passes(q, k, v, run, ctx, rows, block)


def bands_apply(mask: Mask, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether `tiled_bands` is the faster exact path for `mask` (what `auto` runs for a plain call): a mask that
    hides work and states its bands, where `lse_kernel_applies`."""
    hides_work = not (mask.exactly_causal or mask.hides_nothing)
    return hides_work and mask.band(0, 0) is not None and lse_kernel_applies(device, dtype)


class TiledBackend(AttentionBackend):
    """The tiling engine as a backend: an extension's passes (any call under one), or a plain call's mask bands
    (no scheme, bias, padding, sinks or softcap) under a mask that states them."""

    name = "tiled"

    def applies(self, ctx: AttentionContext) -> str | None:
        if ctx.passes is not None:
            return None
        plain = ctx.scheme is None and ctx.sinks is None and ctx.softcap is None and not ctx.materialised
        if plain and ctx.forget is None and ctx.mask.band(0, 0) is not None:
            return None
        return (
            "the tiled backend runs an extension's passes, or plain calls (no scheme, sinks or softcap) under a mask "
            "that states bands (causal, window, BCA); use backend='chunked' (or 'auto')"
        )

    def run(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        if ctx.passes is not None:
            return tiled_extension(q, k, v, ctx)
        return tiled_bands(q, k, v, ctx)
