"""lextra's evaluations, analyses and inference-time methods on Hugging Face decoders and T5."""

from lextra.hf.attention import AttentionState
from lextra.hf.load import adapt, load_hf
from lextra.hf.models import HFCausalLM, HFSeq2Seq

__all__ = ["AttentionState", "HFCausalLM", "HFSeq2Seq", "adapt", "load_hf"]
