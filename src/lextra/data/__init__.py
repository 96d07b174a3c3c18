"""Data layer: corpora (built-in, local files, saved Hugging Face datasets), tokenizers, token windows."""

from lextra.data.corpora import (
    BUILTIN_CORPORA,
    DEFAULT_FRACTIONS,
    SPLITS,
    Document,
    load_corpus,
    split_corpus,
    split_of,
)
from lextra.data.tokenizers import (
    BPETokenizer,
    ByteTokenizer,
    HFTokenizer,
    Tokenizer,
    build_tokenizer,
    tokenizer_from_config,
)
from lextra.data.windows import TrainStream, encode_documents, eval_sequences

__all__ = [
    "BUILTIN_CORPORA",
    "DEFAULT_FRACTIONS",
    "SPLITS",
    "BPETokenizer",
    "ByteTokenizer",
    "Document",
    "HFTokenizer",
    "Tokenizer",
    "TrainStream",
    "build_tokenizer",
    "encode_documents",
    "eval_sequences",
    "load_corpus",
    "split_corpus",
    "split_of",
    "tokenizer_from_config",
]
