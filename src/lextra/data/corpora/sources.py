"""Corpus specs to documents: a built-in name, a path, or a mixture `A+B` (weighted `A:0.3+B:0.7`), read lazily
with a character limit; and the files a spec reads, fingerprinted to key caches and to check resumes."""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path

from lextra.data.corpora.builtin import BUILTIN_CORPORA, UNREAD_DIRS, builtin_documents, builtin_roots
from lextra.data.corpora.document import Document
from lextra.data.corpora.formats import path_documents
from lextra.errors import DataError

_MISSING_PATH_HINT = (
    "give a directory of text files, a .jsonl or .parquet file, a saved Hugging Face dataset, "
    "or one of the built-in corpora: " + ", ".join(BUILTIN_CORPORA)
)


def load_corpus(spec: str, *, text_field: str = "text", limit_chars: int | None = None) -> list[Document]:
    """Load a corpus by built-in name or path (docs/running.md), dropping empty documents; a mixture `A+B+...` holds
    every part's documents with their own ids. With `limit_chars`, documents are taken in order until their total
    length reaches the limit (in a mixture, each part's equal share)."""
    return list(iter_documents(spec, text_field=text_field, limit_chars=limit_chars))


def iter_documents(spec: str, *, text_field: str = "text", limit_chars: int | None = None) -> Iterator[Document]:
    """The documents `load_corpus` returns, one at a time (only a mixture's ids are held, to refuse an id found in
    two parts); a corpus without a non-empty document raises `DataError` at its end."""
    return (doc for _, doc in iter_part_documents(spec, text_field=text_field, limit_chars=limit_chars))


def iter_part_documents(
    spec: str, *, text_field: str = "text", limit_chars: int | None = None
) -> Iterator[tuple[int, Document]]:
    """`iter_documents`, each document with the index of the mixture part it comes from (0 for one corpus)."""
    if limit_chars is not None and (isinstance(limit_chars, bool) or limit_chars < 1):
        raise DataError(f"limit_chars must be a positive number of characters, got {limit_chars!r}")
    parts = mixture_parts(spec)
    if len(parts) > 1:
        yield from _iter_mixture(parts, text_field, limit_chars)
        return
    total = 0
    for doc in _iter_corpus(spec, text_field):
        if not doc.text.strip():
            continue
        yield 0, doc
        total += len(doc.text)
        if limit_chars is not None and total >= limit_chars:
            break
    if not total:
        raise DataError(
            f"corpus {spec!r} has no non-empty documents; point it at UTF-8 text "
            f"(for JSONL or datasets, check that the text is in the field {text_field!r})"
        )


def mixture_parts(spec: str) -> list[str]:
    """The corpora of a mixture spec `A+B` (one part for a plain name or an existing path that contains '+');
    the weights of a weighted mixture `A:0.3+B:0.7` are dropped (see `mixture_weights`)."""
    return [name for name, _ in _weighted_parts(spec)]


def mixture_weights(spec: str) -> list[float] | None:
    """The sampling weights of a weighted mixture `A:0.3+B:0.7`, normalised to sum to 1 (None when unweighted): its
    documents are those of `A+B`, only training windows are drawn by weight."""
    weights = [weight for _, weight in _weighted_parts(spec)]
    if weights[0] is None:
        return None
    total = sum(w for w in weights if w is not None)
    return [w / total for w in weights if w is not None]


_WEIGHT = re.compile(r"(?P<name>.+):(?P<weight>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)")
"""A weighted mixture part, `NAME:WEIGHT`."""


def _weighted_parts(spec: str) -> list[tuple[str, float | None]]:
    """(corpus, weight or None) of each part of a mixture spec; every part is weighted, or none."""
    if "+" not in spec or Path(spec).expanduser().exists():
        return [(spec, None)]
    parts: list[tuple[str, float | None]] = []
    for part in (p.strip() for p in spec.split("+")):
        if not part:
            raise DataError(f"corpus mixture {spec!r} has an empty part; write it as A+B, e.g. english+python-code")
        match = _WEIGHT.fullmatch(part)
        if match is None or Path(part).expanduser().exists():
            parts.append((part, None))
            continue
        weight = float(match["weight"])
        if not math.isfinite(weight) or weight <= 0:
            raise DataError(f"corpus mixture {spec!r}: the weight of {match['name']!r} must be positive, got {weight}")
        parts.append((match["name"].strip(), weight))
    if len({w is None for _, w in parts}) > 1:
        raise DataError(
            f"corpus mixture {spec!r} weights some parts only; weight every part (english:0.3+python-code:0.7) "
            "or none (english+python-code)"
        )
    names = [name for name, _ in parts]
    if len(set(names)) != len(names):
        raise DataError(f"corpus mixture {spec!r} names a corpus twice; list each once")
    return parts


def _iter_mixture(parts: list[str], text_field: str, limit_chars: int | None) -> Iterator[tuple[int, Document]]:
    """Every part's documents in order; a document id found in two parts is an error (ids decide splits)."""
    share = None if limit_chars is None else max(1, limit_chars // len(parts))
    owner: dict[str, str] = {}
    for index, part in enumerate(parts):
        for doc in iter_documents(part, text_field=text_field, limit_chars=share):
            if doc.id in owner:
                raise DataError(
                    f"corpora {owner[doc.id]!r} and {part!r} both hold a document {doc.id!r}; "
                    "mix corpora whose document names differ (e.g. separate folders)"
                )
            owner[doc.id] = part
            yield index, doc


def _iter_corpus(spec: str, text_field: str) -> Iterator[Document]:
    """Yield the documents of `spec` lazily, so `limit_chars` can stop reading early."""
    builtin = builtin_documents(spec)
    if builtin is not None:
        return builtin
    path = Path(spec).expanduser()
    if not path.exists():
        raise DataError(f"corpus path {spec} does not exist; {_MISSING_PATH_HINT}")
    return path_documents(path, text_field)


def source_fingerprint(spec: str) -> str:
    """A sha256 of the name, size and modification time of every file `spec` reads (each part of a mixture):
    it changes when the corpus changes, without reading the text (what keys a cache of prepared data)."""
    digest = hashlib.sha256()
    for part in mixture_parts(spec):
        for root in _source_roots(part):
            digest.update(f"root {root}\n".encode())
            if root.is_file():
                stat = root.stat()
                digest.update(f"{stat.st_size} {stat.st_mtime_ns}\n".encode())
                continue
            entries = []
            for path in _root_files(part, root):
                try:
                    stat = path.stat()
                except OSError:
                    continue
                entries.append(f"{path.relative_to(root).as_posix()} {stat.st_size} {stat.st_mtime_ns}\n")
            digest.update("".join(sorted(entries)).encode())
    return digest.hexdigest()


def _root_files(part: str, root: Path) -> Iterator[Path]:
    """Every file under the folder `root` of corpus `part` (hidden folders and those it does not read skipped)."""
    skip = UNREAD_DIRS if part == "python-code" else frozenset({"__pycache__"})
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in skip]
        for name in filenames:
            yield Path(dirpath) / name


def source_files(spec: str) -> list[tuple[str, Path]]:
    """(name, path) of every file a corpus spec reads (each part of a mixture), in a stable order."""
    files: list[tuple[str, Path]] = []
    for part in mixture_parts(spec):
        for root in _source_roots(part):
            if root.is_dir():
                found = sorted((p.relative_to(root).as_posix(), p) for p in _root_files(part, root))
                files += [(f"{root}/{name}", path) for name, path in found]
            else:
                files.append((str(root), root))
    return files


def _source_roots(spec: str) -> list[Path]:
    """The files or folders one corpus (not a mixture) reads from; those not found are listed as they are."""
    return builtin_roots(spec) or [Path(spec).expanduser().resolve()]
