"""Attention with position schemes: masks, backends (reference, sdpa, chunked/tiled, flex) and the functional
`attention` call."""

from lextra.attention.backends import (
    BACKENDS,
    attention,
    attention_logits,
    chunked_attention,
    reference_attention,
)
from lextra.attention.flex import flex_attention_forward, flex_block_mask
from lextra.attention.masks import MASKS, Mask, build_mask

__all__ = [
    "BACKENDS",
    "MASKS",
    "Mask",
    "attention",
    "attention_logits",
    "build_mask",
    "chunked_attention",
    "flex_attention_forward",
    "flex_block_mask",
    "reference_attention",
]
