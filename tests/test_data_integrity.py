"""Prepared folders and run folders you can trust (issue 31): files checked on read, manifests checked as a schema,
one writer at a time, a resume only of what is unchanged, nothing a failed prepare leaves in the way, and folders
that hold everything they read."""

from __future__ import annotations

import copy
import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from lextra.cli import main
from lextra.data import PreparedShards, prepare_shards
from lextra.data import shards as shards_module
from lextra.data import integrity
from lextra.data.integrity import STAMP, forget_verified, source_state
from lextra.errors import DataError, LockedError
from lextra.locks import LOCK_NAME, hold_lock

ROOT = Path(__file__).resolve().parents[1]

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "seven", "wizards", "hex", "kings"]


@pytest.fixture(autouse=True)
def _caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Trained BPE tokenizers, stamps of read-only folders and the data cache go to this test's folder."""
    monkeypatch.setenv("LEXTRA_CACHE", str(tmp_path / "cache"))
    forget_verified()


def _write_corpus(root: Path, documents: int = 20, seed: int = 0) -> str:
    rng = random.Random(seed)
    root.mkdir(parents=True)
    for index in range(documents):
        words = [rng.choice(WORDS) for _ in range(rng.randint(200, 1200))]
        (root / f"doc{index:03d}.txt").write_text(" ".join(words) + "\n", encoding="utf-8")
    return str(root)


def _one_line(text: str, prefix: str) -> str:
    """The single stderr line of a refused command, checked to start with `prefix`."""
    assert text.count("\n") == 1 and text.startswith(prefix) and "Traceback" not in text, text
    return text.strip()


def _train_argv(run: Path, data: Path, *extra: str) -> list[str]:
    argv = ["train", "--out", str(run), "--data", str(data), "--steps", "2", "--layers", "1", "--width", "32"]
    return [*argv, "--heads", "2", "--train-len", "32", "--batch-size", "2", *extra]


# ----------------------------------------------------------------------------- check on read
def test_a_flipped_byte_is_refused_before_the_first_step_and_an_unchanged_folder_is_not_read_again(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    source = _write_corpus(tmp_path / "corpus")
    out = tmp_path / "prepared"
    prepare_shards(source, "bytes", out, shard_chars=40_000, progress=False)
    manifest = json.loads((out / "manifest.json").read_text())
    entry = manifest["splits"]["train"]["shards"][0]["files"]["tokens"]
    assert len(entry["xxh3_128"]) == 32 and len(entry["sha256"]) == 64
    read: list[str] = []
    real = integrity.fast_hash_file
    monkeypatch.setattr(integrity, "fast_hash_file", lambda p: read.append(p) or real(p))
    PreparedShards.open(out)
    files = sum(len(s["files"]) for split in manifest["splits"].values() for s in split["shards"])
    assert len(read) == files and (out / STAMP).is_file()
    read.clear()
    PreparedShards.open(out)  # this process verified them
    forget_verified()
    PreparedShards.open(out)  # a later process: the stamp says they are unchanged
    assert read == []

    data = bytearray((out / entry["name"]).read_bytes())
    data[len(data) // 2] ^= 1
    (out / entry["name"]).write_bytes(bytes(data))  # the same size: only a checksum sees it
    run = tmp_path / "run"
    assert main(_train_argv(run, out)) == 2
    line = _one_line(capsys.readouterr().err, f"lextra train: error: prepared file {out / entry['name']} is corrupt")
    assert "xxh3_128 checksum mismatch" in line and f"--out {out}" in line
    assert not (run / "checkpoints").exists() and not (run / "metrics.jsonl").exists()
    assert main(["data", "verify", str(out)]) == 2  # verify still reads sha256
    assert "sha256 mismatch" in capsys.readouterr().err


def test_a_folder_prepared_before_the_fast_hash_is_checked_by_sha256_once(tmp_path: Path, monkeypatch) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=10)
    out = tmp_path / "old"
    prepare_shards(source, "bytes", out, progress=False)
    manifest = json.loads((out / "manifest.json").read_text())
    for split in manifest["splits"].values():
        for shard in split["shards"]:
            for entry in shard["files"].values():
                del entry["xxh3_128"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    (out / STAMP).unlink(missing_ok=True)
    hashed: list[str] = []
    real = integrity.sha256_file
    monkeypatch.setattr(integrity, "sha256_file", lambda p: hashed.append(p) or real(p))
    PreparedShards.open(out)
    assert len(hashed) == 7  # six token and offsets files and tokenizer.json
    forget_verified()
    hashed.clear()
    PreparedShards.open(out)
    assert hashed == []
    name = manifest["splits"]["validation"]["shards"][0]["files"]["tokens"]["name"]
    data = bytearray((out / name).read_bytes())
    data[3] ^= 4
    (out / name).write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"is corrupt \(sha256 checksum mismatch\); copy the folder again"):
        PreparedShards.open(out)


def test_a_read_only_folder_keeps_its_stamp_in_the_cache(tmp_path: Path, monkeypatch) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=8)
    out = tmp_path / "prepared"
    prepare_shards(source, "bytes", out, progress=False)
    (out / STAMP).unlink(missing_ok=True)
    monkeypatch.setattr(integrity.os, "access", lambda path, mode: Path(path) != out)  # as a read-only mount
    PreparedShards.open(out)
    stamps = list((tmp_path / "cache" / "verified").glob("*.json"))
    assert len(stamps) == 1 and not (out / STAMP).exists()
    forget_verified()
    monkeypatch.setattr(integrity, "fast_hash_file", lambda p: pytest.fail(f"{p} was read again"))
    PreparedShards.open(out)


# ----------------------------------------------------------------------------- the manifest as a schema
INFORMATIONAL = re.compile(
    r"request\..*|source|limit_chars|fractions\[\d\]|tokenizer\.(name|spec)|chars|source_documents|skipped\..*|parts\[\d+\]\.source"
    r"|splits\.\w+\.shards\[\d+\]\.parts.*"  # per shard and part counts: what the prepare summed into `parts`
)
"""Manifest fields a run does not compute with: any value of the right type is a manifest (of other data)."""

OPTIONAL = re.compile(r"parts|.*\.xxh3_128")
"""Fields a manifest may lack: older folders have no `parts` (a weighted mixture is then refused when sampled) and
no fast hashes (their files are then checked by sha256)."""


def _leaves(node: object, path: str = ""):
    """(dotted path, container, key) of every field of a JSON tree, containers included."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        where = f"{path}[{key}]" if isinstance(node, list) else (f"{path}.{key}" if path else str(key))
        yield where, node, key
        yield from _leaves(value, where)


def _mutations(value: object):
    """(name, new value or DELETE) edits of one field: removed, of another type, out of range, raised by one."""
    yield "deleted", _DELETE
    yield "wrong type", "x" if not isinstance(value, str) else 7
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int):
        yield "negative", -1
        yield "raised", value + 1
    if isinstance(value, str):
        yield "emptied", ""
    if isinstance(value, list) and value:
        yield "last entry dropped", value[:-1]
    if isinstance(value, dict):
        yield "emptied", {}


_DELETE = object()


def test_every_edit_of_a_real_manifest_is_one_line_or_a_manifest_that_still_works(tmp_path: Path) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=24)
    out = tmp_path / "prepared"
    prepare_shards(source, "bytes", out, shard_chars=40_000, progress=False)
    path = out / "manifest.json"
    original = json.loads(path.read_text())
    assert len(original["splits"]["train"]["shards"]) >= 2
    refused = 0
    for where, _, _ in list(_leaves(original)):
        for name, value in _mutations(_lookup(original, where)):
            edited = copy.deepcopy(original)
            container, key = _parent(edited, where)
            if value is _DELETE:
                del container[key]
            else:
                container[key] = value
            path.write_text(json.dumps(edited))
            try:
                shards = PreparedShards.open(out)
            except DataError as err:
                message = str(err)
                assert "\n" not in message, message
                if where == "format":
                    assert message.startswith(f"{out} was prepared in format") or "is malformed (format:" in message
                else:
                    assert message.startswith(f"{path} is malformed ("), (where, name, message)
                    assert "; prepare the data again: run `lextra data prepare" in message, message
                refused += 1
                continue
            optional = OPTIONAL.fullmatch(where) is not None and name == "deleted"
            assert optional or INFORMATIONAL.fullmatch(where), f"{where} {name} was accepted"
            assert shards.batch(0, 2, 16, seed=0).shape == (2, 17)
            assert len(shards.documents("validation")) == original["splits"]["validation"]["documents"]
    assert refused > 300
    for edit, expected in (
        (lambda m: m.update(dtype="float16"), "(dtype: unknown token dtype 'float16' (known: uint8, uint16, uint32))"),
        (lambda m: m["splits"].pop("test"), "(splits: expected train, validation, test, got train, validation)"),
        (lambda m: m["splits"]["train"]["shards"].pop(0), "(splits.train: records "),
        (lambda m: m["splits"]["train"].update(tokens=m["splits"]["train"]["tokens"] + 5), "(splits.train: records"),
    ):
        edited = copy.deepcopy(original)
        edit(edited)
        path.write_text(json.dumps(edited))
        with pytest.raises(DataError) as err:
            PreparedShards.open(out)
        assert f"{path} is malformed {expected}" in str(err.value)


def _lookup(tree: object, where: str) -> object:
    container, key = _parent(tree, where)
    return container[key]


def _parent(tree: object, where: str) -> tuple:
    """The container of the field `where` (a dotted path with [index] parts) and its key there."""
    keys: list[object] = []
    for part in where.replace("[", ".[").split("."):
        keys.append(int(part[1:-1]) if part.startswith("[") else part)
    node = tree
    for key in keys[:-1]:
        node = node[key]  # type: ignore[index]
    return node, keys[-1]


def test_a_malformed_manifest_or_a_file_as_out_is_one_line_from_the_cli(tmp_path: Path, capsys) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=10)
    out = tmp_path / "prepared"
    prepare_shards(source, "bytes", out, progress=False)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["splits"]["train"]["shards"][0]["tokens"] += 1
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert main(_train_argv(tmp_path / "run", out)) == 2
    _one_line(capsys.readouterr().err, f"lextra train: error: {out / 'manifest.json'} is malformed (splits.train.")
    (out / "manifest.json").write_text("{not json")
    assert main(_train_argv(tmp_path / "run", out)) == 2
    _one_line(capsys.readouterr().err, f"lextra train: error: {out / 'manifest.json'} is corrupt (")
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    assert main(["data", "prepare", source, "--tokenizer", "bytes", "--out", str(a_file), "--quiet"]) == 2
    assert _one_line(capsys.readouterr().err, "lextra data: error: ") == (
        f"lextra data: error: --out {a_file} is a file; give a new or empty folder to prepare into"
    )
    assert a_file.read_text() == "mine"
    assert main(_train_argv(tmp_path / "run", a_file)) == 2
    _one_line(capsys.readouterr().err, f"lextra train: error: {a_file} is a file, not a prepared data folder")
