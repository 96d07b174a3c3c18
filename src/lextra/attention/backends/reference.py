"""The `reference` backend: dense scores with every modifier applied as a tensor, in fp32. Slow, obvious, the
ground truth every other backend is tested against."""

from __future__ import annotations

from torch import Tensor

from lextra.attention.backends.common import attention_logits, cap_scores, sink_softmax
from lextra.attention.context import AttentionBackend, AttentionContext


def reference_attention(
    q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext, *, return_weights: bool = False
) -> Tensor | tuple[Tensor, Tensor]:
    """Dense attention of q (B, H, Lq, D), k, v for `ctx` in fp32 (and the weights, with `return_weights`).

    A softcap caps the scores (tanh(s / c) c, Gemma 2's eager order: after scaling, before the mask); sinks (H,)
    are concatenated to the masked scores as one more column, whose probability is dropped after the softmax
    (gpt-oss's `eager_attention_forward`). A materialised score bias is added with the scheme's bias, before the
    temperature; a padding mask hides pairs with the mask, and a row it hides entirely attends to nothing (0)."""
    logits = attention_logits(q, k, ctx.scheme, ctx.q_pos, ctx.k_pos, ctx.scale, ctx.tau, ctx.score_bias)
    if ctx.softcap is not None:
        logits = cap_scores(logits, ctx.softcap)
    logits = logits.masked_fill(~ctx.allowed(), float("-inf"))
    weights = sink_softmax(logits, ctx.sinks)
    if ctx.padding is not None:
        weights = weights.nan_to_num(0.0)
    out = (weights @ v.float()).to(v.dtype)
    return (out, weights) if return_weights else out


class ReferenceBackend(AttentionBackend):
    """Dense scores with every modifier applied as a tensor: slow, obvious, ground truth."""

    name = "reference"
    takes_bias_and_padding = True

    def applies(self, ctx: AttentionContext) -> str | None:
        return None

    def run(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        out = reference_attention(q, k, v, ctx)
        assert isinstance(out, Tensor)  # no weights asked for
        return out
