"""Data layer: corpora (built-in, local files, saved Hugging Face datasets), tokenizers, token windows, prepared
token shards (tokenized once, memory-mapped), and the prepared data (corpus split + tokenizer) every stage of a
run shares."""

from lextra.data.corpora import (
    BUILTIN_CORPORA,
    DEFAULT_FRACTIONS,
    SPLITS,
    Document,
    iter_documents,
    load_corpus,
    split_corpus,
    split_of,
    split_overrides,
)
from lextra.data.prepare import PreparedData, model_data_spec, prepare_data, prepare_for_model
from lextra.data.shards import PreparedShards, prepare_shards
from lextra.data.tokenizers import (
    BPETokenizer,
    ByteTokenizer,
    HFTokenizer,
    Tokenizer,
    build_tokenizer,
    tokenizer_from_config,
)
from lextra.data.windows import TrainStream, encode_documents, eval_sequences, window_starts

__all__ = [
    "BUILTIN_CORPORA",
    "DEFAULT_FRACTIONS",
    "SPLITS",
    "BPETokenizer",
    "ByteTokenizer",
    "Document",
    "HFTokenizer",
    "PreparedData",
    "PreparedShards",
    "Tokenizer",
    "TrainStream",
    "build_tokenizer",
    "encode_documents",
    "eval_sequences",
    "iter_documents",
    "load_corpus",
    "model_data_spec",
    "prepare_data",
    "prepare_for_model",
    "prepare_shards",
    "split_corpus",
    "split_of",
    "split_overrides",
    "tokenizer_from_config",
    "window_starts",
]
