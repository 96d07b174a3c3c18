"""Prepared token shards: the same splits, tokenizer, windows and evaluation documents as the raw corpus, files
that are never half-read, an interrupted prepare that continues, and one clear error for each bad input."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from lextra.cli import main
from lextra.data import (
    Document,
    PreparedShards,
    TrainStream,
    encode_documents,
    eval_sequences,
    iter_documents,
    load_corpus,
    prepare_data,
    prepare_shards,
    split_corpus,
    split_overrides,
)
from lextra.data import shards as shards_module
from lextra.data.shards import cache as cache_module
from lextra.data.shards import token_dtype
from lextra.data.shards import writer as encode_module
from lextra.data.shards import writer as writer_module
from lextra.errors import ConfigError, DataError
from lextra.io import sha256_file
from lextra.model import GPTConfig, load_model
from lextra.train import TrainConfig, train

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "seven",
    "wizards",
    "quietly",
    "hex",
    "jovial",
    "kings",
]


@pytest.fixture(autouse=True)
def _tokenizer_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Trained BPE tokenizers go to this test's folder."""
    monkeypatch.setenv("LEXTRA_CACHE", str(tmp_path / "cache"))


def _write_corpus(root: Path, documents: int = 60, seed: int = 0, prefix: str = "doc") -> str:
    """A directory of `documents` text files of 200-1500 words each (some non-ASCII), enough for all splits."""
    rng = random.Random(seed)
    root.mkdir(parents=True)
    for index in range(documents):
        words = [rng.choice(WORDS) for _ in range(rng.randint(200, 1500))]
        if index % 7 == 0:
            words.append("caf\u00e9 \u00fcber \U0001f600")
        (root / f"{prefix}{index:03d}.txt").write_text(" ".join(words) + "\n", encoding="utf-8")
    (root / "empty.txt").write_text("  \n", encoding="utf-8")  # dropped, as by load_corpus
    return str(root)


def _raw(source: str, tokenizer: str, limit_chars: int | None = None):
    """What a run on the raw corpus reads: the prepared data and its training stream."""
    data = prepare_data(source, tokenizer, limit_chars)
    return data, TrainStream.from_documents(data.splits["train"], data.tokenizer)


@pytest.mark.parametrize(
    ("tokenizer", "shard_chars", "dtype"),
    [("bytes", 10**9, "uint8"), ("bytes", 20_000, "uint8"), ("bpe:300", 30_000, "uint16")],
)
def test_batches_equal_the_raw_training_stream_bit_for_bit(
    tmp_path: Path, tokenizer: str, shard_chars: int, dtype: str
) -> None:
    source = _write_corpus(tmp_path / "corpus")
    prepare_shards(source, tokenizer, tmp_path / "prepared", shard_chars=shard_chars, progress=False)
    prepared = PreparedShards.open(tmp_path / "prepared")
    data, stream = _raw(source, tokenizer)
    assert prepared.manifest["dtype"] == dtype
    assert prepared.tokenizer().to_config() == data.tokenizer.to_config()
    shard_count = len(prepared.manifest["splits"]["train"]["shards"])
    assert (shard_count == 1) == (shard_chars == 10**9)
    assert len(prepared) == len(stream)
    whole = prepared.span("train", 0, len(prepared)).astype(np.int64)
    assert torch.equal(torch.from_numpy(whole), stream.tokens.long())  # windows across shard files included
    for step in (0, 1, 7, 123):
        for rank, world in ((0, 1), (0, 2), (1, 2)):
            expected = stream.batch(step, 6, 97, seed=5, rank=rank, world_size=world)
            got = prepared.batch(step, 6, 97, seed=5, rank=rank, world_size=world)
            assert got.dtype == torch.long and torch.equal(got, expected), (step, rank)


def test_splits_and_evaluation_documents_equal_the_raw_ones(tmp_path: Path) -> None:
    source = _write_corpus(tmp_path / "corpus")
    prepare_shards(source, "bytes", tmp_path / "prepared", shard_chars=25_000, progress=False)
    prepared = PreparedShards.open(tmp_path / "prepared")
    data, _ = _raw(source, "bytes")
    for split in ("train", "validation", "test"):
        raw = encode_documents(data.splits[split], data.tokenizer)
        got = prepared.documents(split)
        assert prepared.num_documents(split) == len(raw) == len(got) > 0, split
        assert all(torch.equal(a, b.long()) for a, b in zip(raw, got, strict=True)), split
    raw_test = encode_documents(data.splits["test"], data.tokenizer)
    assert [t.numel() for t in prepared.documents("test", limit=2)] == [t.numel() for t in raw_test[:2]]
    view = prepared.documents("test")[0]
    original = view.clone()
    view.zero_()  # a view of the copy-on-write map: this process's copy changes, the file does not
    assert torch.equal(PreparedShards.open(tmp_path / "prepared").documents("test")[0], original)
    prepared.verify()
    prepared = PreparedShards.open(tmp_path / "prepared")
    raw_train = encode_documents(data.splits["train"], data.tokenizer)
    longest = max(t.numel() for t in raw_train)
    for length, stitch in ((64, False), (longest, True)):  # whole-document windows, then stitched ones
        expected, stitched = eval_sequences(raw_train, length, 3, separator=10)
        got, got_stitched = eval_sequences(prepared.documents("train"), length, 3, separator=10)
        assert got_stitched == stitched == stitch
        assert len(got) == len(expected) == 3 and all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))
    manifest = prepared.manifest
    assert manifest["source_documents"] == len(load_corpus(source))
    assert manifest["chars"] == sum(len(d.text) for d in load_corpus(source))
    for split in ("train", "validation", "test"):
        assert manifest["splits"][split]["documents"] == len(data.splits[split])


def test_tiny_corpora_split_as_in_memory(tmp_path: Path) -> None:
    """The documents `split_corpus` moves to fill an empty split are found from the ids alone."""
    cases = {("t", 3): 1, ("t", 5): 1, ("c", 4): 2}  # a validation donor, a train donor, two moves
    for (prefix, count), moves in cases.items():
        docs = [Document(f"{prefix}{i}.txt", f"text {i} " * 50) for i in range(count)]
        parts = split_corpus(docs)
        moved = split_overrides(d.id for d in docs)
        assert len(moved) == moves
        for name, part in parts.items():
            for doc in part:
                assert moved.get(doc.id, name) == name
        root = tmp_path / f"tiny{prefix}{count}"
        root.mkdir()
        for doc in docs:
            (root / doc.id).write_text(doc.text)
        # one document per shard: the moves still apply across shards
        prepare_shards(str(root), "bytes", tmp_path / f"p{prefix}{count}", shard_chars=1, progress=False)
        prepared = PreparedShards.open(tmp_path / f"p{prefix}{count}")
        data, stream = _raw(str(root), "bytes")
        assert {s: prepared.num_documents(s) for s in parts} == {s: len(p) for s, p in data.splits.items()}
        assert torch.equal(
            torch.from_numpy(prepared.span("train", 0, len(prepared)).astype(np.int64)), stream.tokens.long()
        )


def test_bpe_is_trained_on_a_bounded_sample_of_the_train_split(tmp_path: Path, monkeypatch) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=30)
    seen: list[list[str]] = []
    build = writer_module.build_tokenizer

    def spy(spec, docs, *args, **kwargs):
        seen.append([d.id for d in docs])
        return build(spec, docs, *args, **kwargs)

    monkeypatch.setattr(writer_module, "build_tokenizer", spy)
    prepare_shards(source, "bpe:300", tmp_path / "whole", progress=False)
    train = split_corpus(load_corpus(source))["train"]
    assert seen[0] == [d.id for d in train]  # the whole train split when it fits: prepare_data's tokenizer
    prepare_shards(source, "bpe:300", tmp_path / "sampled", sample_chars=20_000, progress=False)
    taken, total = [], 0
    for doc in train:  # leading train documents until the sample reaches 20000 characters, the last one whole
        if total >= 20_000:
            break
        taken.append(doc.id)
        total += len(doc.text)
    assert seen[1] == taken and 1 < len(taken) < len(train)


def test_dtype_follows_the_vocabulary_and_refuses_one_that_does_not_fit(tmp_path: Path) -> None:
    assert [token_dtype(v) for v in (256, 257, 65536, 65537, 2**32)] == [
        "uint8",
        "uint16",
        "uint16",
        "uint32",
        "uint32",
    ]
    with pytest.raises(DataError) as err:
        token_dtype(2**32 + 1)
    assert str(err.value) == "a vocabulary of 4294967297 ids does not fit in uint32; use a smaller tokenizer"
    with pytest.raises(DataError) as err:
        token_dtype(300, "uint8")
    assert str(err.value) == (
        "a vocabulary of 300 ids does not fit in uint8 (ids up to 255); use --dtype auto or a larger dtype"
    )
    source = _write_corpus(tmp_path / "corpus", documents=10)
    with pytest.raises(DataError, match="does not fit in uint8"):
        prepare_shards(source, "bpe:300", tmp_path / "small", dtype="uint8", progress=False)
    prepare_shards(source, "bytes", tmp_path / "wide", dtype="uint32", progress=False)
    wide = PreparedShards.open(tmp_path / "wide")
    assert wide.manifest["dtype"] == "uint32" and wide._parts["train"][0].tokens.dtype == np.uint32
    narrow_dir = tmp_path / "narrow"
    prepare_shards(source, "bytes", narrow_dir, progress=False)
    narrow = PreparedShards.open(narrow_dir)
    assert torch.equal(wide.batch(3, 4, 50, seed=1), narrow.batch(3, 4, 50, seed=1))


class _InterruptError(Exception):
    pass


def test_an_interrupted_prepare_continues_with_its_finished_shards(tmp_path: Path, monkeypatch) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=40)
    prepare_shards(source, "bytes", tmp_path / "straight", shard_chars=30_000, progress=False)
    straight = PreparedShards.open(tmp_path / "straight")
    shard_count = len(list((tmp_path / "straight").glob("shard-*.json")))
    assert shard_count >= 4

    encode = encode_module.encode_arrays
    calls: list[int] = []

    def failing(tokenizer, docs):
        calls.append(len(docs))
        if len(calls) == 3:  # inside the third shard (one encode batch per shard here)
            raise _InterruptError
        return encode(tokenizer, docs)

    monkeypatch.setattr(encode_module, "encode_arrays", failing)
    out = tmp_path / "cut"
    with pytest.raises(_InterruptError):
        prepare_shards(source, "bytes", out, shard_chars=30_000, progress=False)
    assert sorted(p.name for p in out.glob("shard-*.json")) == ["shard-00000.json", "shard-00001.json"]
    assert not list(out.glob("*.partial")) and not (out / "manifest.json").exists()
    with pytest.raises(DataError) as err:
        PreparedShards.open(out)
    assert str(err.value) == (
        f"{out} holds an unfinished prepare (no manifest.json); run "
        f"`lextra data prepare {source} --tokenizer bytes --out {out} --shard-chars 30000` again to finish it"
    )
    # a half-written file left by a killed process is dropped, not read
    (out / "train-00002.tokens.partial").write_bytes(b"\x01\x02")
    (out / "train-00002.tokens").write_bytes(b"\x01\x02")
    calls.clear()
    monkeypatch.setattr(
        encode_module, "encode_arrays", lambda tok, docs: (calls.append(len(docs)), encode(tok, docs))[1]
    )
    prepare_shards(source, "bytes", out, shard_chars=30_000, progress=False)
    assert len(calls) == shard_count - 2  # the two finished shards were kept
    resumed = PreparedShards.open(out)
    assert resumed.sha256 == straight.sha256
    assert (out / "manifest.json").read_bytes() == (tmp_path / "straight" / "manifest.json").read_bytes()
    assert not list(out.glob("*.partial"))
    resumed.verify()
    assert prepare_shards(source, "bytes", out, shard_chars=30_000, progress=False) == out / "manifest.json"


def test_a_missing_or_corrupt_shard_is_refused_in_one_line(tmp_path: Path) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=20)
    out = tmp_path / "prepared"
    prepare_shards(source, "bytes", out, progress=False)
    manifest = json.loads((out / "manifest.json").read_text())
    entry = manifest["splits"]["train"]["shards"][0]["files"]["tokens"]
    assert (
        entry["sha256"] == sha256_file(out / entry["name"]) and entry["bytes"] == (out / entry["name"]).stat().st_size
    )
    PreparedShards.open(out).verify()
    data = bytearray((out / entry["name"]).read_bytes())
    data[100] ^= 1
    (out / entry["name"]).write_bytes(bytes(data))
    again = f"lextra data prepare {source} --tokenizer bytes --out {out}"
    with pytest.raises(DataError) as err:  # sizes agree: the checksum on open sees the flipped bit
        PreparedShards.open(out)
    assert str(err.value) == (
        f"prepared file {out / entry['name']} is corrupt (xxh3_128 checksum mismatch); copy the folder again from "
        f"where it came from, or run `{again}` into a new folder"
    )
    prepared = PreparedShards.open(out, check=False)
    with pytest.raises(DataError) as err:
        prepared.verify()
    assert str(err.value) == (
        f"prepared file {out / entry['name']} is missing or corrupt (sha256 mismatch); run `{again}` into a new folder"
    )
    (out / entry["name"]).write_bytes(bytes(data[:-3]))
    with pytest.raises(DataError) as err:
        PreparedShards.open(out)
    assert str(err.value) == (
        f"prepared shard {out / entry['name']} is {len(data) - 3} bytes, expected {len(data)}; "
        f"run `{again}` into a new folder"
    )
    (out / entry["name"]).unlink()
    with pytest.raises(DataError, match="is missing; run"):
        PreparedShards.open(out)


def test_bad_sources_and_folders_are_refused_in_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "blank.txt").write_text("   \n")
    with pytest.raises(DataError, match=r"has no non-empty documents; point it at UTF-8 text"):
        prepare_shards(str(empty), "bytes", tmp_path / "out-empty", progress=False)
    with pytest.raises(DataError) as err:
        PreparedShards.open(tmp_path / "nowhere")
    assert str(err.value) == (
        f"{tmp_path / 'nowhere'} is not a prepared data folder (no manifest.json); "
        "make one with `lextra data prepare SOURCE --tokenizer SPEC --out DIR`"
    )
    source = _write_corpus(tmp_path / "corpus", documents=10)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match="is not empty and holds no prepared data; give an empty or new --out"):
        prepare_shards(source, "bytes", busy, progress=False)
    prepare_shards(source, "bytes", tmp_path / "done", progress=False)
    with pytest.raises(DataError, match="already holds other prepared data; use another --out"):
        prepare_shards(source, "bpe:300", tmp_path / "done", progress=False)
    prepared = PreparedShards.open(tmp_path / "done")
    with pytest.raises(DataError) as err:
        prepared.check_tokenizer("bpe:300")
    assert str(err.value) == (
        f"the prepared data {tmp_path / 'done'} was tokenized with bytes, the run asks for bpe:300; "
        "pass --tokenizer bytes, or prepare the source again with --tokenizer bpe:300"
    )
    with pytest.raises(DataError, match="fewer than training length"):
        prepared.batch(0, 2, 10**7, seed=0)
    prepared.check_tokenizer(" bytes ")
    prepare_shards(source, "bpe", tmp_path / "bpe", progress=False)
    PreparedShards.open(tmp_path / "bpe").check_tokenizer("bpe:8192")  # `bpe` is `bpe:8192`


def test_iter_documents_streams_what_load_corpus_returns(tmp_path: Path) -> None:
    a = _write_corpus(tmp_path / "a", documents=5)
    b = _write_corpus(tmp_path / "b", documents=5, seed=1, prefix="other")
    for spec, limit in ((a, None), (a, 3_000), (f"{a}+{b}", None), (f"{a}+{b}", 9_000)):
        assert list(iter_documents(spec, limit_chars=limit)) == load_corpus(spec, limit_chars=limit)


def _tiny_run(source: str, steps: int = 6, **kwargs) -> TrainConfig:
    model = GPTConfig(n_layer=1, n_head=2, d_model=32, train_len=32, layer_plan="alibi")
    return TrainConfig(
        corpus=source, model=model, batch_size=4, steps=steps, warmup=2, checkpoint_every=3, log_every=2, **kwargs
    )


def test_training_on_a_prepared_folder_equals_training_on_the_raw_corpus(tmp_path: Path, monkeypatch) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=30)
    prepare_shards(source, "bytes", tmp_path / "prepared", shard_chars=20_000, progress=False)
    monkeypatch.setenv(shards_module.DATA_CACHE_ENV, "off")  # the raw corpus, read into memory
    raw = load_model(train(_tiny_run(source, eval_sequences=2), tmp_path / "raw", progress=False))
    monkeypatch.delenv(shards_module.DATA_CACHE_ENV)
    # --corpus is not read with --data: the manifest's source is recorded instead
    config = _tiny_run("python-code", eval_sequences=2, data=str(tmp_path / "prepared"))
    prepared = load_model(train(config, tmp_path / "run", progress=False))
    for (name, a), (_, b) in zip(raw.state_dict().items(), prepared.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    metrics = [(tmp_path / run / "metrics.jsonl").read_text().splitlines() for run in ("raw", "run")]
    losses = [[(r["step"], r["loss"], r.get("val_loss")) for r in map(json.loads, lines)] for lines in metrics]
    assert losses[0] == losses[1] and losses[0][-1][2] is not None
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["data"] == {
        "path": str(tmp_path / "prepared"),
        "manifest_sha256": PreparedShards.open(tmp_path / "prepared").sha256,
    }
    assert saved["train"]["corpus"] == source and saved["train"]["data"] == str(tmp_path / "prepared")


class _StopError(Exception):
    pass


def _stop_at(step: int):
    def hook(done: int) -> None:
        if done == step:
            raise _StopError

    return hook


def test_resume_needs_the_same_prepared_data(tmp_path: Path, monkeypatch) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=30)
    prepare_shards(source, "bytes", tmp_path / "a", progress=False)
    prepare_shards(source, "bytes", tmp_path / "b", limit_chars=50_000, progress=False)
    run = tmp_path / "run"
    with pytest.raises(_StopError):
        train(_tiny_run(source, data=str(tmp_path / "a")), run, progress=False, on_step=_stop_at(4))
    first = PreparedShards.open(tmp_path / "a").sha256
    other = PreparedShards.open(tmp_path / "b").sha256
    with pytest.raises(ConfigError) as err:
        train(_tiny_run(source, data=str(tmp_path / "b")), run, resume=True, progress=False)
    assert str(err.value) == (
        f"cannot resume {run}: it was trained on prepared data with manifest sha256 {first[:12]}, "
        f"{tmp_path / 'b'} has manifest sha256 {other[:12]}; resume with the data it used"
    )
    cache = tmp_path / "data-cache"
    monkeypatch.setenv(shards_module.DATA_CACHE_ENV, str(cache))
    entry = cache / shards_module.cache_key(source, "bytes", None)
    with pytest.raises(ConfigError) as err:
        train(_tiny_run(source), run, resume=True, progress=False)
    assert str(err.value) == (
        f"cannot resume {run}: it was trained on prepared data with manifest sha256 {first[:12]}, no --data given "
        f"(the corpus' cache entry {entry} has manifest sha256 {PreparedShards.open(entry).sha256[:12]}); "
        "resume with the data it used"
    )
    monkeypatch.setenv(shards_module.DATA_CACHE_ENV, "off")
    with pytest.raises(ConfigError) as err:
        train(_tiny_run(source), run, resume=True, progress=False)
    assert str(err.value) == (
        f"cannot resume {run}: it was trained on prepared data with manifest sha256 {first[:12]}, no --data given; "
        "resume with the data it used"
    )
    shutil.copytree(tmp_path / "a", tmp_path / "moved")  # the same data in another folder resumes
    resumed = load_model(train(_tiny_run(source, data=str(tmp_path / "moved")), run, resume=True, progress=False))
    whole = load_model(train(_tiny_run(source), tmp_path / "whole", progress=False))
    for (name, a), (_, b) in zip(whole.state_dict().items(), resumed.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_cli_prepares_verifies_and_trains_with_one_line_errors(tmp_path: Path, capsys) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=20)
    out = tmp_path / "prepared"
    assert main(["data", "prepare", source, "--tokenizer", "bytes", "--out", str(out), "--quiet"]) == 0
    prepared = PreparedShards.open(out)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == f"{out}: bytes, uint8, manifest {prepared.sha256[:12]}"
    assert printed[1] == (
        f"  train: {prepared.num_documents('train'):,} documents, {prepared.num_tokens('train'):,} tokens"
    )
    assert main(["data", "verify", str(out)]) == 0
    assert capsys.readouterr().out.splitlines() == printed
    argv = ["train", "--out", str(tmp_path / "run"), "--data", str(out), "--steps", "2", "--layers", "1"]
    argv += ["--width", "32", "--heads", "2", "--train-len", "32", "--batch-size", "2"]
    assert main([*argv, "--tokenizer", "bpe:300"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"lextra train: error: the prepared data {out} was tokenized with bytes, the run asks for bpe:300; "
        "pass --tokenizer bytes, or prepare the source again with --tokenizer bpe:300"
    )
    assert main(argv) == 0
    assert json.loads((tmp_path / "run" / "config.json").read_text())["data"]["manifest_sha256"] == prepared.sha256
    capsys.readouterr()
    name = prepared.manifest["splits"]["train"]["shards"][0]["files"]["tokens"]["name"]
    data = bytearray((out / name).read_bytes())
    data[0] ^= 1
    (out / name).write_bytes(bytes(data))
    assert main(["data", "verify", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"lextra data: error: prepared file {out / name} is missing or")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["data", "prepare", str(empty), "--tokenizer", "bytes", "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no non-empty documents" in err


def test_a_source_that_changes_under_a_resumed_prepare_is_refused(tmp_path: Path, monkeypatch) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=20)
    encode = encode_module.encode_arrays
    calls: list[int] = []

    def failing(tokenizer, docs):
        calls.append(len(docs))
        if len(calls) == 2:
            raise _InterruptError
        return encode(tokenizer, docs)

    monkeypatch.setattr(encode_module, "encode_arrays", failing)
    out = tmp_path / "prepared"
    with pytest.raises(_InterruptError):
        prepare_shards(source, "bytes", out, shard_chars=30_000, progress=False)
    monkeypatch.setattr(encode_module, "encode_arrays", encode)
    (tmp_path / "corpus" / "zzz-added.txt").write_text("a document added after the first read\n")
    with pytest.raises(DataError) as err:
        prepare_shards(source, "bytes", out, shard_chars=30_000, progress=False)
    assert str(err.value) == (
        f"the source {source!r} changed since {out} was started ({Path(source).resolve()}/zzz-added.txt was "
        f"added), so its finished shards are stale; delete {out} and prepare it again, or use another --out"
    )
    assert not (out / "manifest.json").exists()


def test_the_progress_bar_counts_documents_and_tokens_per_second(tmp_path: Path, capsys) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=12)
    prepare_shards(source, "bytes", tmp_path / "prepared", progress=True)
    err = capsys.readouterr().err
    assert f"scan {source}: 12doc " in err
    assert f"prepare {source}" in err and "12/12" in err and "doc" in err and "tok_s=" in err


# ----------------------------------------------------------------------------- the data cache of corpus specs
def _weights_and_losses(model_dir: Path, run_dir: Path) -> tuple[dict[str, torch.Tensor], list[tuple]]:
    """A run's final weights and its logged (step, loss, validation loss)."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    losses = [(r["step"], r["loss"], r.get("val_loss")) for r in map(json.loads, lines)]
    return load_model(model_dir).state_dict(), losses


@pytest.mark.parametrize("tokenizer", ["bytes", "bpe:300"])
def test_a_corpus_spec_is_prepared_once_into_the_cache_and_trains_as_the_raw_corpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tokenizer: str
) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=30)
    monkeypatch.setenv(shards_module.DATA_CACHE_ENV, "off")
    config = _tiny_run(source, eval_sequences=2, tokenizer=tokenizer, limit_chars=120_000)
    raw = _weights_and_losses(train(config, tmp_path / "raw", progress=False), tmp_path / "raw")
    cache = tmp_path / "data-cache"
    monkeypatch.setenv(shards_module.DATA_CACHE_ENV, str(cache))
    config = _tiny_run(source, eval_sequences=2, tokenizer=tokenizer, limit_chars=120_000)
    first = _weights_and_losses(train(config, tmp_path / "first", progress=False), tmp_path / "first")
    entry = cache / shards_module.cache_key(source, tokenizer, 120_000)
    assert sorted(p.name for p in cache.iterdir()) == sorted([entry.name, entry.name + ".lock"])
    prepared = PreparedShards.open(entry)
    assert prepared.manifest["source"] == source and prepared.manifest["limit_chars"] == 120_000
    assert prepared.tokenizer_spec == tokenizer
    # the second run maps the entry: nothing is prepared again
    monkeypatch.setattr(cache_module, "prepare_shards", lambda *args, **kwargs: pytest.fail("prepared again"))
    config = _tiny_run(source, eval_sequences=2, tokenizer=tokenizer, limit_chars=120_000)
    second = _weights_and_losses(train(config, tmp_path / "second", progress=False), tmp_path / "second")
    for run in (first, second):
        assert run[1] == raw[1] and run[1][-1][2] is not None
        for (name, a), (_, b) in zip(raw[0].items(), run[0].items(), strict=True):
            assert torch.equal(a, b), name
    saved = json.loads((tmp_path / "second" / "config.json").read_text())
    assert saved["data"] == {"path": str(entry), "manifest_sha256": prepared.sha256, "cache": True}
    assert "data" not in saved["train"] and saved["train"]["corpus"] == source  # no --data given
    assert "data" not in json.loads((tmp_path / "raw" / "config.json").read_text())


def test_the_cache_key_follows_the_source_files_limit_and_tokenizer(tmp_path: Path) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=5)
    key = shards_module.cache_key(source, "bpe", None)
    assert key == shards_module.cache_key(source, "bpe:8192", None)  # the default vocabulary spelled out
    slug, digest = key.rsplit("-", 1)
    assert slug.endswith("corpus-bpe-8192") and len(slug) <= 60 and len(digest) == 16
    others = {
        shards_module.cache_key(source, "bpe:300", None),
        shards_module.cache_key(source, "bpe", 1000),
        shards_module.cache_key(source, "bpe", None, text_field="body"),
    }
    assert key not in others and len(others) == 3
    (tmp_path / "corpus" / "doc001.txt").write_text("changed\n", encoding="utf-8")
    changed = shards_module.cache_key(source, "bpe", None)
    assert changed != key
    assert changed == shards_module.cache_key(source, "bpe", None)  # reading does not change it
    (tmp_path / "corpus" / "new.txt").write_text("another document\n", encoding="utf-8")
    assert shards_module.cache_key(source, "bpe", None) != changed


def test_the_data_cache_folder_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(shards_module.DATA_CACHE_ENV, str(tmp_path / "here"))
    assert shards_module.data_cache_dir() == tmp_path / "here"
    monkeypatch.setenv(shards_module.DATA_CACHE_ENV, "OFF")
    assert shards_module.data_cache_dir() is None
    with pytest.raises(DataError, match=r"^the data cache is off \(\$LEXTRA_DATA_CACHE=off\); unset it"):
        shards_module.cached_shards(str(tmp_path), "bytes")
    monkeypatch.delenv(shards_module.DATA_CACHE_ENV)
    monkeypatch.setenv("LEXTRA_CACHE", str(tmp_path / "lextra"))
    assert shards_module.data_cache_dir() == tmp_path / "lextra" / "data"


def test_a_bad_source_leaves_no_cache_entry(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        shards_module.cached_shards(str(tmp_path / "missing"), "bytes", cache_dir=tmp_path / "data-cache")
    assert not (tmp_path / "data-cache").exists()


def test_a_run_on_the_raw_corpus_resumes_on_its_cache_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=30)
    run = tmp_path / "run"
    monkeypatch.setenv(shards_module.DATA_CACHE_ENV, "off")
    with pytest.raises(_StopError):
        train(_tiny_run(source), run, progress=False, on_step=_stop_at(4))
    whole = load_model(train(_tiny_run(source), tmp_path / "whole", progress=False))
    monkeypatch.setenv(shards_module.DATA_CACHE_ENV, str(tmp_path / "data-cache"))
    resumed = load_model(train(_tiny_run(source), run, resume=True, progress=False))
    for (name, a), (_, b) in zip(whole.state_dict().items(), resumed.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_a_process_waits_for_another_preparing_the_same_entry(tmp_path: Path) -> None:
    import fcntl

    source = _write_corpus(tmp_path / "corpus", documents=5)
    cache = tmp_path / "data-cache"
    cache.mkdir()
    entry = cache / shards_module.cache_key(source, "bytes", None)
    lock = entry.with_name(entry.name + ".lock")
    with open(lock, "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process preparing the entry
        with pytest.raises(DataError) as err:
            shards_module.cached_shards(source, "bytes", cache_dir=cache, progress=False, wait_s=0.3)
        assert str(err.value) == (
            f"the data cache entry {entry} is being written by another process (waited 0 s), which holds {lock}; "
            "wait for it to finish, or stop it and run again"
        )
        fcntl.flock(held, fcntl.LOCK_UN)
    assert not entry.exists()
    shards = shards_module.cached_shards(source, "bytes", cache_dir=cache, progress=False)
    assert shards.root == entry and len(shards) == len(_raw(source, "bytes")[1])


def test_a_damaged_cache_entry_is_refused_in_one_line(tmp_path: Path) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=5)
    shards = shards_module.cached_shards(source, "bytes", cache_dir=tmp_path / "data-cache", progress=False)
    (shards.root / "train-00000.tokens").unlink()
    with pytest.raises(DataError) as err:
        shards_module.cached_shards(source, "bytes", cache_dir=tmp_path / "data-cache", progress=False)
    message = str(err.value)
    assert message.startswith(f"the data cache entry {shards.root} is damaged (prepared shard ")
    assert message.endswith(f"); delete {shards.root} and run again") and "\n" not in message


def _eval(model_dir: Path, out: Path, *extra: str) -> int:
    """`lextra eval` of a tiny model at two lengths on two documents."""
    argv = ["eval", str(model_dir), "--out", str(out), "--lengths", "32,64", "--documents", "2", "--split", "test"]
    return main([*argv, *extra])


def test_eval_reads_the_prepared_split_of_the_model_without_re_tokenizing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=30)
    monkeypatch.setenv(shards_module.DATA_CACHE_ENV, str(tmp_path / "data-cache"))
    model_dir = train(_tiny_run(source), tmp_path / "run", progress=False)
    entry = PreparedShards.open(json.loads((tmp_path / "run" / "config.json").read_text())["data"]["path"])
    assert _eval(model_dir, tmp_path / "raw", "--corpus", source) == 0  # the raw corpus, tokenized now
    raw = json.loads((tmp_path / "raw" / "results.json").read_text())
    raw.pop("rerun")  # its arguments name how the data was given; the numbers and the rest must be the same
    prepared = tmp_path / "prepared"
    prepare_shards(source, "bytes", prepared, shard_chars=20_000, progress=False)
    import lextra.data

    monkeypatch.setattr(lextra.data, "prepare_for_model", lambda *args, **kwargs: pytest.fail("re-tokenized"))
    for out, extra, folder in (("cached", (), entry), ("given", ("--data", str(prepared)), None)):
        assert _eval(model_dir, tmp_path / out, *extra) == 0
        got = json.loads((tmp_path / out / "results.json").read_text())
        opened = folder or PreparedShards.open(prepared)
        assert got.pop("data") == {"path": str(opened.root), "manifest_sha256": opened.sha256}
        assert got.pop("rerun")["arguments"]["data"] == (None if folder else str(prepared))
        assert got == raw and got["corpus"] == source
    capsys.readouterr()
    assert _eval(model_dir, tmp_path / "both", "--data", str(prepared), "--corpus", source) == 2
    assert capsys.readouterr().err.strip() == (
        "lextra eval: error: --data replaces --corpus and --limit-chars (the folder holds its corpus); drop one"
    )


def test_eval_refuses_a_folder_of_another_tokenizer_in_one_line(tmp_path: Path, capsys) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=30)
    model_dir = train(_tiny_run(source), tmp_path / "run", progress=False)
    other = tmp_path / "bpe"
    prepare_shards(source, "bpe:300", other, progress=False)
    capsys.readouterr()
    assert _eval(model_dir, tmp_path / "out", "--data", str(other)) == 2
    assert capsys.readouterr().err.strip() == (
        f"lextra eval: error: the prepared data {other} was tokenized with bpe:300, not with the model's tokenizer "
        "(bytes, trained on its own corpus); prepare the data with the model's tokenizer, or drop --data to read "
        "the model's corpus"
    )


def test_a_moved_or_changed_training_folder_falls_back_to_the_corpus(tmp_path: Path, monkeypatch) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=30)
    prepare_shards(source, "bytes", tmp_path / "prepared", progress=False)
    model_dir = train(_tiny_run(source, data=str(tmp_path / "prepared")), tmp_path / "run", progress=False)
    from lextra.model import read_model_meta

    meta = read_model_meta(model_dir)
    assert shards_module.shards_for_model(meta).root == tmp_path / "prepared"
    shutil.move(tmp_path / "prepared", tmp_path / "moved")
    assert shards_module.shards_for_model(meta) is None
    prepare_shards(source, "bytes", tmp_path / "prepared", limit_chars=50_000, progress=False)  # other data there
    assert shards_module.shards_for_model(meta) is None


# ----------------------------------------------------------------------------- weighted mixtures
def _write_alphabet_corpus(root: Path, alphabet: str, documents: int, prefix: str) -> str:
    """A directory of documents made of `alphabet` only, so a window tells which corpus it came from."""
    rng = random.Random(prefix)
    root.mkdir(parents=True)
    for index in range(documents):
        words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))) for _ in range(rng.randint(50, 400))]
        (root / f"{prefix}{index:03d}.txt").write_text(" ".join(words), encoding="utf-8")
    return str(root)


def test_weighted_mixture_specs_parse_and_refuse_bad_weights(tmp_path: Path) -> None:
    from lextra.data.corpora import mixture_parts, mixture_weights

    assert mixture_parts("english:0.3+python-code:0.7") == ["english", "python-code"]
    assert mixture_weights("english:1+python-code:3") == [0.25, 0.75]
    assert mixture_weights("english+python-code") is None and mixture_weights("english") is None
    (tmp_path / "x:1+y:2").mkdir()  # an existing path is a path
    assert mixture_parts(str(tmp_path / "x:1+y:2")) == [str(tmp_path / "x:1+y:2")]
    with pytest.raises(DataError) as err:
        mixture_parts("english:0.3+python-code")
    assert str(err.value) == (
        "corpus mixture 'english:0.3+python-code' weights some parts only; weight every part "
        "(english:0.3+python-code:0.7) or none (english+python-code)"
    )
    with pytest.raises(DataError, match=r"the weight of 'english' must be positive, got 0.0$"):
        mixture_weights("english:0+python-code:1")
    with pytest.raises(DataError, match="names a corpus twice"):
        mixture_parts("english:1+english:2")


def test_a_weighted_mixture_draws_each_window_from_one_part_by_weight(tmp_path: Path) -> None:
    letters = _write_alphabet_corpus(tmp_path / "letters", "abcdefgh", 30, "l")
    digits = _write_alphabet_corpus(tmp_path / "digits", "0123456789", 30, "d")
    spec = f"{letters}:1+{digits}:4"
    prepare_shards(spec, "bytes", tmp_path / "mixed", shard_chars=20_000, progress=False)
    mixed = PreparedShards.open(tmp_path / "mixed")
    # each part's range of the training stream is that corpus' own training stream
    for index, source in enumerate((letters, digits)):
        prepare_shards(source, "bytes", tmp_path / f"alone{index}", progress=False)
        alone = PreparedShards.open(tmp_path / f"alone{index}")
        start, stop = mixed.part_ranges("train")[index]
        assert np.array_equal(mixed.span("train", start, stop), alone.span("train", 0, len(alone)))
        assert mixed.manifest["parts"][index]["splits"]["train"]["documents"] == alone.num_documents("train")
    assert mixed.part_ranges()[1][0] == mixed.part_ranges()[0][1] + 1  # one separator between the parts
    source = shards_module.training_batches(mixed)
    assert isinstance(source, shards_module.WeightedMixture) and source.weights == [0.2, 0.8]
    letter_ids, digit_ids = set(b"abcdefgh \n"), set(b"0123456789 \n")  # the separator is a newline
    from_letters = 0
    rows = 0
    for step in range(150):
        batch = source.batch(step, 16, 40, seed=3)
        assert batch.shape == (16, 41) and batch.dtype == torch.long
        assert torch.equal(batch, source.batch(step, 16, 40, seed=3))  # a pure function of (seed, step, rank)
        for row in batch.tolist():
            ids = set(row)
            assert ids <= letter_ids or ids <= digit_ids, "a window crosses the parts"
            from_letters += ids <= letter_ids and not ids <= {10, 32}
            rows += 1
    assert abs(from_letters / rows - 0.2) < 0.03, from_letters / rows
    assert not torch.equal(source.batch(0, 16, 40, seed=3, rank=1, world_size=2), source.batch(0, 16, 40, seed=3))
    with pytest.raises(DataError, match=r"^part 1 of the mixture has \d+ training tokens, fewer than training length"):
        source.batch(0, 4, mixed.part_ranges()[0][1], seed=0)


def test_training_on_a_weighted_mixture_resumes_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    letters = _write_alphabet_corpus(tmp_path / "letters", "abcdefgh", 20, "l")
    digits = _write_alphabet_corpus(tmp_path / "digits", "0123456789", 20, "d")
    spec = f"{letters}:0.3+{digits}:0.7"
    monkeypatch.setenv(shards_module.DATA_CACHE_ENV, str(tmp_path / "data-cache"))
    whole = load_model(train(_tiny_run(spec), tmp_path / "whole", progress=False))
    with pytest.raises(_StopError):
        train(_tiny_run(spec), tmp_path / "run", progress=False, on_step=_stop_at(4))
    resumed = load_model(train(_tiny_run(spec), tmp_path / "run", resume=True, progress=False))
    for (name, a), (_, b) in zip(whole.state_dict().items(), resumed.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    unweighted = load_model(train(_tiny_run(f"{letters}+{digits}"), tmp_path / "plain", progress=False))
    pairs = zip(whole.state_dict().values(), unweighted.state_dict().values(), strict=True)
    assert any(not torch.equal(a, b) for a, b in pairs)  # the weights change the windows
    monkeypatch.setenv(shards_module.DATA_CACHE_ENV, "off")
    with pytest.raises(ConfigError) as err:
        train(_tiny_run(spec), tmp_path / "off", progress=False)
    assert str(err.value) == (
        f"a weighted mixture ({spec}) samples prepared parts, but LEXTRA_DATA_CACHE=off reads the corpus into "
        "memory; use plain language modelling with the data cache on, or --data DIR"
    )


# ----------------------------------------------------------------------------- ranks: one prepares, all map
_RANK_SCRIPT = """
import json, sys
from lextra.data.shards import cached_shards
source, cache, prepare = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
shards = cached_shards(source, "bytes", cache_dir=cache, progress=False, prepare=prepare, wait_s=120)
print(json.dumps({"root": str(shards.root), "sha256": shards.sha256, "tokens": len(shards)}))
"""


@pytest.mark.slow
def test_only_the_preparing_process_writes_and_the_other_waits_for_the_manifest(tmp_path: Path) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=30)
    cache = tmp_path / "data-cache"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def start(prepare: bool) -> subprocess.Popen:
        argv = [sys.executable, "-c", _RANK_SCRIPT, source, str(cache), "1" if prepare else "0"]
        return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    waiter = start(prepare=False)  # rank 1, started first: it must not prepare
    time.sleep(1.0)
    assert waiter.poll() is None and not cache.exists()
    preparer = start(prepare=True)  # rank 0
    results = []
    for process in (preparer, waiter):
        out, err = process.communicate(timeout=240)
        assert process.returncode == 0, err[-2000:]
        results.append(json.loads(out))
    entry = cache / shards_module.cache_key(source, "bytes", None)
    assert (
        results[0]
        == results[1]
        == {
            "root": str(entry),
            "sha256": PreparedShards.open(entry).sha256,
            "tokens": len(_raw(source, "bytes")[1]),
        }
    )


def test_a_waiting_rank_gives_up_in_one_line(tmp_path: Path) -> None:
    source = _write_corpus(tmp_path / "corpus", documents=5)
    entry = tmp_path / "data-cache" / shards_module.cache_key(source, "bytes", None)
    with pytest.raises(DataError) as err:
        shards_module.cached_shards(source, "bytes", cache_dir=tmp_path / "data-cache", prepare=False, wait_s=0.3)
    assert str(err.value) == (
        f"waited 0 s for rank 0 to prepare {entry} (no manifest.json yet); see rank 0's error, or prepare the data "
        "first (`lextra data prepare`) on a folder every rank can read and pass --data"
    )
    assert not entry.exists()
