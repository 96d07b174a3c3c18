"""The scored path (inside `chunked`): query blocks with their scores written out in fp32, for what no fused
kernel applies: a softcap (tanh on every score) and learned sinks under autograd."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from lextra.attention.backends.common import (
    MAX_BLOCK,
    QueryBlock,
    block_sinks,
    block_tau,
    budget_block,
    cap_scores,
    merge_tiles,
    typical_keys,
    walk_blocks,
)
from lextra.attention.context import AttentionContext
from lextra.attention.flex import with_sinks


def scored_attention(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
    """Query blocks with their scores written out (fp32), for a softcap and for sinks under autograd: under
    autograd one (B, H, block, keys) tensor per block, without it cache-sized tiles (`scored_tiles`)."""
    scheme, block_size, sinks, softcap, scale = ctx.scheme, ctx.block_size, ctx.sinks, ctx.softcap, ctx.scale
    grad = torch.is_grad_enabled()
    if block_size is None:  # under autograd the most queries whose scores over the keys they see fit the budget
        block_size = budget_block(typical_keys(ctx.mask, k.shape[-2], MAX_BLOCK) * q.shape[1]) if grad else SCORED_TILE

    def attend(b: QueryBlock) -> Tensor:
        if grad:
            scores = (b.q.float() @ b.k.float().transpose(-1, -2)) * scale
            bias, allowed = b.bias(), b.allowed()
            if bias is not None:
                scores = scores + bias
            if b.tau is not None:
                scores = scores / b.tau[..., None]
            if softcap is not None:
                scores = cap_scores(scores, softcap)
            if allowed is not None:
                scores = scores.masked_fill(~allowed, float("-inf"))
            lse = torch.logsumexp(scores, dim=-1)
            result = torch.exp(scores - lse.masked_fill(torch.isneginf(lse), 0.0)[..., None]) @ b.v.float()
        else:
            result, lse = scored_tiles(b.q, b.k, b.v, scale, softcap, tau=b.tau, bias=b.bias, mask=_shown(b))
        return result if sinks is None else with_sinks(result, lse, block_sinks(sinks, b.start, b.stop))

    per_block = scheme is not None and scheme.transforms_qk and scheme.rotate_span is not None
    return walk_blocks(q, k, v, ctx, block_size, attend, per_block=per_block)


def _shown(b: QueryBlock) -> PieceTensor:
    """`scored_tiles`' mask callback: a piece's visible pairs where the block's mask hides some of them."""

    def shown(r0: int, r1: int, c0: int, c1: int) -> Tensor | None:
        allowed = b.allowed(r0, r1, c0, c1)
        return None if allowed is None or bool(allowed.all()) else allowed

    return shown


#: the no-autograd scored path's tiles: queries x keys per piece, (B, H, 128, 512) fp32 = 2 MiB at 8 heads
SCORED_TILE = 128
SCORED_KEY_TILE = 512
#: softcaps up to this bound scores so that their exponentials sum without overflow (`scored_tiles`)
BOUNDED_CAP = 60.0
#: (rows r0:r1, keys c0:c1) of a tile -> a piece's pre-cap score bias (H|1, r, c), or its visible pairs (boolean,
#: True visible) or float mask (0 / -inf), or None for none
PieceTensor = Callable[[int, int, int, int], Tensor | None]


def scored_tiles(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scale: float,
    softcap: float | None,
    *,
    tau: Tensor | None = None,
    bias: PieceTensor | None = None,
    mask: PieceTensor | None = None,
    causal: bool = False,
) -> tuple[Tensor, Tensor]:
    """Attention of q (B, H, c, D) over k, v without autograd, scores in fp32 pieces of `SCORED_TILE` x
    `SCORED_KEY_TILE`, each scaled, biased, tempered, capped and masked in place and merged by log-sum-exp. A softcap of
    at most `BOUNDED_CAP` bounds exp(score), so pieces then sum exp(score) v directly. Returns the output (fp32) and
    rows' log-sum-exp; a row that sees no key gives 0 and -inf."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    bounded = softcap is not None and softcap <= BOUNDED_CAP
    divisor = softcap if bounded and softcap is not None else 1.0  # the scores come out divided by it
    qs, kf, vf = q.float() * (scale / divisor), k.float(), v.float()
    if tau is not None:
        qs = qs / tau[..., None]
    out = torch.zeros(*q.shape[:-1], v.shape[-1], device=q.device)
    lse = torch.full(q.shape[:-1], float("-inf"), device=q.device)
    for r0 in range(0, Lq, SCORED_TILE):
        r1 = min(r0 + SCORED_TILE, Lq)
        acc, sums = out[..., r0:r1, :], torch.zeros(*q.shape[:-2], r1 - r0, device=q.device)
        rows_tau = None if tau is None else block_tau(tau, r0, r1)
        for c0 in range(0, min(Lk, r1) if causal else Lk, SCORED_KEY_TILE):
            c1 = min(c0 + SCORED_KEY_TILE, Lk)
            scores = torch.matmul(qs[..., r0:r1, :], kf[..., c0:c1, :].transpose(-1, -2))
            piece_bias = None if bias is None else bias(r0, r1, c0, c1)
            if piece_bias is not None:
                piece_bias = piece_bias / divisor
                scores.add_(piece_bias if rows_tau is None else piece_bias / rows_tau[..., None])
            if softcap is not None:
                (scores if bounded else scores.div_(softcap)).tanh_().mul_(softcap)
            if causal and c1 - 1 > r0:
                hidden = torch.arange(c0, c1, device=q.device)[None, :] > torch.arange(r0, r1, device=q.device)[:, None]
                scores.masked_fill_(hidden, float("-inf"))
            shown = None if mask is None else mask(r0, r1, c0, c1)
            if shown is not None and shown.dtype == torch.bool:
                scores.masked_fill_(~shown, float("-inf"))
            elif shown is not None:
                scores.add_(shown.float())
            if bounded:
                sums.add_(scores.exp_().sum(-1))
                acc.add_(torch.matmul(scores, vf[..., c0:c1, :]))
                continue
            part_lse = torch.logsumexp(scores, dim=-1)
            scores.sub_(part_lse.masked_fill(torch.isneginf(part_lse), 0.0)[..., None]).exp_()
            part = torch.matmul(scores, vf[..., c0:c1, :])
            lse[..., r0:r1] = merge_tiles(acc, lse[..., r0:r1], part, part_lse)[1]  # acc merged in place
        if bounded:
            acc.div_(sums.clamp(min=torch.finfo(torch.float32).tiny)[..., None])
            lse[..., r0:r1] = torch.log(sums)
    return out, lse
