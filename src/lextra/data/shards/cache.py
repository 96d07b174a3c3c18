"""The data cache: a corpus spec given to a run is prepared once into a cache folder keyed by the source's files,
the tokenizer and the limit, then mapped by every later run (and by every torchrun rank)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from lextra.data.corpora import iter_documents, source_fingerprint
from lextra.data.prepare import PreparedData, prepare_for_model
from lextra.data.shards.layout import FORMAT_VERSION, MANIFEST, normal_spec
from lextra.data.shards.reader import PreparedShards
from lextra.data.shards.writer import prepare_shards
from lextra.data.tokenizers import resolve_cache_dir
from lextra.errors import DataError
from lextra.locks import hold_lock

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
    spec = normal_spec(tokenizer)
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
    """`source` prepared with `tokenizer` in the data cache (`data_cache_dir()` unless `cache_dir`) by the first
    process to get there (others wait on a file lock, or with `prepare=False` up to `wait_s` seconds for the
    manifest), then mapped. Its BPE is trained on the whole train split, so its batches equal the in-memory ones."""
    root = Path(cache_dir).expanduser() if cache_dir is not None else data_cache_dir()
    if root is None:
        raise DataError(f"the data cache is off (${DATA_CACHE_ENV}=off); unset it or give a cache folder")
    spec = normal_spec(tokenizer)
    folder = root / cache_key(source, spec, limit_chars, text_field)
    deadline = time.monotonic() + wait_s
    while not prepare and not (folder / MANIFEST).is_file():  # rank 0 writes it last, by one rename
        if time.monotonic() >= deadline:
            raise DataError(
                f"waited {wait_s:.0f} s for rank 0 to prepare {folder} (no {MANIFEST} yet); see rank 0's error, "
                "or prepare the data first (`lextra data prepare`) on a folder every rank can read and pass --data"
            )
        time.sleep(0.1)
    if prepare and not (folder / MANIFEST).is_file():
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


def shards_for_model(meta: dict[str, Any], data: str | os.PathLike[str] | None = None) -> PreparedShards | None:
    """The prepared data to evaluate a saved model on: the folder `data` (refused when tokenized otherwise than
    the model), else the folder the model was trained from when it is still there with the recorded manifest
    hash; None otherwise (read the raw corpus; said on stderr where the folder fails its checks)."""
    if data is not None:
        shards = PreparedShards.open(data)
        if "hf" in meta:  # a Hugging Face model: its own tokenizer, or the spec it is run with
            shards.check_hf_tokenizer(meta["hf"]["path"], meta["hf"].get("tokenizer"))
        else:
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


def text_data_for_model(
    meta: dict[str, Any],
    data: str | os.PathLike[str] | None = None,
    corpus: str | None = None,
    limit_chars: int | None = None,
) -> PreparedData:
    """The documents and tokenizer a text task reads for a saved model: the prepared folder `data` decoded (checked
    by `shards_for_model`), else `corpus` (default the model's) read with its tokenizer (`prepare_for_model`)."""
    if data is None:
        return prepare_for_model(meta, corpus, limit_chars)
    shards = shards_for_model(meta, data)
    assert shards is not None  # a given folder is opened or refused
    return shards.prepared_data()
