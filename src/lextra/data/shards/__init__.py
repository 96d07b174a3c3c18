"""Prepared token shards: a corpus tokenized once into flat token files that every run maps with `np.memmap`
(docs/running.md, Prepared data).

`prepare_shards(source, tokenizer, out_dir)` reads the source three times at most: a scan that counts the
documents and finds the few that `split_corpus` would move between splits (`split_overrides`), a bounded sample of
the train split for a `bpe:N` tokenizer (`sample_chars`), and the encoding, cut into shards of about `shard_chars`
characters. A folder holds:

- `prepare.json`: what is being prepared (source, tokenizer spec, limit, dtype, shard size), written first;
- `scan.json`: the first read's result (documents, characters, moved documents), so a resumed prepare skips it;
- `tokenizer.json`: the tokenizer's `to_config()`, written before the first shard;
- `{split}-{shard:05d}.tokens`: the split's token ids of that shard (`uint8` for vocabularies of at most 256,
  like the in-memory stream's compact rule, else `uint16` up to 65536, else `uint32`), documents joined by the
  tokenizer's separator exactly as `TrainStream` joins them: a separator precedes every document but the
  split's first, so the concatenation of a split's token files, in shard order, IS the training stream;
- `{split}-{shard:05d}.offsets`: `int64` (documents, 2) rows of each document's [start, end) in that token file
  (separators excluded);
- `shard-{shard:05d}.json`: the shard's record (documents consumed, per split counts, sizes and sha256 of its
  files), written last, so a shard is done exactly when its record exists;
- `manifest.json`: written when every shard is done (format version, the request, source, tokenizer, dtype, per
  split its documents and stream tokens (separators included), every file with its size and sha256). Its sha256
  identifies the prepared data (`PreparedShards.sha256`).

Every file is written as `NAME.partial` and renamed when complete, so a half-written file is never read; an
interrupted prepare keeps its finished shards and redoes the rest. Memory is bounded by one shard's text
(plus the BPE sample), never by the corpus.

`PreparedShards.open(dir)` maps the files copy-on-write after checking every file's size (and, once per unchanged
folder, its hash: `lextra.data.integrity`); `verify()` checks every sha256. Its `batch` draws the same windows as
`TrainStream` from the same stream (`window_starts`), so a run on a prepared folder equals a run on the raw corpus.
"""

from lextra.data.shards.cache import (
    DATA_CACHE_ENV,
    cache_key,
    cached_shards,
    data_cache_dir,
    shards_for_model,
    text_data_for_model,
)
from lextra.data.shards.layout import DEFAULT_SAMPLE_CHARS, DEFAULT_SHARD_CHARS, DTYPES, token_dtype, unfinished_command
from lextra.data.shards.mixture import WeightedMixture, data_batches, training_batches
from lextra.data.shards.reader import DecodedDocuments, PreparedShards
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
