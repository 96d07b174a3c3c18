"""The schema of a prepared folder's `manifest.json`, checked whole on open: every field's presence and type,
counts summing and sizing their files, a known dtype that holds the vocabulary, the folder's own file names; a
manifest that fails is refused in one line naming the field."""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

import numpy as np

from lextra.errors import DataError

_HEX = re.compile(r"[0-9a-f]+")


class ManifestError(DataError):
    """A prepared folder's manifest that does not follow the schema."""


class _FieldError(Exception):
    """Internal: the dotted path of the bad field and what is wrong with it."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _field(node: Any, key: str, where: str, kinds: tuple[type, ...], *, optional: bool = False) -> Any:
    """`node[key]`, checked to be one of `kinds` (bool is never an int here)."""
    path = f"{where}.{key}" if where else key
    if not isinstance(node, dict) or key not in node:
        if optional:
            return None
        raise _FieldError(path, "missing")
    value = node[key]
    if value is None and type(None) in kinds:
        return None
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        names = {int: "an integer", str: "a string", dict: "an object", list: "a list", float: "a number"}
        expected = " or ".join(names.get(k, "null") for k in kinds)
        raise _FieldError(path, f"expected {expected}, got {_describe(value)}")
    return value


def _count(node: Any, key: str, where: str, minimum: int = 0) -> int:
    value = int(_field(node, key, where, (int,)))
    if value < minimum:
        raise _FieldError(f"{where}.{key}" if where else key, f"must be at least {minimum}, got {value}")
    return value


def _hex(node: Any, key: str, where: str, length: int, *, optional: bool = False) -> None:
    value = _field(node, key, where, (str,), optional=optional)
    if value is not None and (len(value) != length or not _HEX.fullmatch(value)):
        raise _FieldError(f"{where}.{key}", f"expected {length} hex digits, got {_describe(value)}")


def _check(manifest: Any, dtypes: dict[str, type[np.unsignedinteger]], splits: Collection[str]) -> None:
    if not isinstance(manifest, dict):
        raise _FieldError("manifest", f"expected an object, got {_describe(manifest)}")
    _field(manifest, "format", "", (int,))
    _check_request(_field(manifest, "request", "", (dict,)))
    _field(manifest, "source", "", (str,))
    limit = _field(manifest, "limit_chars", "", (int, type(None)))
    if limit is not None and limit < 1:
        raise _FieldError("limit_chars", f"must be a positive number of characters or null, got {limit}")
    fractions = _field(manifest, "fractions", "", (list,))
    if len(fractions) != 3 or not all(isinstance(f, int | float) and not isinstance(f, bool) for f in fractions):
        raise _FieldError("fractions", f"expected three numbers, got {_describe(fractions)}")
    vocab, separator = _check_tokenizer(_field(manifest, "tokenizer", "", (dict,)))
    dtype_name = _field(manifest, "dtype", "", (str,))
    if dtype_name not in dtypes:
        raise _FieldError("dtype", f"unknown token dtype {dtype_name!r} (known: {', '.join(dtypes)})")
    dtype = dtypes[dtype_name]
    if vocab - 1 > np.iinfo(dtype).max:
        raise _FieldError("dtype", f"{dtype_name} does not hold the {vocab} ids of the vocabulary")
    source_documents = _count(manifest, "source_documents", "")
    _count(manifest, "chars", "")
    table = _field(manifest, "splits", "", (dict,))
    if set(table) != set(splits):
        raise _FieldError("splits", f"expected {', '.join(splits)}, got {', '.join(map(str, table)) or 'none'}")
    documents_total = sum(_check_split(_field(table, split, "splits", (dict,)), split, dtype) for split in splits)
    if documents_total > source_documents:
        raise _FieldError("source_documents", f"{source_documents} is fewer than the splits' {documents_total}")
    parts = _field(manifest, "parts", "", (list,), optional=True)
    skipped = _field(manifest, "skipped", "", (dict,), optional=True)
    if skipped is not None:
        _count(skipped, "files", "skipped")
        first = _field(skipped, "first", "skipped", (list,))
        if not all(isinstance(name, str) for name in first):
            raise _FieldError("skipped.first", f"expected file names, got {_describe(first)}")
    if parts is not None:
        _check_parts(parts, table, splits, separator)


def _check_request(request: dict[str, Any]) -> None:
    for key in ("source", "tokenizer"):
        _field(request, key, "request", (str,))
    for key in ("text_field", "dtype"):
        _field(request, key, "request", (str,), optional=True)
    for key in ("shard_chars", "sample_chars"):
        if key in request:
            _count(request, key, "request", 1)


def _check_tokenizer(tokenizer: dict[str, Any]) -> tuple[int, int | None]:
    """The tokenizer record's fields; returns its vocabulary size and separator id."""
    _field(tokenizer, "spec", "tokenizer", (str,))
    _field(tokenizer, "name", "tokenizer", (str,))
    vocab = _count(tokenizer, "vocab_size", "tokenizer", 1)
    separator = _field(tokenizer, "separator", "tokenizer", (int, type(None)))
    if separator is not None and not 0 <= separator < vocab:
        raise _FieldError("tokenizer.separator", f"must be an id below the vocabulary size {vocab}, got {separator}")
    _hex(tokenizer, "config_sha256", "tokenizer", 64)
    copied = _field(tokenizer, "files", "tokenizer", (dict,), optional=True) or {}
    for name, entry in copied.items():
        _file_entry(entry, f"tokenizer.files.{name}", None)
    return vocab, separator


def _check_split(entry: dict[str, Any], split: str, dtype: type[np.unsignedinteger]) -> int:
    """One split's totals and shards (in increasing order, their files sized by their counts, summing to the
    totals); returns its documents."""
    where = f"splits.{split}"
    documents, tokens = _count(entry, "documents", where), _count(entry, "tokens", where)
    shard_list = _field(entry, "shards", where, (list,))
    sums, previous = [0, 0], -1
    for position, shard in enumerate(shard_list):
        at = f"{where}.shards[{position}]"
        if not isinstance(shard, dict):
            raise _FieldError(at, f"expected an object, got {_describe(shard)}")
        index = _count(shard, "shard", at)
        if index <= previous:
            raise _FieldError(f"{at}.shard", f"shards must be in increasing order, got {index} after {previous}")
        previous = index
        shard_documents, shard_tokens = _count(shard, "documents", at, 1), _count(shard, "tokens", at, 1)
        _field(shard, "parts", at, (dict,), optional=True)
        files = _field(shard, "files", at, (dict,))
        if set(files) != {"tokens", "offsets"}:
            found = ", ".join(map(str, files)) or "none"
            raise _FieldError(f"{at}.files", f"expected tokens and offsets, got {found}")
        sizes = {"tokens": shard_tokens * np.dtype(dtype).itemsize, "offsets": shard_documents * 16}
        for kind, size in sizes.items():
            _file_entry(files[kind], f"{at}.files.{kind}", f"{split}-{index:05d}.{kind}", size)
        sums[0] += shard_documents
        sums[1] += shard_tokens
    if sums != [documents, tokens]:
        raise _FieldError(
            where,
            f"records {documents} documents and {tokens} tokens, its shards sum to {sums[0]} and {sums[1]}",
        )
    return documents


def _check_parts(parts: list[Any], table: dict[str, Any], splits: Collection[str], separator: int | None) -> None:
    """Each mixture part's counts per split, summing to the split's documents and stream tokens."""
    gap = 0 if separator is None else 1
    for split in splits:
        total, tokens = 0, 0
        for position, part in enumerate(parts):
            at = f"parts[{position}]"
            _field(part, "source", at, (str,))
            counts = _field(_field(part, "splits", at, (dict,)), split, f"{at}.splits", (dict,))
            total += _count(counts, "documents", f"{at}.splits.{split}")
            tokens += _count(counts, "tokens", f"{at}.splits.{split}")
        if total and tokens + (total - 1) * gap != table[split]["tokens"]:
            raise _FieldError("parts", f"parts hold {tokens} {split} tokens, which the split's do not match")
        if total != table[split]["documents"]:
            raise _FieldError("parts", f"parts hold {total} {split} documents, the split {table[split]['documents']}")


def _file_entry(entry: Any, where: str, name: str | None, size: int | None = None) -> None:
    """One file's entry: its name (the expected one, when given), size and hashes."""
    if not isinstance(entry, dict):
        raise _FieldError(where, f"expected an object, got {_describe(entry)}")
    found = _field(entry, "name", where, (str,))
    if name is not None and found != name:
        raise _FieldError(f"{where}.name", f"expected {name!r}, got {_describe(found)}")
    if name is None and (not found or "/" in found or "\\" in found or found.startswith(".")):
        raise _FieldError(f"{where}.name", f"expected a plain file name, got {_describe(found)}")
    recorded = _count(entry, "bytes", where)
    if size is not None and recorded != size:
        raise _FieldError(f"{where}.bytes", f"the counts give {size} bytes, the entry records {recorded}")
    _hex(entry, "sha256", where, 64)
    _hex(entry, "xxh3_128", where, 32, optional=True)


def validate_manifest(
    manifest: Any, dtypes: dict[str, type[np.unsignedinteger]], splits: Collection[str], label: str, fix: str
) -> None:
    """Raise `ManifestError` (`label`, the field, the problem, `fix`) unless `manifest` follows the schema."""
    try:
        _check(manifest, dtypes, splits)
    except _FieldError as fail:
        raise ManifestError(f"{label} is malformed ({fail}); {fix}") from None


def check_tokenizer_record(manifest: dict[str, Any], config: Any, label: str, fix: str) -> None:
    """Refuse a manifest whose vocabulary size or separator differ from its tokenizer's saved `config` (where the
    config tells them without loading: bytes, and lextra's BPE, whose separator is its first special token)."""
    kind = config.get("kind") if isinstance(config, dict) else None
    known = {"bytes": (256, ord("\n")), "bpe": (config.get("vocab_size") if kind == "bpe" else None, 0)}
    if kind not in known:
        return
    recorded = manifest["tokenizer"]
    vocab, separator = known[kind]
    for key, value in (("vocab_size", vocab), ("separator", separator)):
        if recorded[key] != value:
            problem = f"the {kind} tokenizer of tokenizer.json has {value}, the manifest records {recorded[key]}"
            raise ManifestError(f"{label} is malformed (tokenizer.{key}: {problem}); {fix}")
