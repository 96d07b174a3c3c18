"""Attention with position schemes: masks, backends and the functional `attention` call."""

from lextra.attention.backends import (
    BACKENDS,
    attention,
    attention_logits,
    chunked_attention,
    reference_attention,
)
from lextra.attention.masks import MASKS, Mask, build_mask

__all__ = [
    "BACKENDS",
    "MASKS",
    "Mask",
    "attention",
    "attention_logits",
    "build_mask",
    "chunked_attention",
    "reference_attention",
]
