"""Attention under a training-free extension method: the per-layer handle.

The passes of a method (`lextra.extend.base`) are a feature of the attention context (`AttentionContext.passes`):
the core backends run them, `reference` from the method's formula, `tiled` through the tiling engine (query blocks
x passes x key tiles merged by log-sum-exp) and `flex` as one FlexAttention call per pass, and the one dispatch
chooses among them (`lextra.attention.backends.passes_path`). A layer's softcap caps each pass's scores and its
sinks join the merged denominator once.

`ExtendedAttention` is what a layer attends through under a method (`LayerInference.extension`, written by
`lextra.extend.InferenceSetup`), so that full forwards and cached decoding use the same passes. Decoding needs no
rule of its own: a new query at m runs the method's passes over the cached, un-rotated keys, which is each author's
decode rule (keys rotated at -d'(m, n) against an unrotated query) with the full forward's numbers. Methods with a
bounded view (sinks, LM-Infinite) let the cache evict keys no later query sees.

A call under a method is `attention(q, k, v, scheme=..., extension=ExtendedAttention(method), backend=...)`, with
the layer's `softcap` and `sinks` as for any call.
"""

from __future__ import annotations

from torch import Tensor

from lextra.attention.backends import AttentionExtension
from lextra.extend.base import ExtensionMethod


class ExtendedAttention(AttentionExtension):
    """A layer's attention under `method` (`LayerInference.extension`, `attention(..., extension=)`): carries the
    method's passes into the context, which the dispatch runs on the `reference`, `flex` (what 'auto' runs on CUDA
    where flex applies) or `tiled` backend. The mask must be causal (the method sets its own visibility)."""

    heads_alike = True

    def __init__(self, method: ExtensionMethod) -> None:
        self.method = method
        self.passes = method
        self.name = method.name

    def retains(self, k_pos: Tensor, next_query: int) -> Tensor:
        """Which cached keys a query at `next_query` or later can still see (the cache evicts the others)."""
        return self.method.retains(k_pos, next_query)

    def __repr__(self) -> str:
        return f"ExtendedAttention({self.method!r})"
