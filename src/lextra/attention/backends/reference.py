"""The `reference` backend: dense scores with every modifier applied as a tensor, in fp32. Slow, obvious, the
ground truth every other backend is tested against, an extension method's passes included (from its formula)."""

from __future__ import annotations

import torch
from torch import Tensor

from lextra.attention.backends.common import attention_logits, cap_scores, row_factor, sink_softmax
from lextra.attention.content import content_logits
from lextra.attention.context import AttentionBackend, AttentionContext

#: query x key pairs per step of an extension's dense logits (their per-pair rotated copies of q and k)
REFERENCE_PAIRS = 1 << 15


def reference_attention(
    q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext, *, return_weights: bool = False
) -> Tensor | tuple[Tensor, Tensor]:
    """Dense attention of q (B, H, Lq, D), k, v for `ctx` in fp32 (and the weights, with `return_weights`): the
    masked softmax of `context_logits`, sinks one more column; a row the padding hides entirely gives 0."""
    logits, allowed = context_logits(q, k, ctx)
    weights = sink_softmax(logits.masked_fill(~allowed, float("-inf")), ctx.sinks)
    if ctx.padding is not None:
        weights = weights.nan_to_num(0.0)
    out = (weights @ v.float()).to(v.dtype)
    return (out, weights) if return_weights else out


def context_logits(q: Tensor, k: Tensor, ctx: AttentionContext) -> tuple[Tensor, Tensor]:
    """A call's pre-softmax logits (B, H, Lq, Lk) fp32 and its visible pairs: the one dense definition every
    backend is tested against. (rotate(q) . rotate(k) x scale + bias + score bias + forget bias) / tau, then the
    softcap; content-dependent schemes and extension passes give their own."""
    if ctx.passes is not None:
        logits, allowed = extension_logits(q, k, ctx)
    elif ctx.scheme is not None and ctx.scheme.content_dependent:
        return content_logits(q, k, ctx), ctx.allowed()
    else:
        bias = ctx.score_bias
        if ctx.forget is not None:
            bias = ctx.forget.pairs() if bias is None else bias + ctx.forget.pairs()
        logits = attention_logits(q, k, ctx.scheme, ctx.q_pos, ctx.k_pos, ctx.scale, ctx.tau, bias)
        allowed = ctx.allowed()
    if ctx.softcap is not None:
        logits = cap_scores(logits, ctx.softcap)
    return logits, allowed


def extension_logits(q: Tensor, k: Tensor, ctx: AttentionContext) -> tuple[Tensor, Tensor]:
    """Scaled fp32 logits (B, H, Lq, Lk) and visible pairs under the extension method's formula: the query rotated
    at the remapped distance d'(m, n), the key at 0, times the query scale over the temperature."""
    passes, scheme = ctx.passes, ctx.scheme
    assert passes is not None and scheme is not None  # the dispatch checked the scheme (`PassExtension.check`)
    B, H, Lq, D = q.shape
    Lk, Dk = k.shape[-2], k.shape[-1]
    remapped, visible = passes.remap(ctx.q_pos[:, None], ctx.k_pos[None, :])
    remapped = remapped.to(torch.float64).expand(Lq, Lk)
    logits = torch.empty(B, H, Lq, Lk, dtype=torch.float32, device=q.device)
    step = max(1, REFERENCE_PAIRS // max(1, Lk))
    for start in range(0, Lq, step):
        stop = min(start + step, Lq)
        pairs = remapped[start:stop].reshape(-1)
        qe = q[..., start:stop, None, :].expand(B, H, stop - start, Lk, D).reshape(B, H, -1, D)
        ke = k[..., None, :, :].expand(B, H, stop - start, Lk, Dk).reshape(B, H, -1, Dk)
        qr, kr = scheme.rotate(qe, ke, pairs, torch.zeros_like(pairs), ctx.seq_len or 1)
        logits[..., start:stop, :] = (qr.float() * kr.float()).sum(-1).view(B, H, stop - start, Lk)
    logits = logits * ctx.scale
    rows = row_factor(passes.query_scale(ctx.q_pos), ctx.tau, Lq, q.device)
    if rows is not None:
        logits = logits * rows[..., None]
    return logits, visible.expand(Lq, Lk)


class ReferenceBackend(AttentionBackend):
    """Dense scores with every modifier applied as a tensor: slow, obvious, ground truth."""

    name = "reference"
    takes_bias_and_padding = True

    def run(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        out = reference_attention(q, k, v, ctx)
        assert isinstance(out, Tensor)  # no weights asked for
        return out
