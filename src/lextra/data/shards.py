"""Prepared token shards: a corpus tokenized once into flat token files that every run maps with `np.memmap`.

`prepare_shards(source, tokenizer, out_dir)` streams the documents of any corpus spec (`iter_documents`): a first
read counts them and finds the few documents `split_corpus` would move between splits (`split_overrides`; only
tiny corpora have any), so every document lands in exactly the split it has in memory; a `bpe:N` tokenizer is then
trained on a bounded sample of the train split (`sample_chars`: the same tokenizer, and the same cache entry, as
`prepare_data` when the train split fits in the sample); a last read encodes the documents in batches (the
tokenizer's batch encoder). The source is cut into shards of about `shard_chars` characters; each shard writes,
per split, a flat token file and an offsets file, and then a small record. A folder holds:

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

`PreparedShards.open(dir)` maps the token and offsets files copy-on-write (the files are never written; pages are
read when used and shared by every process that maps them) and checks every file's size against the manifest
(cheap); `verify()` checks every sha256 (a full read: run it on demand, e.g. after copying a folder; prepare
hashes every file it wrote). Its `batch` draws the same windows as `TrainStream` from the same stream
(`window_starts`), so a run on a prepared folder equals a run on the raw corpus, bit for bit.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from lextra.data.corpora import (
    DEFAULT_FRACTIONS,
    SPLITS,
    Document,
    iter_documents,
    iter_part_documents,
    mixture_parts,
    mixture_weights,
    skipped_files,
    source_fingerprint,
    split_of,
    split_overrides,
)
from lextra.data.integrity import (
    FAST_HASH,
    STAMP,
    Expected,
    check_files,
    copied_files,
    describe_change,
    fast_hash_file,
    source_state,
    tokenizer_files,
)
from lextra.data.manifest import check_tokenizer_record, validate_manifest
from lextra.data.orders import EpochOrder, check_order, in_order
from lextra.data.prepare import PreparedData, prepare_for_model
from lextra.data.tokenizers import (
    DEFAULT_BPE_VOCAB,
    ByteTokenizer,
    HFTokenizer,
    Tokenizer,
    build_tokenizer,
    check_tokenizer_spec,
    resolve_cache_dir,
    tokenizer_from_config,
)
from lextra.data.windows import JoinedTokens, mixture_window_starts, window_starts
from lextra.errors import DataError, LextraError
from lextra.io import atomic_write_json, sha256_file
from lextra.locks import LOCK_NAME, folder_lock, hold_lock

FORMAT_VERSION = 1
"""Version of the folder layout; `PreparedShards.open` refuses another."""

MANIFEST = "manifest.json"
REQUEST = "prepare.json"
TOKENIZER = "tokenizer.json"
SCAN = "scan.json"
TOKENIZER_DIR = "tokenizer"
"""The folder of a Hugging Face tokenizer's files, copied in by `prepare` (the folder then uses its own copy)."""
SOURCE_STATE = "source.json"

DEFAULT_SHARD_CHARS = 16_000_000
"""Characters of source text per shard: the memory bound of preparing and the unit of resuming."""

DEFAULT_SAMPLE_CHARS = 100_000_000
"""Characters of the train split a `bpe:N` tokenizer is trained on."""

ENCODE_BATCH = 256
"""Documents encoded (and appended to the shard's files) together."""

SKIPPED_NAMED = 5
"""How many skipped files a manifest (and the summary of `lextra data prepare`) names."""

DTYPES: dict[str, type[np.unsignedinteger]] = {"uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32}
"""Token file dtypes by name."""


def token_dtype(vocab_size: int, requested: str = "auto") -> str:
    """The token file dtype for a vocabulary: the smallest of uint8/uint16/uint32 that holds every id, or the
    `requested` one, refused when the vocabulary does not fit in it."""
    if requested == "auto":
        for name, dtype in DTYPES.items():
            if vocab_size - 1 <= np.iinfo(dtype).max:
                return name
        raise DataError(f"a vocabulary of {vocab_size} ids does not fit in uint32; use a smaller tokenizer")
    if requested not in DTYPES:
        raise DataError(f"unknown token dtype {requested!r}; use auto, {', '.join(DTYPES)}")
    if vocab_size - 1 > np.iinfo(DTYPES[requested]).max:
        raise DataError(
            f"a vocabulary of {vocab_size} ids does not fit in {requested} (ids up to "
            f"{np.iinfo(DTYPES[requested]).max}); use --dtype auto or a larger dtype"
        )
    return requested


def _normal_spec(spec: str) -> str:
    """A tokenizer spec with its defaults spelled out (`bpe` is `bpe:8192`), for comparing two."""
    spec = spec.strip()
    return f"bpe:{DEFAULT_BPE_VOCAB}" if spec == "bpe" else spec


_OPTION_DEFAULTS: dict[str, Any] = {
    "limit_chars": None,
    "text_field": "text",
    "dtype": "auto",
    "shard_chars": DEFAULT_SHARD_CHARS,
    "sample_chars": DEFAULT_SAMPLE_CHARS,
    "strict": False,
}
"""The request's options and their defaults: `_prepare_command` spells out every other value."""


def _prepare_command(request: dict[str, Any], out_dir: Path) -> str:
    """The command line that (re)runs the prepare of `request` (every non-default option spelled out, so it runs
    as printed), for messages."""
    words = ["lextra data prepare", shlex.quote(str(request.get("source", "SOURCE")))]
    words += ["--tokenizer", shlex.quote(str(request.get("tokenizer", "SPEC"))), "--out", shlex.quote(str(out_dir))]
    for key, default in _OPTION_DEFAULTS.items():
        value = request.get(key, default)
        if value != default:
            flag = "--" + key.replace("_", "-")
            words += [flag] if value is True else [flag, shlex.quote(str(value))]
    return " ".join(words)


def unfinished_command(out_dir: str | os.PathLike[str]) -> str | None:
    """The command that continues the unfinished prepare in `out_dir` (None when there is none)."""
    out = Path(out_dir).expanduser()
    try:
        request = json.loads((out / REQUEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(request, dict) or (out / MANIFEST).is_file():
        return None
    return _prepare_command(request, out)


# ----------------------------------------------------------------------------- preparing
def _source_shards(docs: Iterable[tuple[int, Document]], shard_chars: int) -> Iterator[list[tuple[int, Document]]]:
    """The (part, document) pairs cut into consecutive shards of at least `shard_chars` characters (the last may
    be smaller)."""
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
class _Scan:
    """What one read of the source tells before encoding: its size and the documents `split_corpus` moves."""

    documents: int
    chars: int
    overrides: dict[str, str]
    skipped: int = 0  #: files a directory source skipped (binary, not UTF-8)
    skipped_first: list[str] = field(default_factory=list)  #: the first `SKIPPED_NAMED` of them

    def split(self, doc: Document) -> str:
        """The split of a document, exactly as `split_corpus` over the whole source decides it."""
        return self.overrides.get(doc.id) or split_of(doc.id, DEFAULT_FRACTIONS)


def _scan(docs: Iterable[Document], bar: tqdm) -> _Scan:
    """Read the source once (ids and lengths only are kept), counting documents on `bar` and the files it
    skips."""
    count, chars = 0, 0

    def id_stream() -> Iterator[str]:
        nonlocal count, chars
        for doc in docs:
            count += 1
            chars += len(doc.text)
            bar.update(1)
            yield doc.id

    with skipped_files() as skipped:
        overrides = split_overrides(id_stream(), DEFAULT_FRACTIONS)
    bar.close()
    return _Scan(count, chars, overrides, len(skipped), skipped[:SKIPPED_NAMED])


def _bpe_sample(docs: Iterable[Document], scan: _Scan, sample_chars: int) -> list[Document]:
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


def _encode(tokenizer: Tokenizer, docs: Sequence[Document]) -> list[np.ndarray]:
    """Token ids of each document (uint8 for bytes, else int64), as `encode_documents` computes them."""
    if isinstance(tokenizer, ByteTokenizer):
        return [np.frombuffer(doc.text.encode("utf-8"), dtype=np.uint8) for doc in docs]
    return [np.asarray(ids, dtype=np.int64) for ids in tokenizer.encode_many([doc.text for doc in docs])]


_WORKER_TOKENIZER: Tokenizer | None = None
"""The tokenizer of an encoding worker process (set by `_start_worker`)."""


def _start_worker(tokenizer: Tokenizer) -> None:
    global _WORKER_TOKENIZER
    _WORKER_TOKENIZER = tokenizer


def _encode_in_worker(docs: Sequence[Document]) -> list[np.ndarray]:
    assert _WORKER_TOKENIZER is not None
    return _encode(_WORKER_TOKENIZER, docs)


def _encoded_batches(
    tokenizer: Tokenizer, docs: Sequence[tuple[int, Document]], pool: Executor | None
) -> Iterator[tuple[list[tuple[int, Document]], list[np.ndarray]]]:
    """One shard's (part, document) pairs in batches of `ENCODE_BATCH`, each with its documents' token ids:
    encoded here, or by the worker processes of `pool` (every batch of the shard in flight, results in order)."""
    batches = [list(docs[start : start + ENCODE_BATCH]) for start in range(0, len(docs), ENCODE_BATCH)]
    if pool is None:
        for batch in batches:
            yield batch, _encode(tokenizer, [doc for _, doc in batch])
        return
    yield from zip(batches, pool.map(_encode_in_worker, [[doc for _, doc in b] for b in batches]), strict=True)


@contextlib.contextmanager
def _encoding_pool(tokenizer: Tokenizer, workers: int) -> Iterator[Executor | None]:
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


@dataclass
class _SplitWriter:
    """Appends one split's documents of one shard to `NAME.tokens.partial` and collects their offsets."""

    tokens_path: Path
    offsets_path: Path
    dtype: type[np.unsignedinteger]
    separator: int | None
    joined: bool  #: whether an earlier document of this split exists (then this shard's first gets a separator)

    def __post_init__(self) -> None:
        self._handle = open(self._partial(self.tokens_path), "wb")  # noqa: SIM115 -- closed by finish/abort
        self._offsets: list[tuple[int, int]] = []
        self._parts: dict[int, list[int]] = {}  #: part -> [documents, tokens (separators excluded)]
        self._position = 0

    @staticmethod
    def _partial(path: Path) -> Path:
        return path.with_name(path.name + ".partial")

    def write(self, ids: np.ndarray, part: int = 0) -> None:
        """Append one document of mixture part `part` (a separator first unless it is the split's first
        document)."""
        limit = np.iinfo(self.dtype).max
        unsafe = not np.can_cast(ids.dtype, self.dtype)
        if unsafe and ids.size and (int(ids.min()) < 0 or int(ids.max()) > limit):
            raise DataError(
                f"token id {int(ids.max())} does not fit in {np.dtype(self.dtype).name}; "
                "prepare again with --dtype auto or a larger dtype"
            )
        if self.joined and self.separator is not None:
            self._handle.write(np.array([self.separator], dtype=self.dtype).tobytes())
            self._position += 1
        self._handle.write(ids.astype(self.dtype).tobytes())
        self._offsets.append((self._position, self._position + int(ids.size)))
        counts = self._parts.setdefault(part, [0, 0])
        counts[0] += 1
        counts[1] += int(ids.size)
        self._position += int(ids.size)
        self.joined = True

    def finish(self) -> dict[str, Any] | None:
        """Rename the finished files into place and describe them (None when this shard has no document here)."""
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()
        partial = self._partial(self.tokens_path)
        if not self._offsets:
            partial.unlink()
            return None
        offsets_partial = self._partial(self.offsets_path)
        np.asarray(self._offsets, dtype=np.int64).reshape(-1, 2).tofile(offsets_partial)
        entry: dict[str, Any] = {
            "documents": len(self._offsets),
            "tokens": self._position,
            "parts": {str(part): counts for part, counts in sorted(self._parts.items())},
            "files": {},
        }
        for final, written in ((self.tokens_path, partial), (self.offsets_path, offsets_partial)):
            entry["files"][final.suffix.lstrip(".")] = {
                "name": final.name,
                "bytes": written.stat().st_size,
                "sha256": sha256_file(written),
                FAST_HASH: fast_hash_file(written),
            }
            os.replace(written, final)
        return entry

    def abort(self) -> None:
        """Close and remove the partial files."""
        self._handle.close()
        for path in (self._partial(self.tokens_path), self._partial(self.offsets_path)):
            path.unlink(missing_ok=True)


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
                f"{out_dir} holds an unfinished prepare with other settings (`{_prepare_command(was, out_dir)}`); "
                f"run that to finish it, use another --out, or delete {out_dir} to prepare it anew"
            )
        for stale in out_dir.iterdir():
            if stale.name != LOCK_NAME:
                shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
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


def _finished_shards(out_dir: Path) -> list[dict[str, Any]]:
    """The records of the consecutive finished shards 0, 1, ... whose files are all in place with their sizes;
    files of later (unfinished or broken) shards and every `*.partial` file are removed."""
    records: list[dict[str, Any]] = []
    while True:
        path = out_dir / f"shard-{len(records):05d}.json"
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            break
        complete = all(
            (out_dir / f["name"]).is_file() and (out_dir / f["name"]).stat().st_size == f["bytes"]
            for entry in record["splits"].values()
            for f in entry["files"].values()
        )
        if not complete:
            break
        records.append(record)
    for path in out_dir.iterdir():
        name = path.name
        if name.endswith(".partial"):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
            continue
        stem = name.split(".")[0]
        index = stem.rsplit("-", 1)[-1]
        ours = stem.startswith("shard-") or stem.split("-")[0] in SPLITS
        if ours and index.isdigit() and int(index) >= len(records):
            path.unlink()
    return records


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

    Continues an unfinished prepare of the same request (and the same source files) in `out_dir`; a finished one
    is returned as is. One process at a time writes a folder (`lextra.locks`); a bad input found on the way
    leaves the folder as it was. `strict` refuses files a directory source would skip and fingerprints the
    source by whole-file hashes; `workers` encodes in that many processes (the same bytes; a tokenizer that
    already encodes in threads uses one). `cache_dir` is the BPE tokenizer cache (as in `build_tokenizer`).
    """
    out = Path(out_dir).expanduser()
    for label, value in (("shard_chars", shard_chars), ("sample_chars", sample_chars), ("workers", workers)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise DataError(f"{label} must be a positive integer, got {value!r}")
    if out.exists() and not out.is_dir():
        raise DataError(f"--out {out} is a file; give a new or empty folder to prepare into")
    request = _request(source, tokenizer, limit_chars, text_field, dtype, shard_chars, sample_chars, strict)
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
            for path in out.iterdir():
                if path.name not in before and path.name != LOCK_NAME:
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
            raise


def _prepare_locked(
    out: Path, request: dict[str, Any], cache_dir: str | os.PathLike[str] | None, progress: bool, workers: int
) -> Path:
    """`prepare_shards` of `request` into `out`, whose lock this process holds."""
    source, tokenizer, text_field = request["source"], request["tokenizer"], request["text_field"]
    limit_chars, strict = request["limit_chars"], bool(request.get("strict", False))
    _load_request(out, request)
    _check_source_state(out, source, strict)
    records = _finished_shards(out)

    def documents() -> Iterator[Document]:
        return iter_documents(source, text_field=text_field, limit_chars=limit_chars)

    def part_documents() -> Iterator[tuple[int, Document]]:
        return iter_part_documents(source, text_field=text_field, limit_chars=limit_chars)

    if (out / SCAN).is_file():
        scan = _Scan(**json.loads((out / SCAN).read_text(encoding="utf-8")))
    else:
        bar = tqdm(disable=not progress, unit="doc", desc=f"scan {source}", dynamic_ncols=True, file=sys.stderr)
        scan = _scan(documents(), bar)
        if strict and scan.skipped:
            skipped = _skipped_text(scan.skipped, scan.skipped_first)
            raise DataError(
                f"{skipped} of {source} are binary or not UTF-8 text (--strict); convert or remove them, or drop "
                "--strict to skip them"
            )
        atomic_write_json(out / SCAN, asdict(scan))
    is_hf = tokenizer.strip().startswith("hf:")
    if (out / TOKENIZER).is_file() and not is_hf:
        tok = tokenizer_from_config(json.loads((out / TOKENIZER).read_text(encoding="utf-8")))
    elif is_hf:
        tok = _hf_tokenizer(tokenizer, out)
        atomic_write_json(out / TOKENIZER, tok.to_config())
    else:
        sample = (
            _bpe_sample(documents(), scan, request["sample_chars"]) if tokenizer.strip().startswith("bpe") else None
        )
        if sample is not None and not sample:
            raise DataError(f"source {source!r} has no training documents to train {tokenizer} on; use a bigger corpus")
        tok = build_tokenizer(tokenizer, sample, cache_dir, corpus_name=source)
        del sample
        atomic_write_json(out / TOKENIZER, tok.to_config())
    dtype_name = token_dtype(tok.vocab_size, request["dtype"])
    separator = tok.separator_id
    if separator is not None and separator > np.iinfo(DTYPES[dtype_name]).max:
        raise DataError(f"the separator id {separator} does not fit in {dtype_name}; use --dtype auto")
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
    started, tokens_done = time.perf_counter(), 0
    with _encoding_pool(tok, workers) as pool:
        for index, docs in enumerate(_source_shards(part_documents(), request["shard_chars"])):
            if index < len(records):
                continue
            writers = {
                name: _SplitWriter(
                    out / f"{name}-{index:05d}.tokens",
                    out / f"{name}-{index:05d}.offsets",
                    DTYPES[dtype_name],
                    separator,
                    documents_before[name] > 0,
                )
                for name in SPLITS
            }
            try:
                for batch, encoded in _encoded_batches(tok, docs, pool):
                    for (part, doc), ids in zip(batch, encoded, strict=True):
                        if ids.size:
                            writers[scan.split(doc)].write(ids, part)
                            tokens_done += int(ids.size)
                    rate = tokens_done / max(time.perf_counter() - started, 1e-9)
                    bar.set_postfix(tok_s=f"{rate:,.0f}", refresh=False)
                    bar.update(len(batch))
                entries = {name: writer.finish() for name, writer in writers.items()}
            except BaseException:
                for writer in writers.values():
                    writer.abort()
                raise
            record: dict[str, Any] = {
                "shard": index,
                "source_documents": len(docs),
                "chars": sum(len(doc.text) for _, doc in docs),
                "splits": {
                    name: entry or {"documents": 0, "tokens": 0, "parts": {}, "files": {}}
                    for name, entry in entries.items()
                },
            }
            atomic_write_json(out / f"shard-{index:05d}.json", record)
            records.append(record)
            for name in SPLITS:
                documents_before[name] += record["splits"][name]["documents"]
    bar.close()
    if sum(r["source_documents"] for r in records) != scan.documents:
        raise DataError(
            f"the source {source!r} changed while {out} was prepared ({scan.documents} documents when it was "
            f"first read, {sum(r['source_documents'] for r in records)} now); delete {out} and prepare it again"
        )
    manifest = {
        "format": FORMAT_VERSION,
        "request": request,
        "source": source,
        "limit_chars": limit_chars,
        "fractions": list(DEFAULT_FRACTIONS),
        "tokenizer": {
            "spec": tokenizer,
            "name": tok.name,
            "vocab_size": tok.vocab_size,
            "separator": separator,
            "config_sha256": sha256_file(out / TOKENIZER),
        },
        "dtype": dtype_name,
        "source_documents": sum(r["source_documents"] for r in records),
        "chars": sum(r["chars"] for r in records),
        "splits": {
            name: {
                "documents": sum(r["splits"][name]["documents"] for r in records),
                "tokens": sum(r["splits"][name]["tokens"] for r in records),
                "shards": [
                    {"shard": r["shard"], **r["splits"][name]} for r in records if r["splits"][name]["documents"]
                ],
            }
            for name in SPLITS
        },
    }
    if (out / TOKENIZER_DIR).is_dir():
        manifest["tokenizer"]["files"] = copied_files(out / TOKENIZER_DIR)
    if scan.skipped:
        manifest["skipped"] = {"files": scan.skipped, "first": scan.skipped_first}
    parts = _part_counts(source, records)
    if parts is not None:
        manifest["parts"] = parts
    atomic_write_json(out / MANIFEST, manifest)  # last: the folder is complete exactly when it exists
    return out / MANIFEST


def _skipped_text(count: int, first: Sequence[str]) -> str:
    """`N files (a, b, ...)`: the count and the first few names."""
    more = ", ..." if count > len(first) else ""
    return f"{count} file{'s' if count != 1 else ''} ({', '.join(first)}{more})"


def _part_counts(source: str, records: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """Per mixture part (in order) its source and, per split, its documents and tokens (separators excluded);
    None when a shard was recorded without them."""
    names = mixture_parts(source)
    if any("parts" not in r["splits"][name] for r in records for name in SPLITS):
        return None
    out = []
    for index, part in enumerate(names):
        splits = {}
        for name in SPLITS:
            counts = [r["splits"][name]["parts"].get(str(index), [0, 0]) for r in records]
            splits[name] = {"documents": sum(c[0] for c in counts), "tokens": sum(c[1] for c in counts)}
        out.append({"source": part, "splits": splits})
    return out


def _request(
    source: str,
    tokenizer: str,
    limit_chars: int | None,
    text_field: str,
    dtype: str,
    shard_chars: int,
    sample_chars: int,
    strict: bool = False,
) -> dict[str, Any]:
    """What decides a prepared folder's content: an unfinished prepare continues only with the same request."""
    return {
        "format": FORMAT_VERSION,
        "source": source,
        "tokenizer": tokenizer,
        "limit_chars": limit_chars,
        "text_field": text_field,
        "dtype": dtype,
        "shard_chars": shard_chars,
        "sample_chars": sample_chars,
    } | ({"strict": True} if strict else {})


# ----------------------------------------------------------------------------- reading
@dataclass(frozen=True)
class _Part:
    """One shard's token file of a split and its documents' offsets, both mapped."""

    tokens: np.memmap
    offsets: np.ndarray


class PreparedShards:
    """A prepared folder, mapped copy-on-write: training windows, evaluation documents, its tokenizer."""

    def __init__(self, root: Path, manifest: dict[str, Any], digest: str, parts: dict[str, list[_Part]]) -> None:
        """Use `PreparedShards.open`."""
        self.root = root
        self.manifest = manifest
        self.sha256 = digest
        self._parts = parts
        self.separator: int | None = manifest["tokenizer"]["separator"]

    @classmethod
    def open(cls, directory: str | os.PathLike[str], *, check: bool = True) -> PreparedShards:
        """Map a prepared folder, checking its manifest against the schema, every file's presence and size, and
        (with `check`) every file's checksum the first time this folder's files are opened unchanged (see
        `lextra.data.integrity`)."""
        root = Path(directory).expanduser()
        path = root / MANIFEST
        if root.exists() and not root.is_dir():
            raise DataError(
                f"{root} is a file, not a prepared data folder; give the folder `lextra data prepare` wrote"
            )
        if not path.is_file():
            again = unfinished_command(root)
            if (root / REQUEST).is_file():
                raise DataError(
                    f"{root} holds an unfinished prepare (no {MANIFEST}); "
                    f"run `{again or 'lextra data prepare ...'}` again to finish it"
                )
            raise DataError(
                f"{root} is not a prepared data folder (no {MANIFEST}); "
                "make one with `lextra data prepare SOURCE --tokenizer SPEC --out DIR`"
            )
        raw = path.read_bytes()
        try:
            manifest = json.loads(raw)
        except ValueError as err:
            raise DataError(f"{path} is corrupt ({err}); prepare {root} again") from None
        version = manifest.get("format") if isinstance(manifest, dict) else None
        if isinstance(version, int) and not isinstance(version, bool) and version != FORMAT_VERSION:
            raise DataError(
                f"{root} was prepared in format {version}, this lextra reads format {FORMAT_VERSION}; prepare it again"
            )
        request = manifest.get("request") if isinstance(manifest.get("request"), dict) else {}
        again = f"run `{_prepare_command(request, root)}` into a new folder"
        fix = f"prepare the data again: {again}"
        validate_manifest(manifest, DTYPES, SPLITS, str(path), fix)
        try:
            config = json.loads((root / TOKENIZER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise DataError(f"{root / TOKENIZER} is missing or not JSON; {again}") from None
        check_tokenizer_record(manifest, config, str(path), fix)
        dtype = DTYPES[manifest["dtype"]]
        entries = [
            entry
            for name in SPLITS
            for shard in manifest["splits"][name]["shards"]
            for entry in shard["files"].values()
        ]
        for entry in entries:
            file = root / entry["name"]
            size = file.stat().st_size if file.is_file() else None
            if size != entry["bytes"]:
                found = "missing" if size is None else f"{size} bytes, expected {entry['bytes']}"
                raise DataError(f"prepared shard {file} is {found}; {again}")
        if check:
            expected = [Expected(e["name"], e["sha256"], e.get(FAST_HASH)) for e in entries]
            expected.append(Expected(TOKENIZER, manifest["tokenizer"]["config_sha256"]))
            copied = manifest["tokenizer"].get("files", {})
            expected += [
                Expected(f"{TOKENIZER_DIR}/{e['name']}", e["sha256"], e.get(FAST_HASH)) for e in copied.values()
            ]
            check_files(root, expected, f"copy the folder again from where it came from, or {again}")
        parts: dict[str, list[_Part]] = {}
        for name in SPLITS:
            parts[name] = []
            for shard in manifest["splits"][name]["shards"]:
                files = shard["files"]
                # copy-on-write: tensors may view the map (torch needs writable arrays), writes never reach the file
                tokens = np.memmap(root / files["tokens"]["name"], dtype=dtype, mode="c")
                offsets = np.memmap(root / files["offsets"]["name"], dtype=np.int64, mode="r").reshape(-1, 2)
                parts[name].append(_Part(tokens, offsets))
        return cls(root, manifest, hashlib.sha256(raw).hexdigest(), parts)

    def verify(self) -> None:
        """Check the sha256 of every file against the manifest (reads everything); `DataError` on a mismatch."""
        entries = [
            entry
            for name in SPLITS
            for shard in self.manifest["splits"][name]["shards"]
            for entry in shard["files"].values()
        ]
        tokenizer_entry = {"name": TOKENIZER, "sha256": self.manifest["tokenizer"]["config_sha256"]}
        copied = [
            {"name": f"{TOKENIZER_DIR}/{entry['name']}", "sha256": entry["sha256"]}
            for entry in self.manifest["tokenizer"].get("files", {}).values()
        ]
        for entry in [*entries, tokenizer_entry, *copied]:
            file = self.root / entry["name"]
            if not file.is_file() or sha256_file(file) != entry["sha256"]:
                again = _prepare_command(self.manifest["request"], self.root)
                raise DataError(
                    f"prepared file {file} is missing or corrupt (sha256 mismatch); run `{again}` into a new folder"
                )

    @property
    def corpus(self) -> str:
        """The source spec the folder was prepared from (what `PreparedData.corpus` names)."""
        return str(self.manifest["source"])

    def check_model_tokenizer(self, config: dict[str, Any]) -> None:
        """Refuse to evaluate a model on data tokenized otherwise: `config` is the model's saved tokenizer config."""
        mine = json.loads((self.root / TOKENIZER).read_text(encoding="utf-8"))
        if mine != config:
            theirs = config.get("kind", "?")
            if theirs == "bpe" and "vocab_size" in config:
                theirs = f"bpe:{config['vocab_size']}"
            raise DataError(
                f"the prepared data {self.root} was tokenized with {self.tokenizer_spec}, not with the model's "
                f"tokenizer ({theirs}, trained on its own corpus); prepare the data with the model's tokenizer, "
                "or drop --data to read the model's corpus"
            )

    @property
    def tokenizer_spec(self) -> str:
        """The tokenizer spec the folder was prepared with (e.g. `bpe:8192`)."""
        return str(self.manifest["tokenizer"]["spec"])

    def tokenizer(self) -> Tokenizer:
        """The tokenizer the folder was prepared with, rebuilt from its saved config (a Hugging Face tokenizer
        from the folder's own copy of its files, checked on open, when it holds one)."""
        config = json.loads((self.root / TOKENIZER).read_text(encoding="utf-8"))
        if config.get("kind") == "hf" and (self.root / TOKENIZER_DIR).is_dir():
            return HFTokenizer(self.root / TOKENIZER_DIR, origin=config["path"])
        return tokenizer_from_config(config)

    def check_tokenizer(self, spec: str) -> None:
        """Refuse a run whose tokenizer spec differs from the one the folder was prepared with."""
        if _normal_spec(spec) != _normal_spec(self.tokenizer_spec):
            raise DataError(
                f"the prepared data {self.root} was tokenized with {self.tokenizer_spec}, the run asks for {spec}; "
                f"pass --tokenizer {self.tokenizer_spec}, or prepare the source again with --tokenizer {spec}"
            )

    def check_hf_tokenizer(self, own: str, spec: str | None = None) -> None:
        """Refuse data for a Hugging Face model tokenized otherwise: with `spec` (the run's --tokenizer) that
        spec, else the model's own tokenizer at the resolved path `own` (prepared with `--tokenizer hf:OWN`)."""
        if spec:
            self.check_tokenizer(spec)
            return
        saved = json.loads((self.root / TOKENIZER).read_text(encoding="utf-8"))
        if saved.get("kind") != "hf" or saved.get("path") != own:
            raise DataError(
                f"the prepared data {self.root} was tokenized with {self.tokenizer_spec}, not the model's "
                f"own tokenizer ({own}); prepare it with --tokenizer hf:{own}, or pass --tokenizer "
                f"{self.tokenizer_spec}"
            )

    def num_tokens(self, split: str = "train") -> int:
        """Tokens of a split's stream, separators included."""
        return int(self.manifest["splits"][split]["tokens"])

    def num_documents(self, split: str = "train") -> int:
        """Documents of a split (those that encode to at least one token)."""
        return int(self.manifest["splits"][split]["documents"])

    def __len__(self) -> int:
        """Tokens of the training stream, as `len(TrainStream)`."""
        return self.num_tokens("train")

    def span(self, split: str, start: int, stop: int) -> np.ndarray:
        """Tokens [start, stop) of a split's stream (across shard files), as a new array of the file dtype."""
        return self._stream(split).span(start, stop)

    def batch(
        self, step: int, batch_size: int, length: int, seed: int, rank: int = 0, world_size: int = 1
    ) -> torch.Tensor:
        """A (batch_size, length + 1) int64 batch of training windows: `TrainStream.batch` over the same stream."""
        return self.windows(window_starts(len(self), step, batch_size, length, seed, rank, world_size), length)

    def windows(self, starts: torch.Tensor, length: int) -> torch.Tensor:
        """The (len(starts), length + 1) int64 windows of the training stream at `starts`."""
        return self._stream("train").windows(starts, length)

    @functools.cached_property
    def _streams(self) -> dict[str, JoinedTokens]:
        return {}

    def _stream(self, split: str) -> JoinedTokens:
        """A split's token files read as one stream (they stay mapped while this object lives)."""
        if split not in self._streams:
            self._streams[split] = JoinedTokens([part.tokens for part in self._parts[split]])
        return self._streams[split]

    def part_ranges(self, split: str = "train") -> list[tuple[int, int]]:
        """Each mixture part's [start, stop) range of a split's stream (its documents are consecutive there)."""
        parts = self.manifest.get("parts")
        if parts is None:
            raise DataError(
                f"{self.root} records no mixture parts (prepared by an older lextra); prepare it again to sample "
                "its parts by weight"
            )
        gap = 0 if self.separator is None else 1
        ranges, documents, tokens = [], 0, 0
        for part in parts:
            count, size = part["splits"][split]["documents"], part["splits"][split]["tokens"]
            start = tokens + documents * gap
            ranges.append((start, start + size + max(count - 1, 0) * gap))
            documents, tokens = documents + count, tokens + size
        return ranges

    def documents(self, split: str, limit: int | None = None) -> list[torch.Tensor]:
        """The split's documents (at most `limit`) as 1-D token tensors in corpus order, in the file dtype: what
        `encode_documents` gives for the raw split, without re-tokenizing. They view the copy-on-write map, so
        nothing is copied or read until used, and writing into one changes this process's copy only."""
        if split not in SPLITS:
            raise DataError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
        out: list[torch.Tensor] = []
        for part in self._parts[split]:
            for start, stop in part.offsets:
                if limit is not None and len(out) >= limit:
                    return out
                out.append(torch.from_numpy(part.tokens[int(start) : int(stop)]))
        return out

    def texts(self, split: str) -> DecodedDocuments:
        """The split's documents as text (decoded lazily with the folder's tokenizer; see `DecodedDocuments`):
        for tasks whose prompts are built from text (retrieval needles and haystacks, RULER essays)."""
        if split not in SPLITS:
            raise DataError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
        return DecodedDocuments(self, split)

    def prepared_data(self) -> PreparedData:
        """The folder as `PreparedData` (what `prepare_data` gives for its source and tokenizer): every split's
        documents decoded lazily (`texts`), the folder's tokenizer, and the folder as the train split's `stream`."""
        splits: dict[str, Any] = {name: self.texts(name) for name in SPLITS}
        return PreparedData(self.corpus, splits, self.tokenizer(), stream=self)


class DecodedDocuments(Sequence[Document]):
    """A prepared split's documents as text, decoded with the folder's tokenizer when first read (then kept).

    The folder stores tokens, not texts: each document's text is `tokenizer.decode` of its tokens, which is the
    original text exactly for `bytes` and byte-level `bpe:N` (tested on the fixtures; a Hugging Face tokenizer
    that normalizes may differ). Its id is `SPLIT/INDEX` (the folder records no document ids)."""

    def __init__(self, shards: PreparedShards, split: str) -> None:
        self._tokens = shards.documents(split)
        self._split = split
        self._tokenizer: Tokenizer | None = None
        self._shards = shards
        self._texts: dict[int, Document] = {}

    def __len__(self) -> int:
        return len(self._tokens)

    def _document(self, index: int) -> Document:
        if index not in self._texts:
            if self._tokenizer is None:
                self._tokenizer = self._shards.tokenizer()
            text = self._tokenizer.decode(self._tokens[index].tolist())
            self._texts[index] = Document(f"{self._split}/{index}", text)
        return self._texts[index]

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._document(i) for i in range(len(self))[index]]
        position = range(len(self))[index]  # IndexError as a list raises it
        return self._document(position)


# ----------------------------------------------------------------------------- the cache of corpus specs
DATA_CACHE_ENV = "LEXTRA_DATA_CACHE"
"""Environment variable: the folder of `cached_shards` (default `data` beside the tokenizer cache); `off` makes
runs read corpus specs into memory instead."""

CACHE_WAIT_S = 6 * 3600.0
"""How long `cached_shards` waits for another process (e.g. another torchrun rank) preparing the same entry."""


def data_cache_dir() -> Path | None:
    """Where corpus specs given to a run are prepared: `$LEXTRA_DATA_CACHE`, else `$LEXTRA_CACHE/data`, else
    ~/.cache/lextra/data; None when `$LEXTRA_DATA_CACHE` is `off`."""
    value = os.environ.get(DATA_CACHE_ENV, "").strip()
    if value.lower() == "off":
        return None
    return Path(value).expanduser() if value else resolve_cache_dir().parent / "data"


def cache_key(source: str, tokenizer: str, limit_chars: int | None, text_field: str = "text") -> str:
    """The folder name of a cache entry: a readable prefix and a hash of (source, its files' sizes and times,
    limit, tokenizer, text field); a changed corpus or a changed `hf:` tokenizer folder gets a new entry."""
    spec = _normal_spec(tokenizer)
    fingerprints = {"source": source_fingerprint(source)}
    if spec.startswith("hf:"):
        fingerprints["tokenizer"] = source_fingerprint(spec[3:])
    key = json.dumps(
        {
            "format": FORMAT_VERSION,
            "source": source,
            "limit_chars": limit_chars,
            "tokenizer": spec,
            "text_field": text_field,
            "files": fingerprints,
        },
        sort_keys=True,
    )
    slug = re.sub(r"[^A-Za-z0-9_.+-]+", "-", f"{source}-{spec}").strip("-.")[-60:] or "corpus"
    return f"{slug}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def cached_shards(
    source: str,
    tokenizer: str,
    limit_chars: int | None = None,
    *,
    text_field: str = "text",
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
    wait_s: float = CACHE_WAIT_S,
    prepare: bool = True,
) -> PreparedShards:
    """`source` prepared with `tokenizer` in the data cache (`data_cache_dir()` unless `cache_dir`), the first
    time by whichever process gets there first (others wait on a file lock), then only mapped.

    With `prepare=False` (torchrun ranks other than 0) the entry is never written: the call waits up to `wait_s`
    seconds for its manifest, so every rank maps the files one rank prepared.

    The entry holds exactly the data a run on the raw corpus reads: the BPE is trained on the whole train split
    (as `prepare_data` trains it), so its batches and validation documents equal the in-memory ones bit for bit.
    """
    root = Path(cache_dir).expanduser() if cache_dir is not None else data_cache_dir()
    if root is None:
        raise DataError(f"the data cache is off (${DATA_CACHE_ENV}=off); unset it or give a cache folder")
    spec = _normal_spec(tokenizer)
    folder = root / cache_key(source, spec, limit_chars, text_field)
    if not prepare:
        _wait_for_manifest(folder, wait_s)
    elif not (folder / MANIFEST).is_file():
        # a bad source fails here, before a cache entry exists
        next(iter_documents(source, text_field=text_field, limit_chars=limit_chars))
        root.mkdir(parents=True, exist_ok=True)
        with hold_lock(folder.with_name(folder.name + ".lock"), f"the data cache entry {folder}", wait_s=wait_s):
            if not (folder / MANIFEST).is_file():
                prepare_shards(
                    source,
                    spec,
                    folder,
                    limit_chars=limit_chars,
                    text_field=text_field,
                    sample_chars=sys.maxsize,
                    progress=progress,
                )
    try:
        return PreparedShards.open(folder)
    except DataError as err:
        raise DataError(f"the data cache entry {folder} is damaged ({err}); delete {folder} and run again") from None


def _wait_for_manifest(folder: Path, wait_s: float) -> None:
    """Poll for `folder`'s manifest (written last, by one rename) for up to `wait_s` seconds."""
    deadline = time.monotonic() + wait_s
    while not (folder / MANIFEST).is_file():
        if time.monotonic() >= deadline:
            raise DataError(
                f"waited {wait_s:.0f} s for rank 0 to prepare {folder} (no {MANIFEST} yet); see rank 0's error, "
                "or prepare the data first (`lextra data prepare`) on a folder every rank can read and pass --data"
            )
        time.sleep(0.1)


def shards_for_model(meta: dict[str, Any], data: str | os.PathLike[str] | None = None) -> PreparedShards | None:
    """The prepared data to evaluate a saved model on: the folder `data` (refused when tokenized otherwise than
    the model), else the folder the model was trained from (`--data` or the data cache) when it is still there
    with the manifest hash the run recorded; None when there is none (read the raw corpus), said in one line on
    stderr where the folder is there but fails its checks."""
    if data is not None:
        shards = PreparedShards.open(data)
        shards.check_model_tokenizer(meta.get("tokenizer", {"kind": "bytes"}))
        return shards
    recorded = meta.get("data") or {}
    path, digest = recorded.get("path"), recorded.get("manifest_sha256")
    if not path or not digest or not (Path(path) / MANIFEST).is_file():
        return None
    try:
        shards = PreparedShards.open(path)
    except DataError as error:
        print(f"lextra: not reading the model's prepared folder ({error}); reading its raw corpus", file=sys.stderr)
        return None
    if shards.sha256 != digest:
        return None
    return shards


def text_data_for_model(meta: dict[str, Any], data: str | os.PathLike[str] | None = None) -> PreparedData:
    """The documents and tokenizer a text task (retrieval prompts) reads for a saved model: the prepared folder
    `data` decoded (`PreparedShards.prepared_data`; refused when tokenized otherwise than the model), else the
    model's corpus read with its tokenizer (`prepare_for_model`)."""
    if data is None:
        return prepare_for_model(meta)
    shards = shards_for_model(meta, data)
    assert shards is not None  # a given folder is opened or refused
    return shards.prepared_data()


class WeightedMixture:
    """Training windows of a prepared weighted mixture (`A:0.3+B:0.7`): each window comes from one part, drawn
    by weight (`mixture_window_starts`), so every part is seen in its share whatever its size."""

    def __init__(self, shards: PreparedShards, weights: Sequence[float]) -> None:
        self.shards = shards
        self.weights = list(weights)
        self.ranges = shards.part_ranges("train")
        if len(self.ranges) != len(self.weights):
            raise DataError(
                f"{shards.root} holds {len(self.ranges)} mixture parts, the weights name {len(self.weights)}; "
                "prepare the weighted mixture itself"
            )

    def __len__(self) -> int:
        """Tokens of the training stream (every part's)."""
        return len(self.shards)

    def batch(
        self, step: int, batch_size: int, length: int, seed: int, rank: int = 0, world_size: int = 1
    ) -> torch.Tensor:
        """A (batch_size, length + 1) int64 batch, a pure function of (seed, step, rank)."""
        starts = mixture_window_starts(self.ranges, self.weights, step, batch_size, length, seed, rank, world_size)
        return self.shards.windows(starts, length)


def training_batches(shards: PreparedShards, order: str = "iid") -> PreparedShards | WeightedMixture | EpochOrder:
    """What a run draws its windows from, in `order` (`ORDERS`): the folder's stream, i.i.d. or in epochs, or its
    parts by weight when it holds a weighted mixture (i.i.d. only: weights say how often each part is drawn, an
    epoch draws every window once)."""
    check_order(order)
    weights = mixture_weights(shards.corpus)
    if weights is not None:
        if order == "epoch":
            raise DataError(
                f"{shards.root} holds a weighted mixture ({shards.corpus}), whose windows are drawn by weight; "
                "epoch order draws every window once, so use --order iid, or an unweighted mixture A+B"
            )
        return WeightedMixture(shards, weights)
    return in_order(shards, order)
