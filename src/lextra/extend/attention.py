"""Attention under a training-free extension method: the per-layer handle and its functional forms.

The passes of a method (`lextra.extend.base`) are a feature of the attention context (`AttentionContext.passes`):
the core backends run them, `reference` from the method's formula, `tiled` through the tiling engine (query blocks
x passes x key tiles merged by log-sum-exp) and `flex` as one FlexAttention call per pass, and the one dispatch
chooses among them (`lextra.attention.backends.passes_path`). A layer's softcap caps each pass's scores and its
sinks join the merged denominator once.

- `ExtendedAttention`: what a layer attends through under a method (`LayerInference.extension`, written by
  `lextra.extend.InferenceSetup`), so that full forwards and cached decoding use the same passes. Decoding needs no
  rule of its own: a new query at m runs the method's passes over the cached, un-rotated keys, which is each
  author's decode rule (keys rotated at -d'(m, n) against an unrotated query) with the full forward's numbers.
  Methods with a bounded view (sinks, LM-Infinite) let the cache evict keys no later query sees.
- `reference_extended_attention`, `extended_attention`, `flex_extended_attention`: `attention(...)` under a method
  on the `reference`, `tiled` and `flex` backends, with a scheme, positions and a layer's `LayerScores`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Unpack

from torch import Tensor

from lextra.attention.backends import (
    AttentionContext,
    AttentionExtension,
    AttentionOptions,
    attention,
    get_backend,
    passes_path,
    run_attention,
)
from lextra.extend.base import ExtensionMethod
from lextra.positions.base import PositionScheme


@dataclass(frozen=True, eq=False)
class LayerScores:
    """What a layer does to scores besides the method: `softcap` (each pass's scores become tanh(s / c) c before
    the pass's mask) and `sinks`, one logit per head (H,) or per head and query row (H, Lq), added once to the
    merged softmax's denominator. The default changes nothing."""

    softcap: float | None = None
    sinks: Tensor | None = None


#: no softcap, no sinks
PLAIN_SCORES = LayerScores()


class ExtendedAttention(AttentionExtension):
    """A layer's attention under `method` (`SelfAttention.extension`, `attention(..., extension=)`): carries the
    method's passes into the context, which the dispatch runs on the `reference`, `flex` (what 'auto' runs on CUDA
    where flex applies) or `tiled` backend. The mask must be causal (the method sets its own visibility). Calling
    it takes `attention`'s keywords."""

    heads_alike = True

    def __init__(self, method: ExtensionMethod) -> None:
        self.method = method
        self.passes = method
        self.name = method.name

    def flex_reason(self, ctx: AttentionContext) -> str | None:
        """Why the passes cannot run as FlexAttention calls here (None: they can), from the context alone."""
        return get_backend("flex").applies(ctx)

    def path(self, ctx: AttentionContext) -> str:
        """What backend='auto' runs (`passes_path`): "flex" on CUDA where flex applies, else "tiled"."""
        return passes_path(replace(ctx, backend="auto"))

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, **options: Unpack[AttentionOptions]) -> Tensor:
        """`attention(q, k, v, extension=self, **options)`."""
        options["extension"] = self
        return attention(q, k, v, **options)

    def retains(self, k_pos: Tensor, next_query: int) -> Tensor:
        """Which cached keys a query at `next_query` or later can still see (the cache evicts the others)."""
        return self.method.retains(k_pos, next_query)

    def __repr__(self) -> str:
        return f"ExtendedAttention({self.method!r})"


def _extended(
    backend: str,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scheme: PositionScheme | None,
    method: ExtensionMethod,
    scores: LayerScores,
    **options: Any,
) -> Tensor:
    """`attention` under `method` on `backend`, the scores' sinks per head (H,) or per query row (H, Lq)."""
    ctx = AttentionContext.build(
        q, k, scheme=scheme, extension=ExtendedAttention(method), backend=backend, softcap=scores.softcap, **options
    )
    return run_attention(q, k, v, replace(ctx, sinks=scores.sinks))


def reference_extended_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scheme: PositionScheme | None,
    method: ExtensionMethod,
    q_pos: Tensor | None = None,
    k_pos: Tensor | None = None,
    scale: float | None = None,
    temperature: Tensor | float | None = None,
    scores: LayerScores = PLAIN_SCORES,
) -> Tensor:
    """Dense attention of q (B, H, Lq, D), k, v under `method` from its formula (the `reference` backend): each
    pair scored with the query rotated at d'(m, n) and the key at 0, one fp32 softmax over the visible pairs."""
    args = (q, k, v, scheme, method, scores)
    return _extended("reference", *args, q_pos=q_pos, k_pos=k_pos, scale=scale, temperature=temperature)


def extended_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scheme: PositionScheme | None,
    method: ExtensionMethod,
    q_pos: Tensor | None = None,
    k_pos: Tensor | None = None,
    scale: float | None = None,
    temperature: Tensor | float | None = None,
    block_size: int | None = None,
    scores: LayerScores = PLAIN_SCORES,
) -> Tensor:
    """Attention of q (B, H, Lq, D), k, v under `method` through the tiling engine (the `tiled` backend): equal to
    `reference_extended_attention` without its Lq x Lk tensors."""
    options = {"q_pos": q_pos, "k_pos": k_pos, "scale": scale, "temperature": temperature, "block_size": block_size}
    return _extended("tiled", q, k, v, scheme, method, scores, **options)


def flex_extended_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scheme: PositionScheme | None,
    method: ExtensionMethod,
    q_pos: Tensor | None = None,
    k_pos: Tensor | None = None,
    scale: float | None = None,
    temperature: Tensor | float | None = None,
    scores: LayerScores = PLAIN_SCORES,
) -> Tensor:
    """`extended_attention` with each pass one FlexAttention call (the `flex` backend): forward only on CPU, on
    CUDA forward and backward; refuses what flex cannot rotate in one call (xPos past its span)."""
    args = (q, k, v, scheme, method, scores)
    return _extended("flex", *args, q_pos=q_pos, k_pos=k_pos, scale=scale, temperature=temperature)
