"""Preparing a folder (`prepare_shards`): check the request, scan the source once (its size, the documents
`split_corpus` moves, the files it skips), build the tokenizer, then encode and write the shards after the
finished ones (encoding in forked worker processes or here, the same bytes) and the manifest last."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from lextra.data.corpora import (
    DEFAULT_FRACTIONS,
    SPLITS,
    Document,
    iter_documents,
    iter_part_documents,
    skipped_files,
    split_of,
    split_overrides,
)
from lextra.data.integrity import STAMP, copied_files, describe_change, source_state, tokenizer_files
from lextra.data.shards.layout import (
    DEFAULT_SAMPLE_CHARS,
    DEFAULT_SHARD_CHARS,
    DTYPES,
    FORMAT_VERSION,
    MANIFEST,
    REQUEST,
    SCAN,
    SOURCE_STATE,
    TOKENIZER,
    TOKENIZER_DIR,
    prepare_command,
    token_dtype,
)
from lextra.data.shards.reader import PreparedShards
from lextra.data.shards.records import SplitWriter, build_manifest, finished_shards, shard_record
from lextra.data.tokenizers import HFTokenizer, Tokenizer, build_tokenizer, check_tokenizer_spec, tokenizer_from_config
from lextra.data.windows import encode_arrays
from lextra.errors import DataError, LextraError
from lextra.io import atomic_write_json
from lextra.locks import LOCK_NAME, folder_lock


def prepare_shards(
    source: str,
    tokenizer: str,
    out_dir: str | os.PathLike[str],
    *,
    limit_chars: int | None = None,
    text_field: str = "text",
    dtype: str = "auto",
    shard_chars: int = DEFAULT_SHARD_CHARS,
    sample_chars: int = DEFAULT_SAMPLE_CHARS,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
    strict: bool = False,
    workers: int = 1,
) -> Path:
    """Tokenize `source` (any corpus spec) with `tokenizer` (a spec) into a prepared folder; returns its manifest.

    Continues an unfinished prepare of the same request and source files in `out_dir`; a bad input leaves the
    folder as it was. `strict` refuses files a directory source would skip and fingerprints the source by
    whole-file hashes; `workers` encodes in that many processes; `cache_dir` is the BPE tokenizer cache.
    """
    out = Path(out_dir).expanduser()
    for label, value in (("shard_chars", shard_chars), ("sample_chars", sample_chars), ("workers", workers)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise DataError(f"{label} must be a positive integer, got {value!r}")
    if out.exists() and not out.is_dir():
        raise DataError(f"--out {out} is a file; give a new or empty folder to prepare into")
    # what decides the folder's content: an unfinished prepare continues only with the same request
    request = {
        "format": FORMAT_VERSION,
        "source": source,
        "tokenizer": tokenizer,
        "limit_chars": limit_chars,
        "text_field": text_field,
        "dtype": dtype,
        "shard_chars": shard_chars,
        "sample_chars": sample_chars,
    } | ({"strict": True} if strict else {})
    if (out / MANIFEST).is_file():
        if PreparedShards.open(out).manifest["request"] != request:
            raise DataError(f"{out} already holds other prepared data; use another --out or delete {out}")
        return out / MANIFEST
    # inputs are checked before anything is written
    check_tokenizer_spec(tokenizer)
    if dtype != "auto":
        token_dtype(2, dtype)
    next(iter_documents(source, text_field=text_field, limit_chars=limit_chars))
    with folder_lock(out, f"the prepared folder {out}"):
        before = {p.name for p in out.iterdir()}
        try:
            return _prepare_locked(out, request, cache_dir, progress, workers)
        except LextraError:  # a bad input: remove what this run wrote, so the corrected command runs
            _remove_all(out, keep=before | {LOCK_NAME})
            raise


def _remove_all(folder: Path, keep: set[str]) -> None:
    """Remove every file and folder of `folder` but those named in `keep`."""
    for path in folder.iterdir():
        if path.name not in keep:
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def _prepare_locked(
    out: Path, request: dict[str, Any], cache_dir: str | os.PathLike[str] | None, progress: bool, workers: int
) -> Path:
    """`prepare_shards` of `request` into `out`, whose lock this process holds."""
    source = request["source"]
    _load_request(out, request)
    _check_source_state(out, source, bool(request.get("strict", False)))
    records = finished_shards(out)
    scan = _scan_once(out, request, progress)
    tok = _tokenizer(out, request, scan, cache_dir)
    dtype_name = token_dtype(tok.vocab_size, request["dtype"])
    separator = tok.separator_id
    if separator is not None and separator > np.iinfo(DTYPES[dtype_name]).max:
        raise DataError(f"the separator id {separator} does not fit in {dtype_name}; use --dtype auto")
    _write_shards(out, request, scan, tok, DTYPES[dtype_name], records, progress, workers)
    if sum(r["source_documents"] for r in records) != scan.documents:
        raise DataError(
            f"the source {source!r} changed while {out} was prepared ({scan.documents} documents when it was "
            f"first read, {sum(r['source_documents'] for r in records)} now); delete {out} and prepare it again"
        )
    manifest = build_manifest(out, request, tok, dtype_name, records)
    if scan.skipped:
        manifest["skipped"] = {"files": scan.skipped, "first": scan.skipped_first}
    atomic_write_json(out / MANIFEST, manifest)  # last: the folder is complete exactly when it exists
    return out / MANIFEST


def _documents(request: dict[str, Any]) -> Iterator[Document]:
    """A fresh read of the request's source."""
    return iter_documents(request["source"], text_field=request["text_field"], limit_chars=request["limit_chars"])


def _scan_once(out: Path, request: dict[str, Any], progress: bool) -> Scan:
    """The source's scan: read back from `scan.json` when a resumed prepare has it, else read and recorded
    (`--strict` refuses a source whose directory holds files it would skip)."""
    if (out / SCAN).is_file():
        return Scan(**json.loads((out / SCAN).read_text(encoding="utf-8")))
    source = request["source"]
    bar = tqdm(disable=not progress, unit="doc", desc=f"scan {source}", dynamic_ncols=True, file=sys.stderr)
    count, chars = 0, 0

    def id_stream() -> Iterator[str]:  # the source read once, keeping ids and lengths
        nonlocal count, chars
        for doc in _documents(request):
            count += 1
            chars += len(doc.text)
            bar.update(1)
            yield doc.id

    with skipped_files() as skipped:
        overrides = split_overrides(id_stream(), DEFAULT_FRACTIONS)
    bar.close()
    scan = Scan(count, chars, overrides, len(skipped), skipped[:SKIPPED_NAMED])
    if request.get("strict", False) and scan.skipped:
        raise DataError(
            f"{skipped_text(scan.skipped, scan.skipped_first)} of {source} are binary or not UTF-8 text (--strict); "
            "convert or remove them, or drop --strict to skip them"
        )
    atomic_write_json(out / SCAN, asdict(scan))
    return scan


def _tokenizer(out: Path, request: dict[str, Any], scan: Scan, cache_dir: str | os.PathLike[str] | None) -> Tokenizer:
    """The folder's tokenizer, its config written to `tokenizer.json`: read back on resume, a Hugging Face one from
    the folder's copy of its files, a `bpe:N` one trained on the train split's leading `sample_chars`."""
    source, tokenizer = request["source"], request["tokenizer"]
    is_hf = tokenizer.strip().startswith("hf:")
    if (out / TOKENIZER).is_file() and not is_hf:
        return tokenizer_from_config(json.loads((out / TOKENIZER).read_text(encoding="utf-8")))
    if is_hf:
        tok = _hf_tokenizer(tokenizer, out)
    else:
        is_bpe = tokenizer.strip().startswith("bpe")
        sample = bpe_sample(_documents(request), scan, request["sample_chars"]) if is_bpe else None
        if sample is not None and not sample:
            raise DataError(f"source {source!r} has no training documents to train {tokenizer} on; use a bigger corpus")
        tok = build_tokenizer(tokenizer, sample, cache_dir, corpus_name=source)
    atomic_write_json(out / TOKENIZER, tok.to_config())
    return tok


def _write_shards(
    out: Path,
    request: dict[str, Any],
    scan: Scan,
    tok: Tokenizer,
    dtype: type[np.unsignedinteger],
    records: list[dict[str, Any]],
    progress: bool,
    workers: int,
) -> None:
    """Encode and write every shard after the finished ones, appending each shard's record to `records`."""
    source = request["source"]
    documents_before = {name: sum(r["splits"][name]["documents"] for r in records) for name in SPLITS}
    bar = tqdm(
        total=scan.documents,
        initial=sum(r["source_documents"] for r in records),
        disable=not progress,
        unit="doc",
        dynamic_ncols=True,
        desc=f"prepare {source}",
        file=sys.stderr,
    )
    started, tokens = time.perf_counter(), 0  # for the bar's tokens per second since the prepare (re)started
    parts = iter_part_documents(source, text_field=request["text_field"], limit_chars=request["limit_chars"])
    with encoding_pool(tok, workers) as pool:
        for index, docs in enumerate(source_shards(parts, request["shard_chars"])):
            if index < len(records):
                continue
            writers = {
                name: SplitWriter(out / f"{name}-{index:05d}", dtype, tok.separator_id, documents_before[name] > 0)
                for name in SPLITS
            }
            try:  # a failure removes the shard's partial files
                for batch, encoded in encoded_batches(tok, docs, pool):
                    for (part, doc), ids in zip(batch, encoded, strict=True):
                        if ids.size:
                            writers[scan.split(doc)].write(ids, part)
                            tokens += int(ids.size)
                    bar.set_postfix(tok_s=f"{tokens / max(time.perf_counter() - started, 1e-9):,.0f}", refresh=False)
                    bar.update(len(batch))
                entries = {name: writer.finish() for name, writer in writers.items()}
            except BaseException:
                for writer in writers.values():
                    writer.abort()
                raise
            record = shard_record(index, docs, entries)
            atomic_write_json(out / f"shard-{index:05d}.json", record)
            records.append(record)
            for name in SPLITS:
                documents_before[name] += record["splits"][name]["documents"]
    bar.close()


def _load_request(out_dir: Path, request: dict[str, Any]) -> None:
    """Refuse to continue an unfinished prepare of something else in `out_dir` (one with no finished shard is
    started anew: nothing is lost); record the request otherwise."""
    path = out_dir / REQUEST
    if path.is_file():
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            saved = None
        if saved == request:
            return
        if (out_dir / "shard-00000.json").is_file():
            was = saved if isinstance(saved, dict) else {}
            raise DataError(
                f"{out_dir} holds an unfinished prepare with other settings (`{prepare_command(was, out_dir)}`); "
                f"run that to finish it, use another --out, or delete {out_dir} to prepare it anew"
            )
        _remove_all(out_dir, keep={LOCK_NAME})
    elif any(p.name not in (LOCK_NAME, STAMP) for p in out_dir.iterdir()):
        raise DataError(f"{out_dir} is not empty and holds no prepared data; give an empty or new --out folder")
    atomic_write_json(path, request)


def _check_source_state(out_dir: Path, source: str, strict: bool) -> None:
    """Record the source's fingerprint when a prepare starts; refuse to continue one whose source changed since
    (a file added, removed, or different in size, mtime or content), naming the first difference."""
    state = source_state(source, full=strict)
    path = out_dir / SOURCE_STATE
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        atomic_write_json(path, {"full": strict, "files": state})
        return
    change = describe_change(saved, state)
    if change:
        raise DataError(
            f"the source {source!r} changed since {out_dir} was started ({change}), so its finished shards are "
            f"stale; delete {out_dir} and prepare it again, or use another --out"
        )


def _hf_tokenizer(spec: str, out_dir: Path) -> Tokenizer:
    """A Hugging Face tokenizer read from the folder's own copy of its files (copied when the prepare starts;
    a resumed prepare refuses an original that changed since). A `.gguf` file is read in place (not copied)."""
    original = Path(spec.strip().removeprefix("hf:")).expanduser().resolve()
    if original.is_file():
        return HFTokenizer(original)
    copy = out_dir / TOKENIZER_DIR
    if copy.is_dir():
        change = describe_change(copied_files(copy), copied_files(original, tokenizer_files(original)))
        if change:
            raise DataError(
                f"the tokenizer {original} changed since {out_dir} was started ({change}); delete {out_dir} and "
                "prepare it again, or use another --out"
            )
    else:
        partial = out_dir / (TOKENIZER_DIR + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        for name in tokenizer_files(original):
            shutil.copyfile(original / name, partial / name)
        os.replace(partial, copy)
    return HFTokenizer(copy, origin=str(original))


SKIPPED_NAMED = 5
"""How many skipped files a manifest (and the summary of `lextra data prepare`) names."""


def source_shards(docs: Iterable[tuple[int, Document]], shard_chars: int) -> Iterator[list[tuple[int, Document]]]:
    """The (part, document) pairs cut into consecutive shards of at least `shard_chars` characters (but the last)."""
    current: list[tuple[int, Document]] = []
    chars = 0
    for part, doc in docs:
        current.append((part, doc))
        chars += len(doc.text)
        if chars >= shard_chars:
            yield current
            current, chars = [], 0
    if current:
        yield current


@dataclass
class Scan:
    """What one read of the source tells before encoding: its size and the documents `split_corpus` moves."""

    documents: int
    chars: int
    overrides: dict[str, str]
    skipped: int = 0  #: files a directory source skipped (binary, not UTF-8)
    skipped_first: list[str] = field(default_factory=list)  #: the first `SKIPPED_NAMED` of them

    def split(self, doc: Document) -> str:
        """The split of a document, exactly as `split_corpus` over the whole source decides it."""
        return self.overrides.get(doc.id) or split_of(doc.id, DEFAULT_FRACTIONS)


def bpe_sample(docs: Iterable[Document], scan: Scan, sample_chars: int) -> list[Document]:
    """The leading train-split documents up to `sample_chars` characters (the last one whole): the whole train
    split when it fits, which is what `prepare_data` trains on."""
    sample: list[Document] = []
    total = 0
    for doc in docs:
        if total >= sample_chars:
            break
        if scan.split(doc) == "train":
            sample.append(doc)
            total += len(doc.text)
    return sample


def skipped_text(count: int, first: Sequence[str]) -> str:
    """`N files (a, b, ...)`: the count and the first few names."""
    more = ", ..." if count > len(first) else ""
    return f"{count} file{'s' if count != 1 else ''} ({', '.join(first)}{more})"


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
