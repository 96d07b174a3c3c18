"""Calls with a materialised score bias or padding mask (Hugging Face's T5 `position_bias`, padded batches): one
float attention mask holding the bias over the temperature and -inf where the mask or the padding hides a pair,
passed to one fused call (`sdpa`), or per query block (`chunked`), each block's rows of the tensors alone."""

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
    """The call's float mask (B|1, H|1, Lq, Lk) in fp32: the scheme's bias and the score bias over the
    temperature (the queries carry the temperature too, `scaled_query`), -inf where `ctx.allowed()` hides a
    pair."""
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
    """One fused call on rotated, tempered q and k with `materialised_mask` as its float mask; learned sinks
    through each row's log-sum-exp (`attention_with_lse`, `with_sinks`). A row that sees no key gives 0. The
    softcap is not applied here: `materialised_blocks` sends it to the reference computation."""
    qr, kr = rotate(ctx.scheme, q, k, ctx.q_pos, ctx.k_pos, ctx.seq_len)
    qs = scaled_query(qr, ctx.tau)
    mask = float_mask(materialised_mask(ctx), qs)
    if ctx.sinks is None:
        return masked_sdpa(qs, kr, v, mask, ctx.scale)
    out, lse = attention_with_lse(qs, kr, v, ctx.scale, mask=mask)
    return with_sinks(out, lse, ctx.sinks)


def materialised_blocks(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
    """Query blocks (one block's (B, H, block, Lk) scores within `BIAS_BUDGET`), each with its rows of the score
    bias and the padding (`AttentionContext.rows`): one fused call per block (`materialised_attention`), or with a
    softcap the reference computation of the block."""
    block = ctx.block_size or budget_block(q.shape[0] * q.shape[1] * k.shape[-2])

    def attend(start: int, stop: int) -> Tensor:
        rows, qc = ctx.rows(start, stop), q[..., start:stop, :]
        if ctx.softcap is None:
            return materialised_attention(qc, k, v, rows)
        result = reference_attention(qc, k, v, rows)
        assert isinstance(result, Tensor)  # no weights asked for
        return result

    return blockwise(q, v, query_blocks(range(q.shape[-2]), block), attend)
