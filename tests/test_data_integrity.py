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

import pytest

from lextra.cli import main
from lextra.data import PreparedShards, integrity, prepare_shards
from lextra.data import shards as shards_module
from lextra.data.integrity import STAMP, forget_verified, source_state
from lextra.data.shards import writer as encode_module
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
    assert main(_train_argv(a_file, out)) == 2  # --out of a run naming a file
    assert _one_line(capsys.readouterr().err, "lextra train: error: ") == (
        f"lextra train: error: the run folder {a_file} is a file, not a folder; give a new folder, or the folder "
        "it wrote before"
    )


# ----------------------------------------------------------------------------- one writer
_HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from lextra.data import shards
    from lextra.data.shards import writer as shard_encode
    from lextra.train import TrainConfig, train
    from lextra.model import GPTConfig

    kind, source, out, gate = sys.argv[1:5]
    gate = Path(gate)

    def wait():
        gate.with_suffix(".started").write_text("started")
        while not gate.exists():
            time.sleep(0.05)

    if kind == "prepare":
        encode = shard_encode.encode_arrays
        def blocked(tokenizer, docs):
            wait()
            return encode(tokenizer, docs)
        shard_encode.encode_arrays = blocked
        shards.prepare_shards(source, "bytes", out, shard_chars=40_000, progress=False)
    else:
        model = GPTConfig(n_layer=1, n_head=2, d_model=32, train_len=32, layer_plan="alibi")
        config = TrainConfig(corpus=source, model=model, batch_size=2, steps=2, warmup=1, log_every=1)
        train(config, out, progress=False, on_step=lambda done: wait(), device="cpu")
    """
)


def _start_holder(tmp_path: Path, kind: str, source: str, out: Path) -> tuple[subprocess.Popen, Path]:
    """A process that takes `out`'s lock (a prepare, or a training run), then waits inside until the gate opens."""
    script = tmp_path / "holder.py"
    script.write_text(_HOLDER)
    gate = tmp_path / f"{kind}.gate"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "LEXTRA_DATA_CACHE": "off"}
    process = subprocess.Popen([sys.executable, str(script), kind, source, str(out), str(gate)], env=env)
    deadline = time.monotonic() + 120
    while not gate.with_suffix(".started").exists():
        assert process.poll() is None, "the holder ended early"
        assert time.monotonic() < deadline, "the holder never started"
        time.sleep(0.05)
    return process, gate


def test_a_second_prepare_into_the_same_out_is_refused_naming_the_first(tmp_path: Path, capsys) -> None:
    source = _write_corpus(tmp_path / "corpus")
    out = tmp_path / "prepared"
    first, gate = _start_holder(tmp_path, "prepare", source, out)
    try:
        argv = ["data", "prepare", source, "--tokenizer", "bytes", "--out", str(out), "--shard-chars", "40000"]
        assert main([*argv, "--quiet"]) == 2
        assert _one_line(capsys.readouterr().err, "lextra data: error: ") == (
            f"lextra data: error: the prepared folder {out} is being written by process {first.pid}, which holds "
            f"{out / LOCK_NAME}; wait for it to finish, or stop it and run again"
        )
    finally:
        gate.write_text("go")
        assert first.wait(timeout=120) == 0
    prepared = PreparedShards.open(out)  # the first prepare's folder, whole
    prepared.verify()
    assert (out / LOCK_NAME).read_text() == ""  # released
    assert main([*argv, "--quiet"]) == 0  # a finished folder: the same request is answered from it


def test_the_lock_of_a_killed_prepare_is_taken_over_and_said(tmp_path: Path, capsys) -> None:
    source = _write_corpus(tmp_path / "corpus")
    out = tmp_path / "prepared"
    first, _ = _start_holder(tmp_path, "prepare", source, out)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
    argv = ["data", "prepare", source, "--tokenizer", "bytes", "--out", str(out), "--shard-chars", "40000"]
    assert main([*argv, "--quiet"]) == 0
    err = capsys.readouterr().err
    assert err == (
        f"lextra: took over the lock {out / LOCK_NAME} of process {first.pid}, which ended without releasing it\n"
    )
    straight = tmp_path / "straight"
    prepare_shards(source, "bytes", straight, shard_chars=40_000, progress=False)
    assert (out / "manifest.json").read_bytes() == (straight / "manifest.json").read_bytes()


def test_a_second_writer_of_a_run_folder_is_refused(tmp_path: Path, capsys) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=10)
    out = tmp_path / "prepared"
    prepare_shards(source, "bytes", out, progress=False)
    run = tmp_path / "run"
    first, gate = _start_holder(tmp_path, "train", source, run)
    try:
        assert main([*_train_argv(run, out), "--resume"]) == 2
        assert _one_line(capsys.readouterr().err, "lextra train: error: ") == (
            f"lextra train: error: the run folder {run} is being written by process {first.pid}, which holds "
            f"{run / LOCK_NAME}; wait for it to finish, or stop it and run again"
        )
        from lextra.hf.finetune import FinetuneConfig, finetune

        with pytest.raises(LockedError, match=f"being written by process {first.pid}"):
            finetune(FinetuneConfig(model=str(tmp_path / "no-model"), train_len=8), run, progress=False)
    finally:
        gate.write_text("go")
        assert first.wait(timeout=120) == 0
    assert (run / "model").is_dir() and (run / LOCK_NAME).read_text() == ""


def test_a_lock_held_in_this_process_is_released_on_any_exit(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    with pytest.raises(KeyboardInterrupt), hold_lock(lock, "x"):
        assert lock.read_text() == f"{os.getpid()}\n"
        raise KeyboardInterrupt
    with hold_lock(lock, "x"):  # free again, and not stale: nothing is said
        pass
    assert lock.read_text() == ""


# ----------------------------------------------------------------------------- resume only what is the same
class _InterruptError(Exception):
    pass


def _interrupted(monkeypatch, source: str, out: Path, *, after: int = 1, **options) -> None:
    """Prepare `source` into `out` and stop it inside encode call `after + 1` (the shards before it finished)."""
    encode = encode_module.encode_arrays
    calls: list[int] = []

    def failing(tokenizer, docs):
        calls.append(1)
        if len(calls) > after:
            raise _InterruptError
        return encode(tokenizer, docs)

    monkeypatch.setattr(encode_module, "encode_arrays", failing)
    with pytest.raises(_InterruptError):
        prepare_shards(source, "bytes", out, progress=False, **options)
    monkeypatch.setattr(encode_module, "encode_arrays", encode)


def test_a_source_edited_between_an_interruption_and_the_resume_is_refused(tmp_path: Path, monkeypatch) -> None:
    source = _write_corpus(tmp_path / "corpus")
    out = tmp_path / "prepared"
    _interrupted(monkeypatch, source, out, shard_chars=40_000)
    edited = tmp_path / "corpus" / "doc001.txt"  # in the finished first shard; the same number of documents
    edited.write_text(edited.read_text().replace("fox", "cat", 1))
    with pytest.raises(DataError) as err:
        prepare_shards(source, "bytes", out, shard_chars=40_000, progress=False)
    assert str(err.value) == (
        f"the source {source!r} changed since {out} was started ({edited.resolve()} was modified), so its finished "
        f"shards are stale; delete {out} and prepare it again, or use another --out"
    )
    assert not (out / "manifest.json").exists() and (out / "shard-00000.json").exists()


def test_strict_fingerprints_whole_files(tmp_path: Path, monkeypatch) -> None:
    source = tmp_path / "corpus"
    _write_corpus(source, documents=12)
    big = source / "big.txt"
    big.write_text(("lorem ipsum " * 30_000) + "\n")  # its middle is beyond the quick fingerprint's two blocks
    stat = big.stat()

    def edit_the_middle() -> None:
        text = big.read_text()
        middle = len(text) // 2
        big.write_text(text[:middle] + "LOREM" + text[middle + 5 :])
        os.utime(big, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # as a copy that kept the time

    before = source_state(str(source))
    edit_the_middle()
    assert source_state(str(source)) == before  # size, mtime and both ends agree
    big.write_text(("lorem ipsum " * 30_000) + "\n")
    os.utime(big, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    out = tmp_path / "prepared"
    _interrupted(monkeypatch, str(source), out, shard_chars=40_000, strict=True)
    edit_the_middle()
    with pytest.raises(DataError, match=r"big.txt was modified\), so its finished shards are stale"):
        prepare_shards(str(source), "bytes", out, shard_chars=40_000, progress=False, strict=True)


def test_a_failed_prepare_leaves_nothing_in_the_way_of_the_corrected_command(tmp_path: Path, capsys) -> None:
    source = tmp_path / "corpus.jsonl"
    source.write_text("".join(json.dumps({"body": " ".join(WORDS[i:] + WORDS[:i])}) + "\n" for i in range(12)))
    out = tmp_path / "prepared"
    base = ["data", "prepare", str(source), "--out", str(out), "--quiet"]
    for wrong, message in (
        (["--tokenizer", "bytes"], "has no field 'text'"),  # the text is in `body`
        (["--tokenizer", "bpe:12x", "--text-field", "body"], "the vocab size must be an integer"),
        (["--tokenizer", "hf:" + str(tmp_path / "nowhere"), "--text-field", "body"], "does not exist"),
        (["--tokenizer", "bpe:300", "--text-field", "body", "--dtype", "uint8"], "does not fit in uint8"),
    ):
        assert main([*base, *wrong]) == 2
        assert message in _one_line(capsys.readouterr().err, "lextra data: error: ")
        assert not out.exists()
    missing = ["data", "prepare", str(tmp_path / "missing"), "--tokenizer", "bytes", "--out", str(out)]
    assert main(missing) == 2 and not out.exists()
    capsys.readouterr()
    out.mkdir()
    (out / "prepare.json").write_text("{}")  # an unfinished prepare of other settings, no shard finished yet
    assert main([*base, "--tokenizer", "bytes", "--text-field", "body"]) == 0
    assert PreparedShards.open(out).num_documents("train") > 0


def test_the_printed_resume_command_runs_as_printed(tmp_path: Path, monkeypatch, capsys) -> None:
    source = _write_corpus(tmp_path / "corpus")
    out = tmp_path / "prepared"
    options = {"shard_chars": 40_000, "sample_chars": 50_000, "limit_chars": 90_000}
    _interrupted(monkeypatch, source, out, **options)
    with pytest.raises(DataError) as err:
        PreparedShards.open(out)
    again = str(err.value).split("`")[1]
    assert again == (
        f"lextra data prepare {source} --tokenizer bytes --out {out} --limit-chars 90000 --shard-chars 40000 "
        "--sample-chars 50000"
    )
    monkeypatch.setattr(shards_module, "prepare_shards", _raise_interrupt)
    assert main([*shlex.split(again)[1:], "--quiet"]) == 130  # Ctrl-C: the same command is printed
    assert capsys.readouterr().err == f"lextra data: interrupted; run `{again}` to continue\n"
    monkeypatch.undo()
    monkeypatch.setenv("LEXTRA_CACHE", str(tmp_path / "cache"))
    assert main([*shlex.split(again)[1:], "--quiet"]) == 0
    straight = tmp_path / "straight"
    prepare_shards(source, "bytes", straight, progress=False, **options)
    assert (out / "manifest.json").read_bytes() == (straight / "manifest.json").read_bytes()


def _raise_interrupt(*args, **kwargs):
    raise KeyboardInterrupt


# ----------------------------------------------------------------------------- self-contained folders
def test_files_a_folder_source_skips_are_counted_and_named_and_strict_refuses_them(tmp_path: Path, capsys) -> None:
    source = tmp_path / "mixed"
    _write_corpus(source, documents=6)
    (source / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    (source / "image.bin").write_bytes(bytes(range(256)))
    out = tmp_path / "prepared"
    assert main(["data", "prepare", str(source), "--tokenizer", "bytes", "--out", str(out), "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == (
        f"  skipped 2 files, binary or not UTF-8 (--strict refuses them): {source / 'image.bin'}, "
        f"{source / 'latin1.txt'}"
    )
    assert PreparedShards.open(out).manifest["skipped"] == {
        "files": 2,
        "first": [str(source / "image.bin"), str(source / "latin1.txt")],
    }
    strict = tmp_path / "strict"
    argv = ["data", "prepare", str(source), "--tokenizer", "bytes", "--out", str(strict), "--strict", "--quiet"]
    assert main(argv) == 2
    assert _one_line(capsys.readouterr().err, "lextra data: error: ") == (
        f"lextra data: error: 2 files ({source / 'image.bin'}, {source / 'latin1.txt'}) of {source} are binary or "
        "not UTF-8 text (--strict); convert or remove them, or drop --strict to skip them"
    )
    assert not strict.exists()


def test_every_file_of_a_folder_gets_the_mode_the_umask_gives(tmp_path: Path) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=8)
    old = os.umask(0o027)
    try:
        out = tmp_path / "prepared"
        prepare_shards(source, "bytes", out, progress=False)
        PreparedShards.open(out)  # writes the stamp
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in out.iterdir()}
    assert {"manifest.json", "tokenizer.json", "train-00000.tokens", STAMP, LOCK_NAME} <= set(modes)
    assert set(modes.values()) == {0o640}, modes


def test_corpus_beside_data_is_refused_by_train(tmp_path: Path, capsys) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=8)
    prepare_shards(source, "bytes", tmp_path / "prepared", progress=False)
    assert main(_train_argv(tmp_path / "run", tmp_path / "prepared", "--corpus", "english")) == 2
    assert _one_line(capsys.readouterr().err, "lextra train: error: ") == (
        "lextra train: error: --data replaces --corpus and --limit-chars (the folder holds its corpus); drop one"
    )
    assert not (tmp_path / "run").exists()


def _tiny_hf_tokenizer(folder: Path) -> Path:
    from transformers import PreTrainedTokenizerFast

    from lextra.data import Document
    from lextra.data import tokenizers as tokenizers_module

    docs = [Document(f"d{i}", " ".join(WORDS[i:] + WORDS[:i])) for i in range(len(WORDS))]
    backend = tokenizers_module._train_bpe_backend(docs, 300)
    PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>").save_pretrained(folder)
    (folder / "model.safetensors").write_bytes(b"weights are not copied")
    return folder


def test_a_hugging_face_tokenizer_is_copied_into_the_folder_and_checked(tmp_path: Path) -> None:
    original = _tiny_hf_tokenizer(tmp_path / "hf")
    source = _write_corpus(tmp_path / "corpus", documents=10)
    out = tmp_path / "prepared"
    prepare_shards(source, f"hf:{original}", out, progress=False)
    prepared = PreparedShards.open(out)
    copied = prepared.manifest["tokenizer"]["files"]
    assert "tokenizer.json" in copied and "model.safetensors" not in copied
    text = "the quick brown fox"
    before = prepared.tokenizer().encode(text)
    assert prepared.tokenizer().to_config() == {"kind": "hf", "path": str(original.resolve())}
    config = json.loads((original / "tokenizer.json").read_text())
    vocab = config["model"]["vocab"]
    first, second = sorted(vocab, key=vocab.get)[1:3]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (original / "tokenizer.json").write_text(json.dumps(config))  # the original edited after preparing
    assert PreparedShards.open(out).tokenizer().encode(text) == before
    (out / "tokenizer" / "tokenizer.json").write_text(json.dumps(config))  # the copy edited
    with pytest.raises(DataError, match=r"prepared file .*tokenizer/tokenizer.json is corrupt"):
        PreparedShards.open(out)


def test_an_edited_tokenizer_stops_a_resumed_prepare(tmp_path: Path, monkeypatch) -> None:
    original = _tiny_hf_tokenizer(tmp_path / "hf")
    source = _write_corpus(tmp_path / "corpus")
    out = tmp_path / "prepared"
    encode = encode_module.encode_arrays
    calls: list[int] = []

    def failing(tokenizer, docs):
        calls.append(1)
        if len(calls) > 1:
            raise _InterruptError
        return encode(tokenizer, docs)

    monkeypatch.setattr(encode_module, "encode_arrays", failing)
    with pytest.raises(_InterruptError):
        prepare_shards(source, f"hf:{original}", out, shard_chars=40_000, progress=False)
    monkeypatch.setattr(encode_module, "encode_arrays", encode)
    settings = json.loads((original / "tokenizer_config.json").read_text())
    (original / "tokenizer_config.json").write_text(json.dumps({**settings, "model_max_length": 77}))
    with pytest.raises(DataError) as err:
        prepare_shards(source, f"hf:{original}", out, shard_chars=40_000, progress=False)
    assert str(err.value) == (
        f"the tokenizer {original.resolve()} changed since {out} was started (tokenizer_config.json was "
        f"modified); delete {out} and prepare it again, or use another --out"
    )


# ----------------------------------------------------------------------------- workers
def test_workers_write_the_same_bytes_as_one_process(tmp_path: Path, capsys) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=30)
    argv = ["data", "prepare", source, "--tokenizer", "bytes", "--shard-chars", "30000", "--quiet"]
    assert main([*argv, "--out", str(tmp_path / "one")]) == 0
    assert main([*argv, "--out", str(tmp_path / "three"), "--workers", "3"]) == 0
    one = sorted(p.name for p in (tmp_path / "one").iterdir() if p.name not in (STAMP, LOCK_NAME))
    assert one == sorted(p.name for p in (tmp_path / "three").iterdir() if p.name not in (STAMP, LOCK_NAME))
    assert len([n for n in one if n.endswith(".tokens")]) >= 6
    for name in one:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "three" / name).read_bytes(), name
    assert main([*argv, "--out", str(tmp_path / "none"), "--workers", "0"]) == 2
    assert not (tmp_path / "none").exists()


def test_a_models_corrupt_training_folder_is_named_when_evaluation_falls_back_to_the_raw_corpus(
    tmp_path: Path, capsys
) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=10)
    out = tmp_path / "prepared"
    prepare_shards(source, "bytes", out, progress=False)
    meta = {"data": {"path": str(out), "manifest_sha256": PreparedShards.open(out).sha256}}
    assert shards_module.shards_for_model(meta) is not None
    capsys.readouterr()
    name = json.loads((out / "manifest.json").read_text())["splits"]["validation"]["shards"][0]["files"]["tokens"]
    data = bytearray((out / name["name"]).read_bytes())
    data[0] ^= 1
    (out / name["name"]).write_bytes(bytes(data))
    forget_verified()
    assert shards_module.shards_for_model(meta) is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not reading the model's prepared folder" in err and "corrupt" in err, err
