"""Corpus -> split -> tokenizer: the data every stage of a run shares, rebuilt identically from its config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lextra.data.corpora import Document, load_corpus, split_corpus
from lextra.data.tokenizers import Tokenizer, build_tokenizer, tokenizer_from_config


@dataclass
class PreparedData:
    """A corpus split by document hash, and the tokenizer trained (if at all) on its train split only."""

    corpus: str
    splits: dict[str, list[Document]]
    tokenizer: Tokenizer
    #: the train split's windows already encoded (a prepared folder's `PreparedShards`, whose `batch` draws what
    #: `TrainStream.from_documents(splits["train"], tokenizer).batch` draws), so tasks need not encode it again
    stream: Any = None


def prepare_data(
    corpus: str,
    tokenizer: str = "bytes",
    limit_chars: int | None = None,
    tokenizer_config: dict[str, Any] | None = None,
) -> PreparedData:
    """Load and split `corpus`; build the tokenizer from its spec, or rebuild a saved one from its config."""
    docs = load_corpus(corpus, limit_chars=limit_chars)
    splits = split_corpus(docs)
    if tokenizer_config is not None:
        tok = tokenizer_from_config(tokenizer_config)
    else:
        tok = build_tokenizer(tokenizer, splits["train"], corpus_name=corpus)
    return PreparedData(corpus, splits, tok)


def model_data_spec(
    meta: dict[str, Any], corpus: str | None = None, limit_chars: int | None = None
) -> tuple[str, int | None, dict[str, Any]]:
    """(corpus, character limit, tokenizer config) that `prepare_for_model` reads: a key for caching its result."""
    train = meta.get("train", {})
    return (
        corpus or train.get("corpus", "python-code"),
        limit_chars if limit_chars is not None else train.get("limit_chars"),
        meta.get("tokenizer", {"kind": "bytes"}),
    )


def prepare_for_model(meta: dict[str, Any], corpus: str | None = None, limit_chars: int | None = None) -> PreparedData:
    """The data a saved model was trained on (its corpus, character limit and tokenizer, from its metadata), or
    another `corpus` read with the model's own tokenizer."""
    corpus, limit, tokenizer = model_data_spec(meta, corpus, limit_chars)
    return prepare_data(corpus, limit_chars=limit, tokenizer_config=tokenizer)
