"""The tiled path (inside `chunked`; no autograd, CPU, an exactly causal mask, no per-distance bias): query
blocks x key chunks, each tile one flash call that also returns its log-sum-exp, merged exactly as flash attention
merges its tiles. Rotary schemes rotate one tile's queries and keys at a time, so no rotated copy of q or k is
ever held in full; FIRE's per-pair bias is built one tile at a time."""

from __future__ import annotations

import torch
from torch import Tensor

from lextra.attention.backends.common import (
    FLASH_WITH_LSE,
    TILE,
    block_sinks,
    block_tau,
    contiguous,
    float_mask,
    mask_in_place,
    merge_tiles,
    rotate,
    scaled_query,
    toeplitz_possible,
)
from lextra.attention.context import AttentionContext
from lextra.attention.flex import with_sinks
from lextra.attention.masks import CausalMask, Mask
from lextra.positions.base import PositionScheme

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
    """Whether `tiled_causal_attention` computes this call: no autograd, CPU, an exactly causal mask, contiguous
    positions with every query's own position among the keys, and no bias or one that is not a per-distance
    table (FIRE past its threshold; per-distance tables are cheaper as strided views), in a dtype the CPU flash
    kernel's log-sum-exp variant accepts (fp32, bf16)."""
    if FLASH_WITH_LSE is None or torch.is_grad_enabled() or torch.device(device).type != "cpu":
        return False
    if dtype not in (torch.float32, torch.bfloat16):
        return False
    if not mask.exactly_causal or (scheme is not None and scheme.content_dependent):
        return False
    if q_pos.numel() == 0 or k_pos.numel() == 0 or not (contiguous(q_pos) and contiguous(k_pos)):
        return False
    if scheme is not None and scheme.has_bias and toeplitz_possible(scheme, mask, q_pos):
        return False
    return int(k_pos[0]) <= int(q_pos[0]) and int(q_pos[-1]) <= int(k_pos[-1])


def tiled_causal_attention(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
    """Causal attention as query blocks x key chunks, without autograd (CPU): exact, and lean for rotary schemes.

    Each query block attends its diagonal square (one causal flash call) and every earlier key chunk (unmasked
    flash calls); each call returns its rows' log-sum-exp, and the partial outputs are merged exactly:
    out = sum_j out_j exp(lse_j - lse), lse = logaddexp_j lse_j. Every row sees at least its own key in the
    diagonal tile, so no tile has a fully masked row. A rotary scheme rotates each tile's queries and keys on the
    fly (xPos anchored at the query block, as in `chunked`), so extra memory is the output plus O(tile) buffers,
    where the fused call needs rotated copies of all of q and k. A bias (FIRE's, per query and key) is built
    per tile into reused buffers and passed as the tile's float mask, the causal square's masked in. Learned
    `sinks` (H,) are one more tile of log-sum-exp sink_h and output 0 (`with_sinks`).
    """
    assert FLASH_WITH_LSE is not None  # `tiles_apply` checked it
    scheme, q_pos, k_pos, scale, tau, sinks = ctx.scheme, ctx.q_pos, ctx.k_pos, ctx.scale, ctx.tau, ctx.sinks
    block_size = ctx.block_size
    Lq = q.shape[-2]
    has_bias = scheme is not None and scheme.has_bias
    block = max(1, int(block_size or (BIAS_TILE if has_bias else TILE)))
    key_chunk = max(block, BIAS_KEY_CHUNK) if has_bias and block_size is None else block
    if scheme is not None and scheme.rotate_span is not None:
        block = key_chunk = min(block, scheme.rotate_span)
    workspace: dict[str, Tensor] = {}
    seq_len = max(int(q_pos[-1]), int(k_pos[-1])) + 1
    k0 = int(k_pos[0])
    out = q.new_empty(*q.shape[:-1], v.shape[-1])
    for start in range(0, Lq, block):
        stop = min(start + block, Lq)
        qp = q_pos[start:stop]
        first, last = int(qp[0]) - k0, int(qp[-1]) - k0 + 1  # key indices of the diagonal square
        qc = q[..., start:stop, :]
        tau_block = None if tau is None else block_tau(tau, start, stop)
        tiles = [(first, last, True)] + [(lo, min(lo + key_chunk, first), False) for lo in range(0, first, key_chunk)]
        acc = lse = qs = None
        for lo, hi, causal in tiles:
            if qs is None:  # the diagonal tile: rotate the query block once for all its tiles
                qr, kr = rotate(scheme, qc, k[..., lo:hi, :], qp, k_pos[lo:hi], seq_len)
                qs = scaled_query(qr, tau_block)
            else:  # keys alone (one query row passed along: xPos anchors its scales at the block's first query)
                _, kr = rotate(scheme, qc[..., :1, :], k[..., lo:hi, :], qp[:1], k_pos[lo:hi], seq_len)
            if has_bias and scheme is not None:
                bias = tile_bias(scheme, qp, k_pos[lo:hi], tau_block, causal, workspace)
                part, part_lse = FLASH_WITH_LSE(
                    qs, kr, v[..., lo:hi, :], 0.0, False, attn_mask=float_mask(bias, qs), scale=scale
                )
            else:
                part, part_lse = FLASH_WITH_LSE(qs, kr, v[..., lo:hi, :], 0.0, causal, scale=scale)
            acc, lse = merge_tiles(acc, lse, part, part_lse)
        assert acc is not None and lse is not None  # every query block has its diagonal tile
        out[..., start:stop, :] = acc if sinks is None else with_sinks(acc, lse, block_sinks(sinks, start, stop))
    return out


def tile_bias(
    scheme: PositionScheme, qp: Tensor, kp: Tensor, tau: Tensor | None, causal: bool, workspace: dict[str, Tensor]
) -> Tensor:
    """One tile's bias (1, H, c, n) in the flash kernel's mask form: divided by tau, causal square masked."""
    bias = scheme.bias_into(qp, kp, workspace)
    if tau is not None:
        bias = bias / tau[..., None]
    if causal:
        mask_in_place(bias, CausalMask().allowed(qp, kp))
    return bias[None]
