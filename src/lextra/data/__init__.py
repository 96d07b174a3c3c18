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
    mixture_parts,
    mixture_weights,
    source_fingerprint,
    split_corpus,
    split_of,
    split_overrides,
)
from lextra.data.orders import ORDERS, EpochOrder, epoch_window_starts, in_order
from lextra.data.prepare import PreparedData, model_data_spec, prepare_data, prepare_for_model
from lextra.data.shards import (
    PreparedShards,
    WeightedMixture,
    cached_shards,
    data_cache_dir,
    prepare_shards,
    shards_for_model,
    training_batches,
)
from lextra.data.tokenizers import (
    BPETokenizer,
    ByteTokenizer,
    HFTokenizer,
    Tokenizer,
    build_tokenizer,
    tokenizer_from_config,
)
from lextra.data.windows import (
    TrainStream,
    encode_documents,
    eval_pieces,
    eval_sequences,
    mixture_window_starts,
    window_starts,
)

__all__ = [
    "BUILTIN_CORPORA",
    "DEFAULT_FRACTIONS",
    "ORDERS",
    "SPLITS",
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
    "cached_shards",
    "data_cache_dir",
    "encode_documents",
    "epoch_window_starts",
    "eval_pieces",
    "eval_sequences",
    "in_order",
    "iter_documents",
    "load_corpus",
    "mixture_parts",
    "mixture_weights",
    "mixture_window_starts",
    "model_data_spec",
    "prepare_data",
    "prepare_for_model",
    "prepare_shards",
    "shards_for_model",
    "source_fingerprint",
    "split_corpus",
    "split_of",
    "split_overrides",
    "tokenizer_from_config",
    "training_batches",
    "window_starts",
]
