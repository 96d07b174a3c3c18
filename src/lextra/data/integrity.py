"""Check on read (docs/running.md, Integrity): a prepared folder's files are hashed the first time they are mapped,
then trusted while a stamp of their size, mtime, ctime and inode (`.verified.json`) says they are unchanged."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from lextra.data.tokenizers import resolve_cache_dir
from lextra.errors import DataError
from lextra.io import atomic_write_json, sha256_file

FAST_HASH = "xxh3_128"
"""The name of the fast hash in a manifest's file entries."""

STAMP = ".verified.json"
"""The file inside a prepared folder recording which files were verified, and as what."""

_BLOCK = 1 << 23

_VERIFIED: set[tuple[str, tuple[int, ...], str]] = set()
"""(path, stat key, hash) of the files this process verified: a second open reads no stamp either."""


def fast_hash_file(path: str | os.PathLike[str], edges: int | None = None) -> str:
    """The xxh3-128 of a file's bytes, as hex (read in 8 MiB blocks), or with `edges` of its first and last `edges`
    bytes only (the whole file when it is smaller than two)."""
    import xxhash

    digest = xxhash.xxh3_128()
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if edges is not None and size > 2 * edges:
            digest.update(handle.read(edges))
            handle.seek(size - edges)
            digest.update(handle.read(edges))
        for block in iter(lambda: handle.read(_BLOCK), b""):
            digest.update(block)
    return str(digest.hexdigest())


@dataclass(frozen=True)
class Expected:
    """A file of a folder and the hash it must have: `fast` (xxh3-128) when recorded, else `sha256`."""

    name: str
    sha256: str
    fast: str | None = None

    @property
    def recorded(self) -> str:
        return f"{FAST_HASH}:{self.fast}" if self.fast else f"sha256:{self.sha256}"

    def actual(self, path: Path) -> str:
        return f"{FAST_HASH}:{fast_hash_file(path)}" if self.fast else f"sha256:{sha256_file(path)}"


def _read_stamp(root: Path) -> tuple[Path, dict[str, list]]:
    """Where the verified stamp of folder `root` lives (inside it, or in the cache when it is read-only), and its
    {file: [size, mtime, ctime, inode, hash]} table (empty when there is none)."""
    key = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:24]
    path = root / STAMP if os.access(root, os.W_OK) else resolve_cache_dir().parent / "verified" / f"{key}.json"
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return path, {}
    return path, files if isinstance(files, dict) else {}


def check_files(root: Path, expected: Iterable[Expected], fix: str) -> int:
    """Verify each file of `root` against its recorded hash unless verified unchanged before (a mismatch raises
    `DataError` naming the file and `fix`); returns how many files were read."""
    stamp: dict[str, list] | None = None
    read = 0
    for item in expected:
        path = root / item.name
        try:
            stat = path.stat()
        except OSError:
            raise DataError(f"prepared file {path} is missing; {fix}") from None
        key = (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino)
        memo = (str(path.resolve()), key, item.recorded)
        if memo in _VERIFIED:
            continue
        if stamp is None:
            stamp_file, stamp = _read_stamp(root)
        if stamp.get(item.name) == [*key, item.recorded]:
            _VERIFIED.add(memo)
            continue
        actual = item.actual(path)
        read += 1
        if actual != item.recorded:
            kind = actual.split(":")[0]
            raise DataError(f"prepared file {path} is corrupt ({kind} checksum mismatch); {fix}")
        stamp[item.name] = [*key, item.recorded]
        _VERIFIED.add(memo)
    if read and stamp is not None:
        with contextlib.suppress(OSError):  # no stamp: the next process verifies again
            atomic_write_json(stamp_file, {"format": 1, "files": stamp})
    return read


def forget_verified() -> None:
    """Drop this process's memory of verified files (tests measuring a first open)."""
    _VERIFIED.clear()


EDGE_BLOCK = 1 << 16
"""Bytes hashed at each end of a source file by the quick fingerprint (`source_state`)."""


def source_state(spec: str, *, full: bool = False) -> dict[str, list[int | str]]:
    """Per file a corpus spec reads: [size, mtime_ns, content hash], the hash of its first and last 64 KiB, or of
    the whole file with `full`; what a resumed prepare compares to refuse a source that changed since."""
    from lextra.data.corpora import source_files

    state: dict[str, list[int | str]] = {}
    for name, path in source_files(spec):
        try:
            stat = path.stat()
            digest = fast_hash_file(path, None if full else EDGE_BLOCK)
        except OSError:
            continue
        state[name] = [stat.st_size, stat.st_mtime_ns, digest]
    return state


def describe_change(before: Mapping[str, object], after: Mapping[str, object]) -> str:
    """The first difference between two {file: fingerprint} tables, in words ('' when equal)."""
    for name in sorted(set(before) | set(after)):
        if name not in after:
            return f"{name} was removed"
        if name not in before:
            return f"{name} was added"
        if before[name] != after[name]:
            return f"{name} was modified"
    return ""


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".onnx", ".ckpt", ".npz")
"""Files of a model folder that hold weights: not part of its tokenizer, never copied."""


def tokenizer_files(folder: Path) -> list[str]:
    """The files of a Hugging Face model folder its tokenizer may read: every top-level file but weights."""
    return sorted(
        p.name
        for p in folder.iterdir()
        if p.is_file() and not p.name.startswith(".") and not p.name.endswith(WEIGHT_SUFFIXES)
    )


def file_entry(path: Path, name: str | None = None) -> dict[str, object]:
    """A file's manifest entry: its `name` (default the file's own), bytes, sha256 and xxh3-128."""
    hashes = {"sha256": sha256_file(path), FAST_HASH: fast_hash_file(path)}
    return {"name": name or path.name, "bytes": path.stat().st_size, **hashes}


def copied_files(folder: Path, names: Iterable[str] | None = None) -> dict[str, dict[str, object]]:
    """{name: its `file_entry`} of the files `names` (default: every file) of `folder`."""
    chosen = sorted(p.name for p in folder.iterdir() if p.is_file()) if names is None else list(names)
    return {name: file_entry(folder / name) for name in chosen}
