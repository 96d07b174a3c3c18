"""Data layer: corpora (built-in, local files, saved Hugging Face datasets), tokenizers, token windows, prepared
token shards (tokenized once, memory-mapped), and the prepared data (corpus split + tokenizer) every stage of a
run shares."""

from lextra.data.corpora import (
    BUILTIN_CORPORA,
    Document,
    iter_documents,
    load_corpus,
    split_corpus,
    split_of,
    split_overrides,
)
from lextra.data.orders import ORDERS, EpochOrder, epoch_window_starts, in_order
from lextra.data.prepare import PreparedData, prepare_data, prepare_for_model
from lextra.data.shards import PreparedShards, WeightedMixture, prepare_shards, training_batches
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
    "ORDERS",
    "BPETokenizer",
    "ByteTokenizer",
    "Document",
    "EpochOrder",
    "HFTokenizer",
    "PreparedData",
    "PreparedShards",
    "Tokenizer",
    "TrainStream",
    "WeightedMixture",
    "build_tokenizer",
    "encode_documents",
    "epoch_window_starts",
    "eval_sequences",
    "in_order",
    "iter_documents",
    "load_corpus",
    "prepare_data",
    "prepare_for_model",
    "prepare_shards",
    "split_corpus",
    "split_of",
    "split_overrides",
    "tokenizer_from_config",
    "training_batches",
]
