"""Corpus -> split -> tokenizer: the data every stage of a run shares, rebuilt identically from its config."""

from __future__ import annotations

import functools
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor

from lextra.data.corpora import Document, load_corpus, split_corpus
from lextra.data.tokenizers import Tokenizer, build_tokenizer, tokenizer_from_config
from lextra.data.windows import TrainStream, WindowSource, encode_documents


class PreparedFolder(WindowSource):
    """What `PreparedData` reads of a prepared folder (`lextra.data.shards.PreparedShards`): its training windows,
    its documents' stored tokens, and its path and manifest hash for results."""

    root: Path
    sha256: str

    @abstractmethod
    def documents(self, split: str, limit: int | None = None) -> list[Tensor]:
        """The split's documents (at most `limit`) as 1-D token tensors."""


@dataclass
class PreparedData:
    """A corpus split by document hash, and the tokenizer trained (if at all) on its train split only: what every
    training, evaluation and task reads, in memory or from a prepared folder (`PreparedShards.prepared_data`)."""

    corpus: str
    splits: Mapping[str, Sequence[Document]]
    tokenizer: Tokenizer
    #: the prepared folder the splits come from (its tokens are read, not encoded again), or None
    folder: PreparedFolder | None = None

    def documents(self, split: str) -> list[Tensor]:
        """The split's documents as 1-D token tensors: the folder's stored tokens, else the texts encoded."""
        if self.folder is not None:
            return self.folder.documents(split)
        return encode_documents(self.splits[split], self.tokenizer)

    @functools.cached_property
    def stream(self) -> TrainStream | PreparedFolder:
        """The train split as one token stream: the folder's, else the split encoded (once)."""
        if self.folder is not None:
            return self.folder
        return TrainStream.from_documents(self.splits["train"], self.tokenizer)

    def record(self) -> dict[str, Any]:
        """What results record of the data: the corpus, and the folder with its manifest hash where there is one."""
        if self.folder is None:
            return {"corpus": self.corpus}
        return {"corpus": self.corpus, "data": {"path": str(self.folder.root), "manifest_sha256": self.folder.sha256}}


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
