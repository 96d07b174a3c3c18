"""Training-free extension of pretrained rotary models: Self-Extend, ReRoPE / Leaky ReRoPE, Dual Chunk Attention,
LM-Infinite, attention sinks and STRING, each a distance remap + a visibility rule + up to three passes merged
exactly by log-sum-exp (`base`, `methods`), which the attention backends run (dense reference, tiling engine, one
FlexAttention call per pass) under a layer's `ExtendedAttention` (`attention`), with its softcap or sinks too."""

from lextra.extend import methods  # noqa: F401  (registers the methods)
from lextra.extend.attention import (
    PLAIN_SCORES,
    ExtendedAttention,
    LayerScores,
    extended_attention,
    flex_extended_attention,
    reference_extended_attention,
)
from lextra.extend.base import EXTENSIONS, ExtensionMethod, Pass, build_extension, check_scheme
from lextra.extend.setup import KEEP, InferenceSetup, inference_target

__all__ = [
    "EXTENSIONS",
    "KEEP",
    "PLAIN_SCORES",
    "ExtendedAttention",
    "ExtensionMethod",
    "InferenceSetup",
    "LayerScores",
    "Pass",
    "build_extension",
    "check_scheme",
    "extended_attention",
    "flex_extended_attention",
    "inference_target",
    "reference_extended_attention",
]
