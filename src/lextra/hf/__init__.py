"""lextra's evaluations, analyses and inference-time methods on Hugging Face models (the decoder families of
`lextra.hf.families` and T5)."""

from lextra.hf.attention import ATTENTION_NAME, AttentionState, lextra_attention, register
from lextra.hf.load import adapt, load_hf, smollm2_path
from lextra.hf.models import HFCausalLM, HFSeq2Seq

__all__ = [
    "ATTENTION_NAME",
    "AttentionState",
    "HFCausalLM",
    "HFSeq2Seq",
    "adapt",
    "lextra_attention",
    "load_hf",
    "register",
    "smollm2_path",
]
