"""Attention with position schemes: masks, backends and the functional `attention` call."""

from lextra.attention.backends import BACKENDS, attention, chunked_attention, reference_attention
from lextra.attention.masks import MASKS, Mask, build_mask

__all__ = ["BACKENDS", "MASKS", "Mask", "attention", "build_mask", "chunked_attention", "reference_attention"]
