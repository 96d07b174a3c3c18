"""Training-free extension of pretrained rotary models (Self-Extend, ReRoPE, Leaky ReRoPE, Dual Chunk Attention,
LM-Infinite, attention sinks, STRING), each a distance remap, a visibility rule and passes the backends run."""

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
