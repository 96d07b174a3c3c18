"""Data layer: corpora (built-in, local files, saved Hugging Face datasets), tokenizers, token windows, and the
prepared data (corpus split + tokenizer) every stage of a run shares."""

from lextra.data.corpora import (
    BUILTIN_CORPORA,
    DEFAULT_FRACTIONS,
    SPLITS,
    Document,
    load_corpus,
    split_corpus,
    split_of,
)
from lextra.data.prepare import PreparedData, model_data_spec, prepare_data, prepare_for_model
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
    "PreparedData",
    "Tokenizer",
    "TrainStream",
    "build_tokenizer",
    "encode_documents",
    "eval_sequences",
    "load_corpus",
    "model_data_spec",
    "prepare_data",
    "prepare_for_model",
    "split_corpus",
    "split_of",
    "tokenizer_from_config",
]
