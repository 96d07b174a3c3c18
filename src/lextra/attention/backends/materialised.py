"""Calls with a materialised score bias or padding mask: one float mask (bias over the temperature, -inf where
hidden) passed to one fused call (`sdpa`) or per query block (`chunked`)."""

from __future__ import annotations

import torch
from torch import Tensor

from lextra.attention.backends.common import (
    attention_with_lse,
    blockwise,
    budget_block,
    float_mask,
    masked_sdpa,
    query_blocks,
    rotate,
    scaled_query,
)
from lextra.attention.backends.reference import reference_attention
from lextra.attention.context import AttentionContext
from lextra.attention.flex import with_sinks


def materialised_mask(ctx: AttentionContext) -> Tensor:
    """The call's float mask (B|1, H|1, Lq, Lk) fp32: biases over the temperature, -inf where `ctx.allowed()` hides."""
    bias = torch.zeros((), device=ctx.q_pos.device)
    if ctx.scheme is not None and ctx.scheme.has_bias:
        bias = bias + ctx.scheme.bias(ctx.q_pos, ctx.k_pos)
    if ctx.score_bias is not None:
        bias = bias + ctx.score_bias
    if ctx.tau is not None:
        bias = bias / ctx.tau[..., None]
    allowed = ctx.allowed()
    while allowed.dim() < 4:
        allowed = allowed[None]
    return torch.where(allowed, bias, float("-inf"))


def materialised_attention(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
    """One fused call with `materialised_mask`; sinks through the rows' log-sum-exp (no softcap here)."""
    qr, kr = rotate(ctx.scheme, q, k, ctx.q_pos, ctx.k_pos, ctx.seq_len)
    qs = scaled_query(qr, ctx.tau)
    mask = float_mask(materialised_mask(ctx), qs)
    if ctx.sinks is None:
        return masked_sdpa(qs, kr, v, mask, ctx.scale)
    out, lse = attention_with_lse(qs, kr, v, ctx.scale, mask=mask)
    return with_sinks(out, lse, ctx.sinks)


def materialised_blocks(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
    """Query blocks within `BIAS_BUDGET`, each one fused call on its rows, or with a softcap the reference."""
    block = ctx.block_size or budget_block(q.shape[0] * q.shape[1] * k.shape[-2])

    def attend(start: int, stop: int) -> Tensor:
        rows, qc = ctx.rows(start, stop), q[..., start:stop, :]
        if ctx.softcap is None:
            return materialised_attention(qc, k, v, rows)
        result = reference_attention(qc, k, v, rows)
        assert isinstance(result, Tensor)  # no weights asked for
        return result

    return blockwise(q, v, query_blocks(range(q.shape[-2]), block), attend)
