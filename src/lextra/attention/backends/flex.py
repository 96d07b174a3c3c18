"""The `flex` backend: one compiled FlexAttention call (`lextra.attention.flex`); under an extension method each
pass is one call (`flex_passes`), merged by log-sum-exp. Compiled on CUDA; eager and forward only on CPU."""

from __future__ import annotations

import itertools

import torch
from torch import Tensor

from lextra.attention.backends.common import block_sinks, blockwise, merge_tiles, query_blocks
from lextra.attention.backends.tiled import TileRun, contiguous_run, merge_out_of_place
from lextra.attention.context import AttentionBackend, AttentionContext
from lextra.attention.flex import flex_attention_forward, flex_band_attention, flex_unsupported, with_sinks
from lextra.attention.layout import PositionLayout

#: FlexAttention's kernels on CUDA need a head dimension of at least this
FLEX_MIN_HEAD_DIM = 16


class FlexBackend(AttentionBackend):
    """One compiled FlexAttention call (`lextra.attention.flex`), or one per pass of an extension method."""

    name = "flex"
    takes_bias_and_padding = True

    def applies(self, ctx: AttentionContext) -> str | None:
        reason = flex_unsupported(ctx.scheme, ctx.q_pos, ctx.k_pos, ctx.facts)
        if reason is not None:
            return reason
        if ctx.device.type == "cuda" and ctx.head_dim is not None and ctx.head_dim < FLEX_MIN_HEAD_DIM:
            return (
                f"backend='flex' on CUDA needs a head dimension of at least {FLEX_MIN_HEAD_DIM}, not "
                f"{ctx.head_dim}; use backend='chunked' (or 'auto')"
            )
        return None

    def declines(self, ctx: AttentionContext) -> str | None:
        if ctx.facts.n_q > 0 and ctx.facts.q_min == ctx.facts.q_max:  # its grouped-query heads folded or not
            return (
                "a single query (a decoding step): the chunked path computes it exactly over the keys its mask "
                "declares, with no compiled kernel per key-length bucket and no BlockMask to build per step"
            )
        return None

    def run(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        if ctx.passes is not None:
            return flex_passes(q, k, v, ctx)
        return flex_attention_forward(q, k, v, ctx)


def flex_passes(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
    """The context's extension passes as FlexAttention calls merged by log-sum-exp: queries in as few blocks as the
    method's `period` allows, each pass rotating the block's queries and all keys at its positions."""
    B, H, Lq, _ = q.shape
    if Lq == 0 or k.shape[-2] == 0:
        return q.new_zeros(B, H, Lq, v.shape[-1])
    run, rows = TileRun.of_passes(ctx)
    q_list, k_first = _host_positions(ctx.q_pos, ctx.k_pos, ctx.facts)
    q_runs = isinstance(q_list, range)
    q_sorted = q_runs or all(a <= b for a, b in itertools.pairwise(q_list))

    def attend(start: int, stop: int) -> Tensor:
        block = q_list[start:stop]
        first = (block[0], k_first) if k_first is not None and (q_runs or contiguous_run(list(block))) else None
        factor = None if rows is None else rows[..., start:stop, None]
        queries = (ctx.q_pos[start:stop], q[..., start:stop, :], min(block), max(block))
        acc, lse = _flex_block(run, queries, k, v, ctx.k_pos, factor, ctx.scale, first)
        return acc if ctx.sinks is None else with_sinks(acc, lse, block_sinks(ctx.sinks, start, stop))

    return blockwise(q, v, query_blocks(q_list, Lq if q_sorted else 1, run.period), attend)


def _host_positions(q_pos: Tensor, k_pos: Tensor, layout: PositionLayout) -> tuple[list[int] | range, int | None]:
    """The query positions on the host (a range when `layout` says they are contiguous, read from the device
    otherwise) and the first key position when the keys are contiguous, else None."""
    if layout.q_contiguous:
        q_list = range(layout.q_first, layout.q_first + q_pos.numel())
        return q_list, layout.k_first if layout.k_contiguous else None
    k_list = k_pos.tolist()
    return q_pos.tolist(), k_list[0] if contiguous_run(k_list) else None


def _flex_block(
    run: TileRun,
    queries: tuple[Tensor, Tensor, int, int],
    k: Tensor,
    v: Tensor,
    k_pos: Tensor,
    factor: Tensor | None,
    scale: float,
    first: tuple[int, int] | None,
) -> tuple[Tensor, Tensor]:
    """One query block's passes as FlexAttention calls merged by log-sum-exp (fp32; with the rows' log-sum-exp):
    `queries` = their positions, their q, the first and last position; `factor` their rows' logit factor."""
    qp, qc, m_lo, m_hi = queries
    grad = torch.is_grad_enabled()
    acc: Tensor | None = None
    lse: Tensor | None = None
    for p in run.passes(m_lo, m_hi):
        q_at = p.q_at(qp)
        qr = run.queries(qc, k, q_at)
        if factor is not None:
            qr = qr * factor.to(qr.dtype)
        kr = run.keys(qc, k, q_at, p.k_at(k_pos))
        part, part_lse = flex_band_attention(
            qr, kr, v, qp, k_pos, p.distance, p.keys, scale, first=first, softcap=run.softcap
        )
        if grad:
            acc, lse = merge_out_of_place(acc, lse, part, part_lse)
        else:
            acc, lse = merge_tiles(acc, lse, part, part_lse)
        del part, part_lse, qr, kr
    run.check_seen(lse, m_lo, m_hi)
    assert acc is not None and lse is not None
    return acc, lse
