"""Encoding a shard's documents in batches, here or in forked worker processes (the same bytes either way)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor

import numpy as np

from lextra.data.corpora import Document
from lextra.data.tokenizers import Tokenizer
from lextra.data.windows import encode_arrays

ENCODE_BATCH = 256
"""Documents encoded (and appended to the shard's files) together."""


_WORKER_TOKENIZER: Tokenizer | None = None
"""The tokenizer of an encoding worker process (set by `_start_worker`)."""


def _start_worker(tokenizer: Tokenizer) -> None:
    global _WORKER_TOKENIZER
    _WORKER_TOKENIZER = tokenizer


def _encode_in_worker(docs: Sequence[Document]) -> list[np.ndarray]:
    assert _WORKER_TOKENIZER is not None
    return encode_arrays(_WORKER_TOKENIZER, docs)


def encoded_batches(
    tokenizer: Tokenizer, docs: Sequence[tuple[int, Document]], pool: Executor | None
) -> Iterator[tuple[list[tuple[int, Document]], list[np.ndarray]]]:
    """One shard's (part, document) pairs in batches of `ENCODE_BATCH`, each with its documents' token ids:
    encoded here, or by the worker processes of `pool` (every batch of the shard in flight, results in order)."""
    batches = [list(docs[start : start + ENCODE_BATCH]) for start in range(0, len(docs), ENCODE_BATCH)]
    if pool is None:
        for batch in batches:
            yield batch, encode_arrays(tokenizer, [doc for _, doc in batch])
        return
    yield from zip(batches, pool.map(_encode_in_worker, [[doc for _, doc in b] for b in batches]), strict=True)


@contextlib.contextmanager
def encoding_pool(tokenizer: Tokenizer, workers: int) -> Iterator[Executor | None]:
    """`workers` encoding processes (None for one, or for a tokenizer that already encodes in threads)."""
    if workers <= 1 or tokenizer.threaded:
        yield None
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker, initargs=(tokenizer,))
    try:
        yield pool
    finally:  # an interrupted prepare does not wait for the rest of the shard's batches
        pool.shutdown(wait=True, cancel_futures=True)
