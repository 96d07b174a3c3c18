"""Packed documents (`--pack documents`): windows of whole documents drawn in the run's order, and a training step
exact against the same documents run one at a time, which is attention-gym's document mask with positions
restarted at each document."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_scheme

from lextra.attention import attention
from lextra.cli import main
from lextra.data import EpochOrder, PreparedShards, TrainStream, prepare_shards
from lextra.data.packing import PADDING, PackedDocuments, pack_window, stream_document_starts
from lextra.errors import ConfigError
from lextra.model import GPT, GPTConfig
from lextra.positions import SCHEMES
from lextra.train import TrainConfig, train
from lextra.train.packing import bucket_length, packed_loss, packed_step

LENGTHS = [3, 5, 2, 20, 4, 1, 6, 9, 2, 7]


def _stream(lengths: list[int] = LENGTHS, separator: int | None = 0) -> TrainStream:
    """Documents whose tokens name them (document i is i + 1 repeated), joined by `separator`."""
    return TrainStream([torch.full((n,), i + 1, dtype=torch.long) for i, n in enumerate(lengths)], separator)


def _units(stream: TrainStream) -> list[tuple[int, int]]:
    """Every document unit's [start, stop) in the stream (its tokens and the separator after it)."""
    stops = [*stream.starts.tolist()[1:], len(stream)]
    return list(zip(stream.starts.tolist(), stops, strict=True))


@pytest.mark.parametrize("separator", [0, None])
def test_every_window_holds_whole_documents_unless_one_is_longer_than_a_window(separator: int | None) -> None:
    """At every drawn start: the window opens on a unit's start (or on the draw, inside a unit longer than the
    window), each id run is a whole unit, a split one only where that unit is longer than the window, and padding
    only at the end."""
    stream = _stream(separator=separator)
    starts = stream.document_starts()
    units = _units(stream)
    need = 9
    for drawn in range(len(stream) - need):
        begin, ids = pack_window(starts, drawn, need)
        home = next((a, b) for a, b in units if a <= drawn < b)
        assert begin == (drawn if home[1] - home[0] > need else home[0])
        real = ids[ids != PADDING]
        assert (ids[: real.size] == real).all() and (ids[real.size :] == PADDING).all()  # padding last
        for document in np.unique(real).tolist():
            where = np.flatnonzero(ids == document)
            a, b = begin + int(where[0]), begin + int(where[-1]) + 1
            unit = next(u for u in units if u[0] <= a < u[1])
            whole = (a, b) == unit
            split = unit[1] - unit[0] > need and (b == begin + need or b == unit[1])
            assert whole or split, (drawn, document, (a, b), unit)
        if real.size < need:  # padding: the next unit did not fit and is no longer than a window
            a = begin + real.size
            unit = next(u for u in units if u[0] <= a < u[1])
            assert unit[0] == a and a + need > begin + need and unit[1] - unit[0] <= need


def test_packed_batches_follow_the_order_and_resume_exactly() -> None:
    """A packed batch is a pure function of (seed, step, rank): the same twice, different at another step, and in
    epoch order the draws are the epoch's (each window its draw moved to a document start)."""
    stream = _stream(LENGTHS * 6)
    packed = PackedDocuments(stream, stream.document_starts())
    first = packed.batch(5, 4, 12, seed=3)
    assert first.shape == (4, 2, 13) and torch.equal(first, packed.batch(5, 4, 12, seed=3))
    assert not torch.equal(first, packed.batch(6, 4, 12, seed=3))
    epoch = PackedDocuments(EpochOrder(stream), stream.document_starts())
    batch = epoch.batch(0, 4, 12, seed=3)
    for row in range(4):
        ids, tokens = batch[row, 1], batch[row, 0]
        assert int(ids[0]) == 0 and torch.equal(tokens, stream.tokens.long()[_begin(stream, tokens)][: tokens.numel()])


def _begin(stream: TrainStream, tokens: torch.Tensor) -> slice:
    """Where a window's tokens lie in the stream (the first match)."""
    flat = stream.tokens.long()
    for start in range(len(stream) - tokens.numel() + 1):
        if torch.equal(flat[start : start + tokens.numel()], tokens):
            return slice(start, None)
    raise AssertionError("window not in the stream")


def test_a_prepared_folder_packs_the_same_batches_as_the_raw_corpus(tmp_path: Path) -> None:
    """The boundary index of a prepared folder (its offsets files, over several shards) gives the same packed
    windows as the in-memory stream of the same documents."""
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(30):
        (root / f"d{i:02d}.txt").write_text("word " * (3 + (i * 7) % 23))
    prepare_shards(str(root), "bytes", tmp_path / "prepared", shard_chars=300, progress=False)
    shards = PreparedShards.open(tmp_path / "prepared")
    assert len(shards.manifest["splits"]["train"]["shards"]) > 2
    stream = TrainStream(shards.documents("train"), separator=shards.separator)
    assert np.array_equal(_all_starts(shards.document_starts()), stream.starts)
    for step in range(4):
        a = PackedDocuments(shards, shards.document_starts()).batch(step, 3, 40, seed=1)
        b = PackedDocuments(stream, stream.document_starts()).batch(step, 3, 40, seed=1)
        assert torch.equal(a, b)


def _all_starts(starts) -> np.ndarray:
    return np.concatenate([np.asarray(a) + b for a, b in zip(starts.starts, starts.bases.tolist(), strict=True)])


def test_a_stream_of_one_document_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"document boundaries.*single document"):
        stream_document_starts(_stream([40]))


def test_bucket_lengths_pad_by_less_than_a_quarter() -> None:
    for n in range(1, 2000):
        length = bucket_length(n, 10_000)
        assert n <= length < max(1.25 * n, 9) and bucket_length(n, n) == n
    assert len({bucket_length(n, 10_000) for n in range(9, 4097)}) <= 4 * 9


def _packed_batch() -> torch.Tensor:
    """Two packed rows over tokens 1..30: documents of 5, 1, 7 and padding; one of 12 and one of 4."""
    tokens = torch.randint(1, 30, (2, 17))
    ids = torch.tensor([[0] * 5 + [1] + [2] * 7 + [PADDING] * 4, [0] * 12 + [1] * 5])
    return torch.stack((tokens, ids), dim=1)


def _one_at_a_time(model: GPT, batch: torch.Tensor, **options) -> tuple[torch.Tensor, int]:
    """The summed next-token loss of each document of a packed batch run alone, and the number of targets."""
    total, count = torch.zeros((), dtype=torch.float64), 0
    for row in range(batch.shape[0]):
        tokens, ids = batch[row, 0], batch[row, 1]
        for document in ids.unique().tolist():
            where = (ids == document).nonzero().flatten()
            if document == PADDING or where.numel() < 2:
                continue
            piece = tokens[where]
            logits = model(piece[None, :-1], **options)[0]
            total = total + torch.nn.functional.cross_entropy(logits.double(), piece[1:], reduction="sum")
            count += where.numel() - 1
    return total, count


@pytest.mark.parametrize("scheme", SCHEMES.names())
def test_a_packed_step_equals_its_documents_run_one_at_a_time(scheme: str) -> None:
    """Loss and every gradient of the packed step equal those of the documents run alone (float64), for every
    scheme: absolute tables and FIRE's per-query bias see each document from position 0."""
    config = GPTConfig(n_layer=2, n_head=2, d_model=16, train_len=16, layer_plan=scheme, vocab_size=32, dropout=0.0)
    torch.manual_seed(0)
    model = GPT(config)
    batch = _packed_batch()
    model.zero_grad()
    loss = packed_step(model, model, batch, "fp32", torch.device("cpu"))
    packed_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    reference = model.double()
    reference.zero_grad()
    total, count = _one_at_a_time(reference, batch)
    (total / count).backward()
    assert count == 4 + 6 + 11 + 4 and math.isclose(float(loss), float(total.detach() / count), rel_tol=1e-5)
    for name, grad in packed_grads.items():
        expected = dict(reference.named_parameters())[name].grad
        assert torch.allclose(grad.double(), expected, rtol=1e-4, atol=1e-5), name


@pytest.mark.parametrize(
    ("scheme", "backend"), [("rope", "sdpa"), ("rope", "chunked"), ("alibi", "chunked"), ("fire", "chunked")]
)
def test_every_backend_gives_the_packed_loss_of_the_dense_reference(scheme: str, backend: str) -> None:
    config = GPTConfig(n_layer=1, n_head=2, d_model=16, train_len=16, layer_plan=scheme, vocab_size=32, dropout=0.0)
    model = GPT(config)
    batch = _packed_batch()
    with torch.no_grad():
        dense, count = packed_loss(lambda x: model(x, backend="reference"), batch)
        fast, same = packed_loss(lambda x: model(x, backend=backend), batch)
    assert count == same == 25 and torch.allclose(fast, dense, rtol=1e-6, atol=1e-6)


def _offsets_to_document_ids(offsets: torch.Tensor) -> torch.Tensor:
    """attention-gym's `_offsets_to_doc_ids_tensor` (attn_gym/masks/document_mask.py): each token's document."""
    counts = offsets[1:] - offsets[:-1]
    return torch.repeat_interleave(torch.arange(len(counts), device=offsets.device), counts)


def _document_causal_mask(offsets: torch.Tensor, length: int) -> torch.Tensor:
    """attention-gym's `generate_doc_mask_mod(causal_mask, offsets)` evaluated densely over (q_idx, kv_idx):
    the same document, and causal in the documents' logical (restarted) indices."""
    document = _offsets_to_document_ids(offsets)
    q_idx, kv_idx = torch.arange(length)[:, None], torch.arange(length)[None, :]
    same = document[q_idx] == document[kv_idx]
    q_logical = q_idx - offsets[document[q_idx]]
    kv_logical = kv_idx - offsets[document[kv_idx]]
    return same & (q_logical >= kv_logical)


@pytest.mark.parametrize("scheme", ["rope", "alibi", "t5", "fire", "xpos", "kerple_log"])
def test_per_document_attention_is_the_document_mask_with_restarted_positions(scheme: str) -> None:
    """The packed step attends per document; that is attention-gym's document mask over the stacked row with
    positions restarted at each document, computed here densely in float64 from the scheme's own rotation and bias."""
    lengths = [5, 1, 9, 3]
    offsets = torch.tensor([0, *np.cumsum(lengths).tolist()])
    L = int(offsets[-1])
    fast = make_scheme(scheme, n_heads=2, head_dim=8, train_len=16)
    s = copy.deepcopy(fast).double()
    q, k, v = (torch.randn(1, 2, L, 8, dtype=torch.float64) for _ in range(3))
    positions = torch.arange(L) - offsets[_offsets_to_document_ids(offsets)]  # restarted at each document
    qr, kr = s.rotate(q, k, positions, positions)
    scores = qr @ kr.transpose(-1, -2) / math.sqrt(8)
    if s.has_bias:
        scores = scores + s.bias(positions, positions)
    scores = scores.masked_fill(~_document_causal_mask(offsets, L), -math.inf)
    expected = torch.softmax(scores, -1) @ v
    pieces = []
    for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
        for backend in ("reference", "chunked"):
            q_, k_, v_ = (t[..., a:b, :].float() for t in (q, k, v))
            got = attention(q_, k_, v_, scheme=fast, mask="causal", backend=backend)
            assert torch.allclose(got.double(), expected[..., a:b, :], atol=1e-5), backend
        pieces.append(got)
    assert torch.allclose(torch.cat(pieces, dim=-2).double(), expected, atol=1e-5)


def test_training_with_packed_documents_resumes_exactly(tmp_path: Path) -> None:
    """A packed run interrupted after a checkpoint and resumed logs the losses and ends with the weights of a
    straight run; its config records the mode, and an unpacked config stays as before."""
    model = GPTConfig(n_layer=1, n_head=2, d_model=16, train_len=32, layer_plan="rope")
    settings = dict(limit_chars=40_000, model=model, batch_size=2, steps=4, warmup=1, checkpoint_every=2,
                    log_every=1, eval_sequences=1, pack="documents")  # fmt: skip
    train(TrainConfig(**settings), tmp_path / "whole", progress=False, device="cpu")

    def stop(done: int) -> None:
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(TrainConfig(**settings), tmp_path / "cut", progress=False, device="cpu", on_step=stop)
    train(TrainConfig(**settings), tmp_path / "cut", resume=True, progress=False, device="cpu")
    losses = [
        [json.loads(line)["loss"] for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        for run in ("whole", "cut")
    ]
    assert losses[0][-2:] == losses[1][-2:]
    from safetensors.torch import load_file

    a = load_file(str(tmp_path / "whole" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "cut" / "model" / "model.safetensors"))
    assert all(torch.equal(a[name], b[name]) for name in a)
    assert json.loads((tmp_path / "whole" / "config.json").read_text())["train"]["pack"] == "documents"
    assert "pack" not in TrainConfig().to_dict()


def test_pack_on_a_corpus_of_one_document_is_one_line_exit_2_nothing_written(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """Refused before the corpus is prepared: neither the run folder nor a data cache entry is written."""
    monkeypatch.setenv("LEXTRA_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "one.txt"
    corpus.write_text("a single long document " * 400)
    out = tmp_path / "run"
    code = main(["train", "--corpus", str(corpus), "--out", str(out), "--pack", "documents", "--steps", "2",
                 "--train-len", "16", "--n-layer", "1", "--d-model", "16", "--n-head", "2", "--quiet"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "document boundaries" in err
    assert not out.exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"positions": "pose:64"}, "positions"),
        ({"compile": True}, "compile"),
        ({"s2_attn": 4}, "s2_attn"),
        ({"task": "copy"}, "task"),
        ({"model": GPTConfig(n_layer=1, n_head=2, d_model=16, train_len=16, layer_plan="rope+full")}, "causal"),
    ],
)
def test_settings_packing_cannot_serve_are_refused(changes: dict, match: str) -> None:
    base = {"model": GPTConfig(n_layer=1, n_head=2, d_model=16, train_len=16), "pack": "documents"}
    with pytest.raises(ConfigError, match=match):
        TrainConfig(**(base | changes)).validate()
    with pytest.raises(ConfigError, match="pack must be one of none, documents"):
        TrainConfig(pack="docs").validate()


def test_retrieval_training_packs_its_corpus_windows_and_keeps_each_task_row_one_document(
    tmp_path: Path, capsys
) -> None:
    """`lextra retrieval train --task passkey+lm --pack documents` trains; its corpus rows are packed windows and its
    task rows one document each; a task without corpus windows has nothing to pack: one line, exit 2."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(16):
        (corpus / f"d{i:02d}.txt").write_text(f"document {i} says " + "hello world " * (3 + 4 * (i % 6)))
    shape = ["--steps", "2", "--n-layer", "1", "--d-model", "16", "--n-head", "2", "--train-len", "128",
             "--batch-size", "4", "--warmup", "1", "--corpus", str(corpus), "--pack", "documents"]  # fmt: skip
    shape.append("--quiet")
    assert main(["retrieval", "train", "--out", str(tmp_path / "mixed"), "--task", "passkey+lm", *shape]) == 0
    from lextra.data import prepare_data
    from lextra.tasks.registry import parse_task_spec
    from lextra.tasks.rows import row_source
    from lextra.train.packing import packed_source

    config = TrainConfig(corpus=str(corpus), model=GPTConfig(train_len=128), task="passkey+lm", pack="documents")
    source = packed_source(row_source(parse_task_spec("passkey+lm"), config, prepare_data(str(corpus), "bytes")))
    batch = torch.cat([source.batch(step, 8, 128, seed=0) for step in range(4)])
    ids = batch[:, 1]
    assert batch.shape == (32, 2, 129)
    kinds = {"task": 0, "packed": 0}
    for row in range(32):
        if bool((ids[row] == 0).all()) and "pass key" in bytes(batch[row, 0].tolist()).decode("utf-8", "replace"):
            kinds["task"] += 1
        else:  # every document after the first starts whole ("document N says ...")
            text = batch[row, 0]
            for cut in (torch.nonzero(ids[row][1:] != ids[row][:-1]).flatten() + 1).tolist():
                if int(ids[row][cut]) != PADDING:
                    assert bytes(text[cut : cut + 9].tolist()) == b"document ", row
            kinds["packed"] += 1
    assert kinds["task"] and kinds["packed"]
    capsys.readouterr()
    assert main(["retrieval", "train", "--out", str(tmp_path / "alone"), "--task", "passkey", *shape]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "trains on its rows alone" in err


@pytest.mark.slow
def test_two_processes_train_packed_documents_as_one_process_does(tmp_path: Path) -> None:
    """Under torchrun (DDP, gloo) each process runs its rows' documents, a different number of calls per process,
    and weighs them by the global batch's targets: the weights and losses equal one process's."""
    import os
    import subprocess
    import sys

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(40):
        (corpus / f"d{i:02d}.txt").write_text(f"document {i}: " + "some words here " * (1 + (i * 5) % 13))
    args = ["train", "--corpus", str(corpus), "--n-layer", "1", "--d-model", "16", "--n-head", "2", "--train-len",
            "64", "--batch-size", "4", "--steps", "3", "--warmup", "1", "--log-every", "1", "--pack", "documents",
            "--scheme", "rope", "--device", "cpu", "--quiet"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "lextra", *args, "--out", str(tmp_path / "one")], check=True, env=env,
                   capture_output=True, timeout=300)  # fmt: skip
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "lextra"]
    subprocess.run([*torchrun, *args, "--out", str(tmp_path / "two")], check=True, env=env, capture_output=True,
                   timeout=300)  # fmt: skip
    from safetensors.torch import load_file

    one, two = (load_file(str(tmp_path / run / "model" / "model.safetensors")) for run in ("one", "two"))
    for name in one:
        torch.testing.assert_close(two[name], one[name], atol=1e-5, rtol=1e-4, msg=name)
    losses = [
        [json.loads(line)["loss"] for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        for run in ("one", "two")
    ]
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)


def test_a_weighted_mixture_packs_whole_documents_of_the_part_each_draw_chose(tmp_path: Path) -> None:
    """Packed windows of a weighted mixture keep its draws by weight: each window lies inside one part (a part
    begins with a document, so moving a draw back to its document's start never leaves the part)."""
    from lextra.data.shards import WeightedMixture

    parts = []
    for name, alphabet in (("letters", "abcdefgh"), ("digits", "0123456789")):
        root = tmp_path / name
        root.mkdir()
        for i in range(20):
            (root / f"{name}{i:02d}.txt").write_text((alphabet * 40)[: 5 + (i * 7) % 31])
        parts.append(str(root))
    prepare_shards(f"{parts[0]}:0.3+{parts[1]}:0.7", "bytes", tmp_path / "prepared", progress=False)
    shards = PreparedShards.open(tmp_path / "prepared")
    mixture = WeightedMixture(shards, [0.3, 0.7])
    packed = PackedDocuments(mixture, stream_document_starts(mixture))
    letters = {ord(c) for c in "abcdefgh"}
    for step in range(6):
        batch = packed.batch(step, 8, 24, seed=1)
        for row in range(8):
            real = batch[row, 0][batch[row, 1] != PADDING]
            ids = set(real.tolist()) - {int(shards.separator)} if shards.separator is not None else set(real.tolist())
            assert ids <= letters or not ids & letters, "a window crosses the parts"
            assert int(batch[row, 1, 0]) == 0


def test_the_mode_reads_from_a_config_file_and_set(tmp_path: Path) -> None:
    from lextra.cli.training_options import read_train_file

    path = tmp_path / "train.toml"
    path.write_text('pack = "documents"\n[model]\ntrain_len = 32\n')
    assert read_train_file(path).pack == "documents"
    assert read_train_file(None, ["pack=documents"]).pack == "documents"
    assert read_train_file(None).pack == "none"
