"""Forgetting Attention in tiles with its own backward: each tile's forget bias the outer difference of two
slices of c, merged by an online softmax in fp32. Backward recomputes every tile from the rows' log-sum-exp (as
FlashAttention), so training holds O(L) numbers per head; dc_i = sum_j dS_ij, dc_j = -sum_i dS_ij."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch
from torch import Tensor

from lextra.attention.backends.common import attention_with_lse, merge_tiles
from lextra.attention.forget_bias import tile_difference

#: query rows per block and keys per chunk: a (B, H, 512, 1024) fp32 score tile is 2 MiB per batch row and head
FORGET_BLOCK = 512
FORGET_KEY_CHUNK = 1024

#: (query start, query stop) -> [(key lo, key hi)]: the key ranges a query block may see
KeyRanges = Callable[[int, int], list[tuple[int, int]]]
#: (query start, query stop, key lo, key hi) -> a boolean (c, n) tile of visible pairs, or None when all are
TileMask = Callable[[int, int, int, int], Tensor | None]


class _Tiling(NamedTuple):
    """A call's tiling: the scale, query rows per block, keys per chunk, and the mask as key ranges and tiles."""

    scale: float
    block: int
    chunk: int
    key_ranges: KeyRanges
    tile_mask: TileMask

    def tiles(self, n_queries: int) -> Iterator[tuple[int, int, Iterator[tuple[int, int, Tensor | None]]]]:
        """Query blocks, each with the key chunks (lo, hi, visible pairs or None: all) it sees, hidden ones skipped."""
        for start in range(0, n_queries, self.block):
            stop = min(start + self.block, n_queries)
            yield start, stop, self._chunks(start, stop)

    def _chunks(self, start: int, stop: int) -> Iterator[tuple[int, int, Tensor | None]]:
        for first, last in self.key_ranges(start, stop):
            for lo in range(first, last, self.chunk):
                hi = min(lo + self.chunk, last)
                allowed = self.tile_mask(start, stop, lo, hi)
                if allowed is None or bool(allowed.any()):
                    yield lo, hi, allowed


def _scores(
    qs: Tensor, k: Tensor, cq: Tensor, ck: Tensor, rows: Tensor | None, allowed: Tensor | None
) -> tuple[Tensor, Tensor]:
    """One tile's logits (B, H, c, n) fp32: (q . k) + (c_i - c_j) r_i, hidden pairs -inf; and c_i - c_j."""
    diff = tile_difference(cq, ck, qs.dtype)
    scores = qs @ k.to(qs.dtype).transpose(-1, -2) + (diff if rows is None else diff * rows[..., None])
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    return scores, diff


def _online_forward(
    q: Tensor, k: Tensor, v: Tensor, cq: Tensor, ck: Tensor, rows: Tensor | None, tiling: _Tiling, work: torch.dtype
) -> tuple[Tensor, Tensor]:
    """The forward as explicit tiles in `work` precision with an online softmax: output and rows' log-sum-exp."""
    B, H, Lq, _ = q.shape
    out = torch.zeros(B, H, Lq, v.shape[-1], dtype=work, device=q.device)
    lse = torch.full((B, H, Lq), float("-inf"), dtype=work, device=q.device)
    for start, stop, chunks in tiling.tiles(Lq):
        qs = q[..., start:stop, :].to(work) * tiling.scale
        r = None if rows is None else rows[..., start:stop]
        m = torch.full((B, H, stop - start), float("-inf"), dtype=work, device=q.device)
        total = torch.zeros_like(m)
        acc = out[..., start:stop, :]
        for lo, hi, allowed in chunks:
            s, _ = _scores(qs, k[..., lo:hi, :], cq[..., start:stop], ck[..., lo:hi], r, allowed)
            new_m = torch.maximum(m, s.amax(-1))
            base = new_m.masked_fill(torch.isneginf(new_m), 0.0)
            p = torch.exp(s - base[..., None])
            shrink = torch.exp(m - base)
            total = total * shrink + p.sum(-1)
            acc.mul_(shrink[..., None]).add_(p @ v[..., lo:hi, :].to(work))
            m = new_m
        seen = total > 0
        acc.div_(torch.where(seen, total, 1.0)[..., None])
        lse[..., start:stop] = torch.where(seen, m + torch.log(total), float("-inf"))
    return out, lse


def _flash_forward(
    q: Tensor, k: Tensor, v: Tensor, cq: Tensor, ck: Tensor, rows: Tensor | None, tiling: _Tiling
) -> tuple[Tensor, Tensor]:
    """The forward on the CPU: one flash call per tile, its bias (fp32, hidden pairs -inf) as the float mask, tiles
    merged by log-sum-exp (`merge_tiles`); output and rows' log-sum-exp in fp32."""
    B, H, Lq, _ = q.shape
    out = torch.zeros(B, H, Lq, v.shape[-1], dtype=torch.float32)
    lse = torch.full((B, H, Lq), float("-inf"))
    for start, stop, chunks in tiling.tiles(Lq):
        acc = row_lse = None
        r = None if rows is None else rows[..., start:stop, None]
        for lo, hi, allowed in chunks:
            bias = tile_difference(cq[..., start:stop], ck[..., lo:hi])
            bias = bias if r is None else bias.mul_(r)
            if allowed is not None:
                bias.masked_fill_(~allowed, float("-inf"))
            part, part_lse = attention_with_lse(
                q[..., start:stop, :], k[..., lo:hi, :], v[..., lo:hi, :], tiling.scale, mask=bias
            )
            acc, row_lse = merge_tiles(acc, row_lse, part, part_lse)
        if acc is not None and row_lse is not None:
            out[..., start:stop, :] = acc
            lse[..., start:stop] = row_lse
    return out, lse


class TiledForgetAttention(torch.autograd.Function):
    """softmax(q k^T scale + (c_i - c_j) r_i, masked) v over tiles, r the inverse temperature or None."""

    @staticmethod
    def forward(
        ctx: Any,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        cq: Tensor,
        ck: Tensor,
        rows: Tensor | None,
        scale: float,
        block: int,
        chunk: int,
        key_ranges: KeyRanges,
        tile_mask: TileMask,
    ) -> Tensor:
        tiling = _Tiling(scale, block, chunk, key_ranges, tile_mask)
        if q.device.type == "cpu" and q.dtype in (torch.float32, torch.bfloat16):
            out, lse = _flash_forward(q, k, v, cq, ck, rows, tiling)
        else:
            out, lse = _online_forward(q, k, v, cq, ck, rows, tiling, torch.promote_types(q.dtype, torch.float32))
        ctx.save_for_backward(q, k, v, cq, ck, rows, out, lse)
        ctx.tiling = tiling
        return out.to(v.dtype)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, cq, ck, rows, out, lse = ctx.saved_tensors
        tiling: _Tiling = ctx.tiling
        scale, work = tiling.scale, out.dtype
        dq, dk = torch.zeros_like(q, dtype=work), torch.zeros_like(k, dtype=work)
        dv = torch.zeros_like(v, dtype=work)
        dcq, dck = torch.zeros_like(cq, dtype=work), torch.zeros_like(ck, dtype=work)
        drows = None if rows is None else torch.zeros(*cq.shape, dtype=work, device=q.device)
        grad = grad.to(work)
        for start, stop, chunks in tiling.tiles(q.shape[-2]):
            qs = q[..., start:stop, :].to(work) * scale
            r = None if rows is None else rows[..., start:stop]
            g = grad[..., start:stop, :]
            delta = (g * out[..., start:stop, :]).sum(-1, keepdim=True)
            row_lse = lse[..., start:stop, None]
            row_lse = row_lse.masked_fill(torch.isneginf(row_lse), 0.0)
            for lo, hi, allowed in chunks:
                kc, vc = k[..., lo:hi, :].to(work), v[..., lo:hi, :].to(work)
                s, diff = _scores(qs, kc, cq[..., start:stop], ck[..., lo:hi], r, allowed)
                p = torch.exp(s - row_lse)
                dv[..., lo:hi, :] += p.transpose(-1, -2) @ g
                ds = p * (g @ vc.transpose(-1, -2) - delta)
                dq[..., start:stop, :] += (ds @ kc) * scale
                dk[..., lo:hi, :] += ds.transpose(-1, -2) @ qs
                dsr = ds if r is None else ds * r[..., None]
                dcq[..., start:stop] += dsr.sum(-1)
                dck[..., lo:hi] -= dsr.sum(-2)
                if drows is not None:
                    drows[..., start:stop] += (ds * diff).sum(-1)
        if drows is not None and rows is not None:
            drows = drows.sum_to_size(rows.shape)
        return (
            dq.to(q.dtype),
            dk.to(k.dtype),
            dv.to(v.dtype),
            dcq.to(cq.dtype),
            dck.to(ck.dtype),
            None if drows is None or rows is None else drows.to(rows.dtype),
            None,
            None,
            None,
            None,
            None,
        )
