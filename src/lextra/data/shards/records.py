"""What a prepare writes: one split's files of a shard (`SplitWriter`), the finished shards found on resume, and
the manifest assembled from the shards' records."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lextra.data.corpora import DEFAULT_FRACTIONS, SPLITS, Document, mixture_parts
from lextra.data.integrity import copied_files, file_entry
from lextra.data.shards.layout import FORMAT_VERSION, TOKENIZER, TOKENIZER_DIR
from lextra.data.tokenizers import Tokenizer
from lextra.errors import DataError
from lextra.io import sha256_file


@dataclass
class SplitWriter:
    """Appends one split's documents of one shard to `STEM.tokens.partial` and collects their offsets."""

    stem: Path
    dtype: type[np.unsignedinteger]
    separator: int | None
    joined: bool  #: whether an earlier document of this split exists (then this shard's first gets a separator)

    def __post_init__(self) -> None:
        self.tokens_path, self.offsets_path = (
            self.stem.with_name(f"{self.stem.name}.{kind}") for kind in ("tokens", "offsets")
        )
        self._handle = open(self._partial(self.tokens_path), "wb")  # noqa: SIM115 -- closed by finish/abort
        self._offsets: list[tuple[int, int]] = []
        self._parts: dict[int, list[int]] = {}  #: part -> [documents, tokens (separators excluded)]
        self._position = 0

    @staticmethod
    def _partial(path: Path) -> Path:
        return path.with_name(path.name + ".partial")

    def write(self, ids: np.ndarray, part: int = 0) -> None:
        """Append one document of mixture part `part` (after a separator unless it is the split's first)."""
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
            entry["files"][final.suffix.lstrip(".")] = file_entry(written, final.name)
            os.replace(written, final)
        return entry

    def abort(self) -> None:
        """Close and remove the partial files."""
        self._handle.close()
        for path in (self._partial(self.tokens_path), self._partial(self.offsets_path)):
            path.unlink(missing_ok=True)


def finished_shards(out_dir: Path) -> list[dict[str, Any]]:
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


def part_counts(source: str, records: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
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


def shard_record(
    index: int, docs: Sequence[tuple[int, Document]], entries: dict[str, dict[str, Any] | None]
) -> dict[str, Any]:
    """The record of finished shard `index`: the source documents it consumed and, per split, its files."""
    return {
        "shard": index,
        "source_documents": len(docs),
        "chars": sum(len(doc.text) for _, doc in docs),
        "splits": {
            name: entry or {"documents": 0, "tokens": 0, "parts": {}, "files": {}} for name, entry in entries.items()
        },
    }


def build_manifest(
    out: Path, request: dict[str, Any], tok: Tokenizer, dtype_name: str, records: list[dict[str, Any]]
) -> dict[str, Any]:
    """The manifest of folder `out` whose shards are all finished (`records`, in order): the request, the
    tokenizer (and its copied files), per split its totals and shards, per mixture part its counts."""
    source = request["source"]
    manifest: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "request": request,
        "source": source,
        "limit_chars": request["limit_chars"],
        "fractions": list(DEFAULT_FRACTIONS),
        "tokenizer": {
            "spec": request["tokenizer"],
            "name": tok.name,
            "vocab_size": tok.vocab_size,
            "separator": tok.separator_id,
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
    parts = part_counts(source, records)
    if parts is not None:
        manifest["parts"] = parts
    return manifest
