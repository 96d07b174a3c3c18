"""Training-free extension of pretrained rotary models: Self-Extend, ReRoPE / Leaky ReRoPE, Dual Chunk Attention,
LM-Infinite, attention sinks and STRING, each a distance remap + a visibility rule + up to three passes merged
exactly by log-sum-exp (`base`), with a dense reference, a fast tiled path and one FlexAttention call per pass
(`attention`), on layers with a score softcap or learned sinks too (`capsinks`)."""

from lextra.extend import methods  # noqa: F401  (registers the methods)
from lextra.extend.attention import (
    BANDED_MASKS,
    BandedMasks,
    ExtendedAttention,
    apply_extension,
    extended_attention,
    flex_extended_attention,
    masked_attention,
    masked_attention_applies,
    reference_extended_attention,
)
from lextra.extend.base import EXTENSIONS, ExtensionMethod, Pass, build_extension, check_scheme
from lextra.extend.capsinks import PLAIN_SCORES, LayerScores
from lextra.extend.setup import KEEP, InferenceSetup

__all__ = [
    "BANDED_MASKS",
    "EXTENSIONS",
    "KEEP",
    "PLAIN_SCORES",
    "BandedMasks",
    "ExtendedAttention",
    "ExtensionMethod",
    "InferenceSetup",
    "LayerScores",
    "Pass",
    "apply_extension",
    "build_extension",
    "check_scheme",
    "extended_attention",
    "flex_extended_attention",
    "masked_attention",
    "masked_attention_applies",
    "reference_extended_attention",
]
