"""The functional attention call and its backends: `reference`, `sdpa`, `chunked`, `tiled`, `flex`, and `auto`.

    out = softmax((rotate(q) . rotate(k) * scale + bias) / tau, masked) v

One backend per module, each an `AttentionBackend` (`lextra.attention.context`): `reference` (dense, ground
truth), `sdpa` (one fused call where exact), `chunked` (query blocks, each with the keys its mask declares),
`tiled` (the tiling engine over extension passes or mask bands), `flex` (`lextra.attention.flex`). The dispatch
(`dispatch.py`) keeps the registry and `auto`'s order per device type. Backends ask a mask only what it declares
and a scheme only its interface."""

from lextra.attention.backends.chunked import ChunkedBackend, chunked_attention
from lextra.attention.backends.common import (
    TILE,
    attention_logits,
    attention_with_lse,
    cap_scores,
    merge_tiles,
    sink_softmax,
)
from lextra.attention.backends.dispatch import (
    AUTO_ORDER,
    REGISTERED,
    attention,
    attention_path,
    auto_backend,
    backend_names,
    choose_backend,
    expand_kv,
    get_backend,
    passes_path,
    register_backend,
    resolve_backend,
    run_attention,
    unregister_backend,
)
from lextra.attention.backends.flex import FlexBackend
from lextra.attention.backends.reference import ReferenceBackend, context_logits, reference_attention
from lextra.attention.backends.sdpa import SdpaBackend
from lextra.attention.backends.tiled import TiledBackend
from lextra.attention.context import (
    AttentionBackend,
    AttentionContext,
    AttentionExtension,
    AttentionOptions,
    PassExtension,
    default_positions,
)
from lextra.attention.layout import PositionLayout

register_backend(ReferenceBackend())
register_backend(SdpaBackend(), auto={"cpu": None, "cuda": None})
register_backend(ChunkedBackend(), auto={"cpu": None, "cuda": None})
register_backend(FlexBackend(), auto={"cuda": 1})  # on CUDA between sdpa and chunked
register_backend(TiledBackend())  # `auto` runs it for mask bands and passes (`choose_backend`, `passes_path`)

#: the built-in backends' names (`backend_names()` adds any registered later)
BACKENDS = ("auto", "reference", "sdpa", "chunked", "flex")

__all__ = [
    "AUTO_ORDER",
    "BACKENDS",
    "REGISTERED",
    "TILE",
    "AttentionBackend",
    "AttentionContext",
    "AttentionExtension",
    "AttentionOptions",
    "PassExtension",
    "PositionLayout",
    "attention",
    "attention_logits",
    "attention_path",
    "attention_with_lse",
    "auto_backend",
    "backend_names",
    "cap_scores",
    "choose_backend",
    "chunked_attention",
    "context_logits",
    "default_positions",
    "expand_kv",
    "get_backend",
    "merge_tiles",
    "passes_path",
    "reference_attention",
    "register_backend",
    "resolve_backend",
    "run_attention",
    "sink_softmax",
    "unregister_backend",
]
