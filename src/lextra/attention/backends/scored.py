"""The scored path (inside `chunked`): query blocks with their scores written out in fp32, for what no fused
kernel applies: a softcap (tanh on every score) and learned sinks under autograd."""

from __future__ import annotations

import torch
from torch import Tensor

from lextra.attention.backends.common import (
    BIAS_BUDGET,
    MAX_BLOCK,
    MIN_BLOCK,
    block_sinks,
    block_tau,
    cap_scores,
    contiguous,
    emit,
    key_block,
    merge_tiles,
    query_blocks,
    rotate,
    typical_keys,
)
from lextra.attention.backends.tiled import BOUNDED_CAP
from lextra.attention.context import AttentionContext
from lextra.attention.flex import with_sinks
from lextra.attention.masks import Mask
from lextra.positions.base import PositionScheme


def scored_attention(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
    """Query blocks with their scores written out (fp32), for what no fused kernel applies: a softcap (tanh on
    every score) and learned sinks under autograd. Each block sees only the keys its mask declares, as in
    `chunked_attention`. Under autograd a block's scores are one (B, H, block, keys) tensor (`BIAS_BUDGET`);
    without, they are cache-sized tiles of `SCORED_TILE` x `SCORED_KEY_TILE`, each tile's softmax merged by its
    log-sum-exp (`merge_tiles`), the operations in place."""
    scheme, mask, q_pos, k_pos, scale, tau = ctx.scheme, ctx.mask, ctx.q_pos, ctx.k_pos, ctx.scale, ctx.tau
    block_size, sinks, softcap = ctx.block_size, ctx.sinks, ctx.softcap
    Lq, Lk = q.shape[-2], k.shape[-2]
    grad = torch.is_grad_enabled()
    keys_sorted = contiguous(k_pos)
    queries_sorted = bool((q_pos.diff() >= 0).all()) if Lq > 1 else True
    window = typical_keys(mask, Lk, block_size or MAX_BLOCK)
    block = block_size or int(min(MAX_BLOCK, max(MIN_BLOCK, BIAS_BUDGET // max(1, window * q.shape[1]))))
    if not grad and block_size is None:
        block = SCORED_TILE
    per_block = scheme is not None and scheme.transforms_qk and scheme.rotate_span is not None
    if per_block and scheme is not None and scheme.rotate_span is not None:
        block = min(block, scheme.rotate_span)
    seq_len = max(int(q_pos.max()), int(k_pos.max())) + 1 if Lk else None
    if not per_block:
        q, k = rotate(scheme, q, k, q_pos, k_pos)
    out = None if grad else q.new_empty(*q.shape[:-1], v.shape[-1])
    out_dtype = v.dtype
    if not grad and softcap is not None and softcap <= BOUNDED_CAP:
        # a column of ones: each tile's product with v also gives its rows' sums of exp(score) (`scored_tiles`)
        v = torch.cat((v.float(), v.new_ones(*v.shape[:-1], 1, dtype=torch.float32)), dim=-1)
    outputs: list[Tensor] = []
    for start, stop in query_blocks(q_pos, block, mask, queries_sorted):
        qp, qc = q_pos[start:stop], q[..., start:stop, :]
        kp, kc, vc = key_block(mask, qp, k, v, k_pos, keys_sorted and queries_sorted)
        if per_block and scheme is not None:
            qc, kc = scheme.rotate(qc, kc, qp, kp, seq_len)
        local = mask.within(int(qp[0]), int(qp[-1])) if keys_sorted and queries_sorted else mask
        tau_block = None if tau is None else block_tau(tau, start, stop)
        if grad:
            scores = (qc.float() @ kc.float().transpose(-1, -2)) * scale
            if scheme is not None and scheme.has_bias:
                scores = scores + scheme.bias(qp, kp)
            if tau_block is not None:
                scores = scores / tau_block[..., None]
            if softcap is not None:
                scores = cap_scores(scores, softcap)
            if not local.hides_nothing:
                scores = scores.masked_fill(~local.allowed(qp, kp), float("-inf"))
            lse = torch.logsumexp(scores, dim=-1)
            result = torch.exp(scores - lse.masked_fill(torch.isneginf(lse), 0.0)[..., None]) @ vc.float()
        else:
            result, lse = scored_tiles(qc.float(), kc, vc, scheme, local, qp, kp, scale, tau_block, softcap)
        if sinks is not None:
            result = with_sinks(result, lse, block_sinks(sinks, start, stop))
        emit(out, outputs, result.to(out_dtype), start, stop)
    return out if out is not None else torch.cat(outputs, dim=-2)


#: the no-autograd scored path's tile: query block x key chunk, (B, H, 128, 512) fp32 = 2 MiB at 8 heads
SCORED_TILE = 128
SCORED_KEY_TILE = 512


def scored_tiles(
    qc: Tensor,
    kc: Tensor,
    vc: Tensor,
    scheme: PositionScheme | None,
    local: Mask,
    qp: Tensor,
    kp: Tensor,
    scale: float,
    tau: Tensor | None,
    softcap: float | None,
) -> tuple[Tensor, Tensor]:
    """One query block's output and log-sum-exp over its keys in chunks of `SCORED_KEY_TILE`, without autograd:
    each tile's scores scaled, biased, tempered and capped in place, masked where the mask hides some of them,
    normalised by the tile's log-sum-exp and merged exactly (`merge_tiles`). A softcap of at most `BOUNDED_CAP`
    bounds every score by the cap, so exp(score) cannot overflow fp32 (e^60 x 10^12 keys < 3 x 10^38): tiles then
    accumulate exp(score) v and the row sums directly, without a log-sum-exp, and divide once at the end; `vc`
    then carries a last column of ones, so one product gives both (no separate pass summing the scores)."""
    bounded = softcap is not None and softcap <= BOUNDED_CAP
    divisor = softcap if bounded and softcap is not None else 1.0  # the scores come out divided by it
    q_scaled = qc * (scale / divisor) if tau is None else qc * (scale / divisor) / tau[..., None]
    acc = lse = None
    for lo in range(0, max(1, kp.numel()), SCORED_KEY_TILE):
        hi = min(lo + SCORED_KEY_TILE, kp.numel())
        scores = torch.matmul(q_scaled, kc[..., lo:hi, :].float().transpose(-1, -2))
        if scheme is not None and scheme.has_bias:
            bias = scheme.bias(qp, kp[lo:hi]) / divisor
            scores.add_(bias if tau is None else bias / tau[..., None])
        if softcap is not None:
            (scores if bounded else scores.div_(softcap)).tanh_().mul_(softcap)
        if not local.hides_nothing:
            allowed = local.allowed(qp, kp[lo:hi])
            if not bool(allowed.all()):
                scores.masked_fill_(~allowed, float("-inf"))
        if bounded:  # lse holds the row sums of exp(score) until the end
            part = torch.matmul(scores.exp_(), vc[..., lo:hi, :])
            acc = part if acc is None else acc.add_(part)
            continue
        part_lse = torch.logsumexp(scores, dim=-1)
        scores.sub_(part_lse.masked_fill(torch.isneginf(part_lse), 0.0)[..., None]).exp_()
        acc, lse = merge_tiles(acc, lse, torch.matmul(scores, vc[..., lo:hi, :].float()), part_lse)
    assert acc is not None  # at least one tile
    if bounded:
        rows = acc[..., -1]
        return acc[..., :-1] / rows.clamp(min=torch.finfo(rows.dtype).tiny)[..., None], torch.log(rows)
    assert lse is not None
    return acc, lse
