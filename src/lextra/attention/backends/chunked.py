"""The `chunked` backend: queries in blocks (`walk_blocks`), each seeing only the keys its mask declares, its bias
built for that block alone, one SDPA call per block: memory O(H x block x keys). Exactly causal calls without a
per-distance bias take the tiled path, softcaps and sinks the scored path, materialised biases `materialised`."""

from __future__ import annotations

import torch
from torch import Tensor

from lextra.attention.backends.common import (
    LEAN_BLOCK,
    MAX_BLOCK,
    TRAIN_BIAS_BLOCK,
    QueryBlock,
    budget_block,
    contiguous,
    float_mask,
    keys_per_block,
    masked_bias,
    masked_sdpa,
    scaled_query,
    toeplitz_possible,
    typical_keys,
    walk_blocks,
)
from lextra.attention.backends.materialised import materialised_blocks
from lextra.attention.backends.scored import scored_attention
from lextra.attention.backends.tiled import tiled_causal_attention, tiles_apply
from lextra.attention.context import AttentionBackend, AttentionContext
from lextra.attention.masks import Mask
from lextra.positions.base import PositionScheme


def block_size_for(scheme: PositionScheme | None, n_keys: int, n_heads: int, requested: int | None) -> int:
    """Queries per block: as requested, else whole `MAX_BLOCK`s without a bias, else the most whose bias over
    `n_keys` keys fits `BIAS_BUDGET` (`budget_block`), at most `TRAIN_BIAS_BLOCK`."""
    if requested is not None:
        return max(1, int(requested))
    if scheme is None or not scheme.has_bias:
        return MAX_BLOCK
    # fp32 words per (query, key) pair of FIRE's linear pieces past its threshold (fp64 under autograd)
    if not scheme.bias_per_query:
        per_pair = n_heads
    elif torch.is_grad_enabled():
        per_pair = 5 * n_heads + 3
    else:
        per_pair = 2 * n_heads + 3
    size = budget_block(n_keys * per_pair)
    return min(size, TRAIN_BIAS_BLOCK) if TRAIN_BIAS_BLOCK else size


def chunked_attention(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
    """Query blocks, each attending only the keys its mask allows, with its bias built on the fly. Sinks and a
    softcap: the tiled path merges the sinks as one more tile (causal, no softcap), else `scored_attention`."""
    scheme, mask, block_size = ctx.scheme, ctx.mask, ctx.block_size
    if q.shape[-2] == 0:
        return q.new_zeros(*q.shape[:-1], v.shape[-1])
    if ctx.materialised:
        return materialised_blocks(q, k, v, ctx)
    if ctx.softcap is None and tiles_apply(scheme, mask, ctx.q_pos, ctx.k_pos, q.device, q.dtype):
        return tiled_causal_attention(q, k, v, ctx)
    if ctx.sinks is not None or ctx.softcap is not None:
        return scored_attention(q, k, v, ctx)
    has_bias = scheme is not None and scheme.has_bias
    window = typical_keys(mask, k.shape[-2], block_size or MAX_BLOCK)
    lean = toeplitz_possible(scheme, mask, ctx.q_pos)  # biases and masks as strided views of one table
    block = LEAN_BLOCK if lean and block_size is None else block_size_for(scheme, window, q.shape[1], block_size)

    def attend(b: QueryBlock) -> Tensor:
        toeplitz = toeplitz_bias(scheme, b.mask, b.q_pos, b.k_pos, b.tau) if lean or has_bias else None
        if toeplitz is not None:
            # rows reversed so that the bias is a stride-(1, 1) view of one table: no (H, Lq, Lk) tensor is built
            flipped = scaled_query(b.q, b.tau).flip(-2)
            return masked_sdpa(flipped, b.k, b.v, float_mask(toeplitz, b.q), ctx.scale).flip(-2)
        return masked_sdpa(scaled_query(b.q, b.tau), b.k, b.v, _block_mask(b), ctx.scale)

    return walk_blocks(q, k, v, ctx, block, attend, per_block=_rotates_per_block(scheme, mask))


def _rotates_per_block(scheme: PositionScheme | None, mask: Mask) -> bool:
    """Whether each block rotates its own queries and keys: where that is needed (xPos's span) or cheap and lean
    (without autograd, a window's or BCA's block sees ~width + block keys): no rotated copies of all of q and k."""
    bounded = keys_per_block(mask, MAX_BLOCK) is not None
    return (
        scheme is not None
        and scheme.transforms_qk
        and (scheme.rotate_span is not None or (bounded and not torch.is_grad_enabled()))
    )


def _block_mask(b: QueryBlock) -> Tensor | None:
    """A block's SDPA mask: the scheme's bias over the temperature, -inf where hidden (`masked_bias`), 4-D in
    `float_mask`'s dtype; without a bias the boolean visible pairs (None: all)."""
    allowed, bias = b.allowed(), b.bias()
    return allowed if bias is None else float_mask(masked_bias(bias, b.tau, allowed), b.q)[None]


def toeplitz_bias(
    scheme: PositionScheme | None, mask: Mask, qp: Tensor, kp: Tensor, tau: Tensor | None
) -> Tensor | None:
    """The block's masked bias as a view (1, H, c, n) of one per-distance table, rows reversed (`as_strided`, strides
    (1, 1)); without a bias the mask as a view of a 0 / -inf table. Only where bias and mask depend on m - n alone,
    positions are contiguous and no gradient flows to the table."""
    biased = scheme is not None and scheme.has_bias
    if biased and scheme is not None and (not scheme.distance_only(qp) or (tau is not None and tau.shape[-1] != 1)):
        return None
    if not (contiguous(qp) and contiguous(kp)) or qp.numel() == 0 or kp.numel() == 0:
        return None
    c, n = qp.numel(), kp.numel()
    d_max = int(qp[-1]) - int(kp[0])
    distance = d_max - torch.arange(c + n - 1, device=qp.device)  # y -> d = d_max - y
    allowed = mask.allowed_distance(distance)
    if allowed is None:
        return None
    if not biased or scheme is None:  # the temperature is in the scaled queries
        table = torch.zeros(1, c + n - 1, device=qp.device)
    else:
        table = scheme.distance_bias(distance)
        if table.requires_grad:
            return None
        if tau is not None:
            table = table / tau
    table = table.masked_fill(~allowed, float("-inf")).contiguous()
    # 4-D: torch 2.13's CPU SDPA sends a 3-D float mask to its slow math kernel, a 4-D one to the flash kernel
    return table.as_strided((1, table.shape[0], c, n), (0, table.stride(0), 1, 1))


class ChunkedBackend(AttentionBackend):
    """Query blocks, each attending only the keys its mask allows (the tiled path inside); any call."""

    name = "chunked"
    takes_bias_and_padding = True

    def run(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        return chunked_attention(q, k, v, ctx)
