"""What an evaluation puts before each document and prompt: a Hugging Face model's BOS, nothing for lextra's models.

A Hugging Face model was trained on texts its tokenizer encoded with its default special tokens (a Llama-family
tokenizer starts every text with BOS), and its own evaluation tools (RULER's HF client, Hugging Face's perplexity
guide) feed it that way; a lextra model was trained on streams without one, so its inputs stay as they are.
"""

from __future__ import annotations

from typing import Any

from lextra.data import Tokenizer


def evaluation_prefix(model: Any, tokenizer: Tokenizer) -> list[int]:
    """`tokenizer.bos_prefix` for a Hugging Face adapter (one with `bos_from_tokenizer` set), else `[]`."""
    if not getattr(model, "bos_from_tokenizer", False):
        return []
    return list(tokenizer.bos_prefix)
