"""The prepared folder's format: its file names, the token dtype rule, and the command that (re)runs a prepare."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

import numpy as np

from lextra.data.tokenizers import DEFAULT_BPE_VOCAB
from lextra.errors import DataError

FORMAT_VERSION = 1
"""Version of the folder layout; `PreparedShards.open` refuses another."""

MANIFEST = "manifest.json"
REQUEST = "prepare.json"
TOKENIZER = "tokenizer.json"
SCAN = "scan.json"
TOKENIZER_DIR = "tokenizer"
"""The folder of a Hugging Face tokenizer's files, copied in by `prepare` (the folder then uses its own copy)."""
SOURCE_STATE = "source.json"


DEFAULT_SHARD_CHARS = 16_000_000
"""Characters of source text per shard: the memory bound of preparing and the unit of resuming."""

DEFAULT_SAMPLE_CHARS = 100_000_000
"""Characters of the train split a `bpe:N` tokenizer is trained on."""

DTYPES: dict[str, type[np.unsignedinteger]] = {"uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32}
"""Token file dtypes by name."""


def token_dtype(vocab_size: int, requested: str = "auto") -> str:
    """The token file dtype for a vocabulary: the smallest of uint8/uint16/uint32 that holds every id, or the
    `requested` one, refused when the vocabulary does not fit in it."""
    if requested == "auto":
        for name, dtype in DTYPES.items():
            if vocab_size - 1 <= np.iinfo(dtype).max:
                return name
        raise DataError(f"a vocabulary of {vocab_size} ids does not fit in uint32; use a smaller tokenizer")
    if requested not in DTYPES:
        raise DataError(f"unknown token dtype {requested!r}; use auto, {', '.join(DTYPES)}")
    if vocab_size - 1 > np.iinfo(DTYPES[requested]).max:
        raise DataError(
            f"a vocabulary of {vocab_size} ids does not fit in {requested} (ids up to "
            f"{np.iinfo(DTYPES[requested]).max}); use --dtype auto or a larger dtype"
        )
    return requested


def normal_spec(spec: str) -> str:
    """A tokenizer spec with its defaults spelled out (`bpe` is `bpe:8192`), for comparing two."""
    spec = spec.strip()
    return f"bpe:{DEFAULT_BPE_VOCAB}" if spec == "bpe" else spec


OPTION_DEFAULTS: dict[str, Any] = {
    "limit_chars": None,
    "text_field": "text",
    "dtype": "auto",
    "shard_chars": DEFAULT_SHARD_CHARS,
    "sample_chars": DEFAULT_SAMPLE_CHARS,
    "strict": False,
}
"""The request's options and their defaults: `prepare_command` spells out every other value."""


def prepare_command(request: dict[str, Any], out_dir: Path) -> str:
    """The command line that (re)runs the prepare of `request`, every non-default option spelled out."""
    words = ["lextra data prepare", shlex.quote(str(request.get("source", "SOURCE")))]
    words += ["--tokenizer", shlex.quote(str(request.get("tokenizer", "SPEC"))), "--out", shlex.quote(str(out_dir))]
    for key, default in OPTION_DEFAULTS.items():
        value = request.get(key, default)
        if value != default:
            flag = "--" + key.replace("_", "-")
            words += [flag] if value is True else [flag, shlex.quote(str(value))]
    return " ".join(words)


def unfinished_command(out_dir: str | os.PathLike[str]) -> str | None:
    """The command that continues the unfinished prepare in `out_dir` (None when there is none)."""
    out = Path(out_dir).expanduser()
    try:
        request = json.loads((out / REQUEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(request, dict) or (out / MANIFEST).is_file():
        return None
    return prepare_command(request, out)
