"""The `flex` backend: one compiled FlexAttention call (`lextra.attention.flex`): biases as score modifiers read
from the per-distance tables, masks as a mask_mod and a cached BlockMask, lengths padded to a few buckets; forward
on CPU, forward and backward on CUDA. A materialised score bias is a captured tensor read by the score_mod, a
padding mask one read by the BlockMask's mask_mod."""

from __future__ import annotations

from torch import Tensor

from lextra.attention.context import AttentionBackend, AttentionContext
from lextra.attention.flex import flex_attention_forward, flex_unsupported

#: FlexAttention's kernels on CUDA need a head dimension of at least this
FLEX_MIN_HEAD_DIM = 16


class FlexBackend(AttentionBackend):
    """One compiled FlexAttention call (`lextra.attention.flex`)."""

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
        return flex_attention_forward(q, k, v, ctx)
