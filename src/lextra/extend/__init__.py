"""Training-free extension of pretrained rotary models: Self-Extend, ReRoPE / Leaky ReRoPE, Dual Chunk Attention,
LM-Infinite, attention sinks and STRING, each a distance remap + a visibility rule + up to three passes merged
exactly by log-sum-exp (`base`, `methods`), which the attention backends run (dense reference, tiling engine, one
FlexAttention call per pass): a method is itself the extension a layer attends through (`attention(...,
extension=method)`), with its softcap or sinks too."""

from lextra.attention.masks import Pass
from lextra.extend import methods  # noqa: F401  (registers the methods)
from lextra.extend.base import EXTENSIONS, ExtensionMethod, build_extension, check_scheme
from lextra.extend.setup import KEEP, InferenceSetup, inference_target

__all__ = [
    "EXTENSIONS",
    "KEEP",
    "ExtensionMethod",
    "InferenceSetup",
    "Pass",
    "build_extension",
    "check_scheme",
    "inference_target",
]
