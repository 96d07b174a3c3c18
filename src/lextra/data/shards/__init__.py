"""Prepared token shards (docs/running.md, Prepared data): a corpus tokenized once by `prepare_shards` into
per-split `{split}-{shard:05d}.tokens` files (uint8/16/32 ids, documents joined by the tokenizer's separator as
`TrainStream` joins them, so a split's files in order are its stream) with `.offsets` ([start, end) int64 rows per
document), a `shard-{shard:05d}.json` record per finished shard, `tokenizer.json`, and `manifest.json` written
last. Every file is written as `NAME.partial` and renamed, so an interrupted prepare resumes after its last
finished shard; memory is bounded by one shard's text. `PreparedShards.open` maps the files and draws the same
windows as the raw corpus."""

from lextra.data.shards.cache import (
    DATA_CACHE_ENV,
    cache_key,
    cached_shards,
    data_cache_dir,
    shards_for_model,
    text_data_for_model,
)
from lextra.data.shards.layout import DEFAULT_SAMPLE_CHARS, DEFAULT_SHARD_CHARS, DTYPES, token_dtype, unfinished_command
from lextra.data.shards.reader import DecodedDocuments, PreparedShards, WeightedMixture, data_batches, training_batches
from lextra.data.shards.writer import prepare_shards

__all__ = [
    "DATA_CACHE_ENV",
    "DEFAULT_SAMPLE_CHARS",
    "DEFAULT_SHARD_CHARS",
    "DTYPES",
    "DecodedDocuments",
    "PreparedShards",
    "WeightedMixture",
    "cache_key",
    "cached_shards",
    "data_batches",
    "data_cache_dir",
    "prepare_shards",
    "shards_for_model",
    "text_data_for_model",
    "token_dtype",
    "training_batches",
    "unfinished_command",
]
