"""What an evaluation puts before each document and prompt: a Hugging Face model's BOS (as its tokenizer
encodes texts by default), nothing for lextra's models (trained on streams without one)."""

from __future__ import annotations

from typing import Any

from lextra.data import Tokenizer


def evaluation_prefix(model: Any, tokenizer: Tokenizer) -> list[int]:
    """`tokenizer.bos_prefix` for a Hugging Face adapter (one with `bos_from_tokenizer` set), else `[]`."""
    if not getattr(model, "bos_from_tokenizer", False):
        return []
    return list(tokenizer.bos_prefix)
