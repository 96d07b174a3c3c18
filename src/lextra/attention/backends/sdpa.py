"""The `sdpa` backend: one fused `scaled_dot_product_attention` call, for schemes without a bias, a causal or full
mask and aligned queries, or a cached decoding step. Sinks go through the CPU flash kernel's log-sum-exp."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from lextra.attention.backends.common import FLASH_WITH_LSE, lse_kernel_applies, rotate, scaled_query
from lextra.attention.backends.materialised import materialised_attention
from lextra.attention.backends.tiled import TILED_MIN_PAIRS, tiles_apply
from lextra.attention.context import AttentionBackend, AttentionContext
from lextra.attention.flex import with_sinks
from lextra.attention.layout import PositionLayout
from lextra.attention.masks import Mask
from lextra.positions.base import PositionScheme

#: why `sdpa` does not apply, with its fix
SDPA_FIX = "use backend='chunked' or 'auto'"


def sdpa_reason(scheme: PositionScheme | None, mask: Mask, facts: PositionLayout) -> str | None:
    """Why one fused SDPA call cannot compute this exactly (None: it can), decided from the positions' facts."""
    if scheme is not None and scheme.has_bias:
        return f"the sdpa backend runs one fused call: it cannot apply score biases ({scheme.name}'s); {SDPA_FIX}"
    if not (mask.exactly_causal or mask.hides_nothing):
        return f"the sdpa backend runs one fused call and cannot apply the mask {mask!r}; {SDPA_FIX}"
    if facts.n_q == 0 or facts.n_k == 0:
        return f"the sdpa backend needs at least one query and one key; {SDPA_FIX}"
    if scheme is not None and scheme.rotate_span is not None and facts.span > scheme.rotate_span:
        return (
            f"the sdpa backend rotates all queries and keys in one call and {scheme.name} is exact within "
            f"{scheme.rotate_span} positions, not {facts.span}; {SDPA_FIX}"
        )
    if mask.hides_nothing or decoding_step(mask, facts):
        return None
    if facts.same and facts.q_contiguous:
        return None
    return (
        "the sdpa backend's causal call needs queries at the keys' own contiguous positions, or one query after "
        f"every key; {SDPA_FIX}"
    )


def decoding_step(mask: Mask, facts: PositionLayout) -> bool:
    """Queries under a causal mask at or after every key (a cached decoding step): one SDPA call without a mask."""
    return mask.exactly_causal and facts.n_q > 0 and facts.n_k > 0 and facts.k_max <= facts.q_min


#: head dims up to which a bf16 call without autograd on CPU runs in fp32 (the flash kernel is faster there)
CPU_FP32_HEAD_DIM = 64


def fp32_kernel(q: Tensor, k: Tensor, v: Tensor) -> bool:
    """Whether the fused call takes q, k, v in fp32 although bf16 autocast made some of them bf16: on the CPU,
    without autograd, at head dims up to `CPU_FP32_HEAD_DIM` (more exact, and faster there)."""
    return (
        q.device.type == "cpu"
        and torch.bfloat16 in (q.dtype, k.dtype, v.dtype)
        and not torch.is_grad_enabled()
        and q.shape[-1] <= CPU_FP32_HEAD_DIM
    )


def sdpa_attention(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
    """One fused call (`is_causal` for a causal mask, none for a decoding step), in fp32 where `fp32_kernel` says
    so; a materialised score bias or padding mask goes in as its float mask."""
    if ctx.materialised:
        return materialised_attention(q, k, v, ctx)
    qr, kr = rotate(ctx.scheme, q, k, ctx.q_pos, ctx.k_pos, ctx.seq_len)
    causal = ctx.mask.exactly_causal and not decoding_step(ctx.mask, ctx.facts)
    qs = scaled_query(qr, ctx.tau)
    if fp32_kernel(qs, kr, v):
        with torch.autocast(q.device.type, enabled=False):
            return _fused(qs.float(), kr.float(), v.float(), ctx, causal).to(torch.bfloat16)
    return _fused(qs, kr, v, ctx, causal)


def _fused(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext, causal: bool) -> Tensor:
    """The fused call on scaled, rotated q and k: SDPA, or with sinks the CPU flash kernel's log-sum-exp."""
    if ctx.sinks is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=ctx.scale)
    assert FLASH_WITH_LSE is not None  # `lse_kernel_applies` checked it
    out, lse = FLASH_WITH_LSE(q, k, v, 0.0, causal, scale=ctx.scale)
    return with_sinks(out, lse, ctx.sinks)


class SdpaBackend(AttentionBackend):
    """One fused `scaled_dot_product_attention` call."""

    name = "sdpa"
    takes_bias_and_padding = True

    def applies(self, ctx: AttentionContext) -> str | None:
        if ctx.softcap is not None:
            return f"the sdpa backend runs one fused call and cannot cap its scores (softcap); {SDPA_FIX}"
        if ctx.sinks is not None and not lse_kernel_applies(ctx.device, ctx.dtype):
            return (
                "the sdpa backend applies sinks through the CPU flash kernel's log-sum-exp, without autograd, in "
                f"fp32 or bf16; {SDPA_FIX}"
            )
        return sdpa_reason(ctx.scheme, ctx.mask, ctx.facts)

    def declines(self, ctx: AttentionContext) -> str | None:
        scheme = ctx.scheme
        if (
            scheme is not None
            and scheme.transforms_qk
            and ctx.q_pos.numel() * ctx.k_pos.numel() >= TILED_MIN_PAIRS
            and tiles_apply(scheme, ctx.mask, ctx.q_pos, ctx.k_pos, ctx.device, ctx.dtype)
        ):
            return "a rotary scheme at long lengths: the tiled path holds no rotated copies of all of q and k"
        return None

    def run(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        return sdpa_attention(q, k, v, ctx)


def sdpa_applies(scheme: PositionScheme | None, mask: Mask, q_pos: Tensor, k_pos: Tensor) -> bool:
    """Whether one fused SDPA call computes attention at these positions exactly (`sdpa_reason`)."""
    return sdpa_reason(scheme, mask, PositionLayout.of(q_pos, k_pos)) is None
