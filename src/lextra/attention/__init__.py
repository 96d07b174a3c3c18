"""Attention with position schemes: masks, backends (reference, sdpa, chunked/tiled, flex) and the functional
`attention` call."""

from lextra.attention.backends import (
    BACKENDS,
    AttentionBackend,
    AttentionContext,
    AttentionExtension,
    AttentionOptions,
    attention,
    attention_logits,
    cap_scores,
    choose_backend,
    chunked_attention,
    context_logits,
    default_positions,
    expand_kv,
    reference_attention,
    register_backend,
    run_attention,
    sink_softmax,
)
from lextra.attention.flex import flex_attention_forward, flex_block_mask
from lextra.attention.layout import PositionLayout
from lextra.attention.masks import MASKS, Mask, build_mask
from lextra.attention.s2 import S2Attention, s2_visible, shifted_sparse_attention

__all__ = [
    "BACKENDS",
    "MASKS",
    "AttentionBackend",
    "AttentionContext",
    "AttentionExtension",
    "AttentionOptions",
    "Mask",
    "PositionLayout",
    "S2Attention",
    "attention",
    "attention_logits",
    "build_mask",
    "cap_scores",
    "choose_backend",
    "chunked_attention",
    "context_logits",
    "default_positions",
    "expand_kv",
    "flex_attention_forward",
    "flex_block_mask",
    "reference_attention",
    "register_backend",
    "run_attention",
    "s2_visible",
    "shifted_sparse_attention",
    "sink_softmax",
]
