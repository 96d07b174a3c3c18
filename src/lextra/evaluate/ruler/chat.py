"""The chat wrapping of a RULER prompt (`lextra ruler --chat`), read from a Hugging Face tokenizer's chat template:
the model's own template rendered around a marker, keeping what it puts before and after the user's message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lextra.data import HFTokenizer, Tokenizer
from lextra.errors import ConfigError
from lextra.tasks.ruler.layout import ChatFormat

#: stands for the user's message while the template is rendered
MARKER = "\u2063RULER-PROMPT\u2063"


def load_hf_tokenizer(path: str | Path) -> Any:
    """The transformers tokenizer of a local folder or .gguf file (offline)."""
    from transformers import AutoTokenizer

    from lextra.hf.load import pretrained_source

    folder, kwargs = pretrained_source(Path(path))
    return AutoTokenizer.from_pretrained(folder, **kwargs)


def template_parts(hf_tokenizer: Any) -> ChatFormat:
    """What the tokenizer's chat template puts before and after one user message, its assistant turn opened."""
    if not getattr(hf_tokenizer, "chat_template", None):
        raise ConfigError("--chat needs a tokenizer with a chat template and this model's has none; drop --chat")
    messages = [{"role": "user", "content": MARKER}]
    text = hf_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prefix, found, suffix = str(text).partition(MARKER)
    if not found:
        raise ConfigError("the model's chat template does not keep the user's message verbatim; drop --chat")
    return ChatFormat(prefix, suffix)


def chat_format(tokenizer: Tokenizer) -> ChatFormat:
    """The chat wrapping of `tokenizer`: only a Hugging Face tokenizer (the model's own) carries a template."""
    if not isinstance(tokenizer, HFTokenizer):
        raise ConfigError(
            f"--chat needs the model's Hugging Face tokenizer with a chat template; {tokenizer.name} has none "
            "(drop --chat, or drop --tokenizer to use the model's own)"
        )
    return template_parts(load_hf_tokenizer(tokenizer.path))
