"""Tokenizers: raw bytes, a byte-level BPE trained locally and cached, or a Hugging Face tokenizer on disk; each
rebuilt from its `to_config()` by `tokenizer_from_config`, so a saved run decodes with its own tokenizer."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lextra.data.corpora import Document
from lextra.errors import DataError
from lextra.io import atomic_write

DEFAULT_BPE_VOCAB = 8192
"""Vocabulary size of `bpe` without an explicit size."""

BPE_EOS = "<|endoftext|>"
"""The BPE tokenizer's one special token (id 0), used to separate documents in the training stream."""

_BPE_FORMAT = 1
"""Bumped when the BPE recipe changes, so stale cache entries are not reused."""

_TOKENIZER_SPECS = "bytes, bpe, bpe:VOCAB_SIZE or hf:/local/path"


class Tokenizer(ABC):
    """Text <-> token ids; `separator_id` (or None) joins documents in a training stream."""

    name: str
    vocab_size: int
    separator_id: int | None = None
    #: whether `encode_many` already encodes in parallel threads (then worker processes add nothing)
    threaded: bool = False

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of `text` (no special tokens added)."""

    @abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids; invalid pieces become U+FFFD rather than raising."""

    @abstractmethod
    def to_config(self) -> dict[str, Any]:
        """A JSON-serialisable description from which `tokenizer_from_config` rebuilds this tokenizer."""

    def encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of several texts (subclasses batch this where the backend is faster in bulk)."""
        return [self.encode(text) for text in texts]

    @property
    def bos_prefix(self) -> list[int]:
        """The BOS id a text gets by default, as a list (empty: none). `encode` never adds it; evaluations of
        Hugging Face models put it before their documents and prompts, as the model's own tokenizer would."""
        return []

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, vocab_size={self.vocab_size})"


class ByteTokenizer(Tokenizer):
    """UTF-8 bytes as tokens (vocabulary 256): no training, no unknown tokens, documents joined by newlines."""

    name = "bytes"
    vocab_size = 256
    separator_id = ord("\n")

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(ids).decode("utf-8", errors="replace")

    def to_config(self) -> dict[str, Any]:
        return {"kind": "bytes"}


class BPETokenizer(Tokenizer):
    """A byte-level BPE (GPT-2 style pre-tokenisation) from the `tokenizers` library; trained by `train`."""

    threaded = True  # the Rust backend encodes a batch in parallel

    def __init__(self, backend: Any, *, source: str = "") -> None:
        """Wrap a trained `tokenizers.Tokenizer`; `source` notes where it came from (cache file), for logs."""
        self._backend = backend
        self.vocab_size = int(backend.get_vocab_size())
        self.name = f"bpe:{self.vocab_size}"
        self.separator_id = backend.token_to_id(BPE_EOS)
        self.source = source

    @classmethod
    def train(
        cls,
        docs: Sequence[Document],
        vocab_size: int = DEFAULT_BPE_VOCAB,
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        corpus_name: str = "",
    ) -> BPETokenizer:
        """Train on `docs` (the TRAIN split only) or load the cached result of an identical earlier training, keyed
        by `bpe_cache_name`; the cache file is written atomically (safe across ranks)."""
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 257:
            raise DataError(f"BPE vocab size must be an integer >= 257 (256 bytes + 1 special), got {vocab_size}")
        if not docs:
            raise DataError("the BPE tokenizer needs training documents; give a non-empty train split")
        from tokenizers import Tokenizer as Backend

        directory = resolve_cache_dir(cache_dir)
        path = directory / bpe_cache_name(docs, vocab_size, corpus_name)
        if path.is_file():
            try:
                return cls(Backend.from_file(str(path)), source=str(path))
            except Exception:  # a truncated or foreign file: retrain and overwrite it
                pass
        backend = _train_bpe_backend(docs, vocab_size)
        atomic_write(path, lambda tmp: tmp.write_text(backend.to_str(), encoding="utf-8"))
        return cls(backend, source=str(path))

    def encode(self, text: str) -> list[int]:
        return list(self._backend.encode(text, add_special_tokens=False).ids)

    def encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        """Encoded in parallel by the backend, in bounded chunks."""
        out: list[list[int]] = []
        chunk = 64
        for start in range(0, len(texts), chunk):
            encodings = self._backend.encode_batch_fast(list(texts[start : start + chunk]), add_special_tokens=False)
            out.extend(list(e.ids) for e in encodings)
        return out

    def decode(self, ids: Sequence[int]) -> str:
        """Text of BPE ids (special tokens are kept visible)."""
        return str(self._backend.decode(list(ids), skip_special_tokens=False))

    def to_config(self) -> dict[str, Any]:
        """The kind plus the full tokenizer JSON, so the rebuild needs no cache file."""
        return {"kind": "bpe", "vocab_size": self.vocab_size, "tokenizer_json": self._backend.to_str()}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> BPETokenizer:
        """Rebuild from `to_config()` output."""
        from tokenizers import Tokenizer as Backend

        try:
            return cls(Backend.from_str(config["tokenizer_json"]))
        except Exception as err:
            raise DataError(f"the saved BPE tokenizer is unreadable ({err}); retrain the run's tokenizer") from err


def _train_bpe_backend(docs: Sequence[Document], vocab_size: int) -> Any:
    """Train a byte-level BPE with the `tokenizers` library on the documents' texts."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders, models, pre_tokenizers, trainers

    backend = Backend(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BPE_EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator((doc.text for doc in docs), trainer=trainer, length=len(docs))
    return backend


def corpus_fingerprint(docs: Sequence[Document]) -> str:
    """SHA-256 over every document's id and text, in order: identical iff the training text is identical."""
    digest = hashlib.sha256()
    for doc in docs:
        for part in (doc.id, doc.text):
            data = part.encode("utf-8")
            digest.update(len(data).to_bytes(8, "little"))
            digest.update(data)
    return digest.hexdigest()


def bpe_cache_name(docs: Sequence[Document], vocab_size: int, corpus_name: str = "") -> str:
    """The cache file name for a BPE trained on `docs`: readable prefix plus a hash of everything that matters."""
    import tokenizers

    key = json.dumps(
        {
            "format": _BPE_FORMAT,
            "tokenizers": tokenizers.__version__,
            "vocab_size": vocab_size,
            "corpus": corpus_name,
            "fingerprint": corpus_fingerprint(docs),
        },
        sort_keys=True,
    )
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", corpus_name).strip("-.")[-40:] or "corpus"
    return f"bpe{vocab_size}-{slug}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def resolve_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The tokenizer cache: `cache_dir` if given, else `$LEXTRA_CACHE/tokenizers`, else ~/.cache/lextra/tokenizers."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    root = os.environ.get("LEXTRA_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "lextra"
    return base / "tokenizers"


class HFTokenizer(Tokenizer):
    """A Hugging Face tokenizer read from a local directory (or a local .gguf file); never downloads."""

    def __init__(self, path: str | os.PathLike[str], *, origin: str | None = None) -> None:
        """Load with `AutoTokenizer.from_pretrained(path, local_files_only=True)`; `origin` is the folder `path`
        is a copy of (a prepared folder's own copy), which the tokenizer then names as its path."""
        location = Path(path).expanduser()
        _check_hf_path(location)
        try:
            from transformers import AutoTokenizer
        except ImportError as err:
            raise DataError("hf: tokenizers need transformers; pip install transformers==5.24.0") from err
        gguf = location.is_file() and location.suffix == ".gguf"
        options = {"gguf_file": location.name} if gguf else {}
        try:
            tok = AutoTokenizer.from_pretrained(
                str(location.parent if gguf else location), local_files_only=True, **options
            )
        except (OSError, ValueError) as err:
            raise DataError(f"no Hugging Face tokenizer could be loaded from {location} ({err})") from err
        tok.model_max_length = sys.maxsize  # we cut windows ourselves: silence "sequence too long" warnings
        self._tok = tok
        self.path = origin or str(location.resolve())
        self.name = f"hf:{self.path}"
        self.threaded = bool(getattr(tok, "is_fast", False))
        self.vocab_size = len(tok)
        self.separator_id = tok.eos_token_id
        self._bos_prefix = default_bos_prefix(tok)

    @property
    def bos_prefix(self) -> list[int]:
        """`[bos_token_id]` when the tokenizer adds a BOS by default (Llama-family tokenizers), else empty."""
        return list(self._bos_prefix)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tok.decode(list(ids)))

    def to_config(self) -> dict[str, Any]:
        return {"kind": "hf", "path": self.path}


def _check_hf_path(location: Path) -> None:
    """Refuse a Hugging Face tokenizer path that does not exist (hub names are never downloaded)."""
    if not location.exists():
        raise DataError(
            f"Hugging Face tokenizer path {location} does not exist; give a local directory "
            "with tokenizer files (hub names are not downloaded)"
        )


def default_bos_prefix(tok: Any) -> list[int]:
    """`[bos]` when the Hugging Face tokenizer `tok` starts an encoded text with its BOS token by default (what
    `tok(text)` does, e.g. Llama's), else `[]` (GPT-2 style tokenizers, T5's, which adds only an EOS)."""
    bos = getattr(tok, "bos_token_id", None)
    if bos is None:
        return []
    probe = "a"
    plain = list(tok.encode(probe, add_special_tokens=False))
    default = list(tok.encode(probe))
    return [int(bos)] if default[:1] == [bos] and default[1 : 1 + len(plain)] == plain else []


def tokenizer_from_config(config: dict[str, Any]) -> Tokenizer:
    """Rebuild a tokenizer from the dict its `to_config()` returned (e.g. read from a run's config.json)."""
    kind = config.get("kind") if isinstance(config, dict) else None
    if kind == "bytes":
        return ByteTokenizer()
    if kind == "bpe":
        return BPETokenizer.from_config(config)
    if kind == "hf":
        return HFTokenizer(config["path"])
    raise DataError(f"unknown tokenizer config {config!r}; expected kind bytes, bpe or hf")


def build_tokenizer(
    spec: str,
    docs: Sequence[Document] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    corpus_name: str = "",
) -> Tokenizer:
    """Make the tokenizer named by `spec`: "bytes", "bpe" / "bpe:4096" (trained on `docs`, the TRAIN split only,
    its cache file named by `corpus_name`), or "hf:/local/path"."""
    spec = spec.strip()
    size = check_tokenizer_spec(spec)
    if spec == "bytes":
        return ByteTokenizer()
    if size is None:
        return HFTokenizer(spec.removeprefix("hf:"))
    if docs is None:
        raise DataError(f"tokenizer {spec!r} is trained on the corpus; pass the training documents")
    return BPETokenizer.train(docs, size, cache_dir=cache_dir, corpus_name=corpus_name)


def check_tokenizer_spec(spec: str) -> int | None:
    """Refuse a malformed tokenizer spec (unknown kind, a bad BPE size, an `hf:` path that does not exist)
    without building anything, as a prepare does before it writes; returns a BPE spec's vocabulary size."""
    spec = spec.strip()
    if spec == "bytes":
        return None
    if spec == "bpe" or spec.startswith("bpe:"):
        size_text = spec.partition(":")[2] or str(DEFAULT_BPE_VOCAB)
        if not size_text.isdigit():
            raise DataError(f"tokenizer {spec!r}: the vocab size must be an integer, e.g. bpe:4096")
        if int(size_text) < 257:
            raise DataError(f"BPE vocab size must be an integer >= 257 (256 bytes + 1 special), got {size_text}")
        return int(size_text)
    if not spec.startswith("hf:"):
        raise DataError(f"unknown tokenizer {spec!r}; use {_TOKENIZER_SPECS}")
    if not spec.removeprefix("hf:"):
        raise DataError("tokenizer 'hf:' needs a local path, e.g. hf:/models/llama")
    _check_hf_path(Path(spec.removeprefix("hf:")).expanduser())
    return None
