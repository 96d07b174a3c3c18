"""Training windows: gathered across shard files as from one stream, and drawn in i.i.d. or epoch order."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from test_shards import _stop_at, _StopError

from lextra.cli import main
from lextra.cli.app import build_parser
from lextra.cli.training_options import train_config_from
from lextra.data import (
    EpochOrder,
    PreparedShards,
    TrainStream,
    WeightedMixture,
    epoch_window_starts,
    in_order,
    prepare_shards,
    training_batches,
)
from lextra.data import shards as shards_module
from lextra.data.orders import EPOCH_ROUNDS, epoch_permutation, epoch_windows
from lextra.data.windows import JoinedTokens
from lextra.errors import CheckpointError, ConfigError, DataError
from lextra.model import GPTConfig, load_model
from lextra.train import TrainConfig, train


def _pieces(sizes: list[int], dtype: type = np.uint16, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 60_000, size, dtype=np.int64).astype(dtype) for size in sizes]


def _expected(pieces: list[np.ndarray], starts: torch.Tensor, length: int) -> torch.Tensor:
    joined = np.concatenate(pieces).astype(np.int64)
    return torch.from_numpy(np.stack([joined[s : s + length + 1] for s in starts.tolist()]))


@pytest.mark.parametrize("sizes", [[500], [40, 3, 300, 7, 7, 250], [100, 100, 100], [5, 3, 300], [0, 50, 0, 60]])
def test_joined_pieces_give_every_window_of_the_joined_stream(sizes: list[int]) -> None:
    pieces = _pieces(sizes)
    joined = JoinedTokens(pieces)
    length = 16
    assert len(joined) == sum(sizes)
    every = torch.arange(0, sum(sizes) - length)  # windows inside one piece and across two, three and four
    got = joined.windows(every, length)
    assert got.dtype == torch.long and torch.equal(got, _expected(pieces, every, length))
    shuffled = every[torch.randperm(every.numel(), generator=torch.Generator().manual_seed(0))][:37]
    assert torch.equal(joined.windows(shuffled, length), _expected(pieces, shuffled, length))


def test_only_flat_contiguous_arrays_are_joined() -> None:
    buffer = np.arange(1000, dtype=np.uint16)
    with pytest.raises(DataError, match="flat contiguous arrays"):
        JoinedTokens([buffer[::2], buffer[:100]])
    odd = np.frombuffer(buffer.tobytes() + b"\0", dtype=np.uint16, count=300, offset=1)  # not 2-byte aligned
    with pytest.raises(DataError, match="not aligned to their dtype"):
        JoinedTokens([buffer[:200], odd]).windows(torch.tensor([0]), 9)


def test_windows_outside_the_stream_are_refused() -> None:
    joined = JoinedTokens(_pieces([50, 50]))
    with pytest.raises(DataError, match=r"^a training window starts at 90, outside 0\.\.89 \(windows of 11 tokens"):
        joined.windows(torch.tensor([0, 90]), 10)
    with pytest.raises(DataError, match="starts at -1"):
        joined.windows(torch.tensor([-1]), 10)
    with pytest.raises(DataError, match="one dtype"):
        JoinedTokens([np.zeros(3, np.uint8), np.zeros(3, np.uint16)])


# --- epoch order --------------------------------------------------------------------------------------------------
def _stream(tokens: int = 1000, seed: int = 0) -> TrainStream:
    rng = np.random.default_rng(seed)
    return TrainStream([torch.from_numpy(rng.integers(0, 50_000, tokens, dtype=np.int64))], separator=None)


def _global_windows(n: int, batch: int, length: int, seed: int, steps: int) -> np.ndarray:
    return np.concatenate([epoch_window_starts(n, s, batch, length, seed).numpy() for s in range(steps)])


@pytest.mark.parametrize(
    ("n", "batch", "length"), [(1000, 4, 32), (1000, 7, 9), (35, 8, 16), (5, 3, 4), (20_001, 3000, 1)]
)
def test_every_window_is_drawn_exactly_once_per_epoch(n: int, batch: int, length: int) -> None:
    windows = epoch_windows(n, length)
    assert windows == (n - 1) // length
    drawn = _global_windows(n, batch, length, seed=3, steps=-(-3 * windows // batch))
    epochs = [drawn[e * windows : (e + 1) * windows] for e in range(3)]
    every = np.arange(windows) * length  # non-overlapping: each token an input once and a target once
    for order in epochs:
        assert np.array_equal(np.sort(order), every)
    if windows > 4:  # a fresh permutation each epoch, and not the identity
        assert not np.array_equal(epochs[0], epochs[1]) and not np.array_equal(epochs[1], epochs[2])
        assert not np.array_equal(epochs[0], every)
        other_seed = _global_windows(n, batch, length, seed=4, steps=-(-windows // batch))[:windows]
        assert not np.array_equal(other_seed, epochs[0])


def test_the_permutation_is_a_bijection_at_any_size_and_looks_random() -> None:
    for windows in (1, 2, 3, 10, 99, 1000, 4099):
        image = epoch_permutation(np.arange(windows), windows, [7919 * r for r in range(1, EPOCH_ROUNDS + 1)])
        assert np.array_equal(np.sort(image), np.arange(windows)), windows
    image = epoch_window_starts(10**6 + 1, 0, 4096, 1, seed=0).numpy()  # 10^6 windows of one token
    assert len(set(image.tolist())) == 4096
    assert abs(np.corrcoef(np.arange(4096), image)[0, 1]) < 0.05  # consecutive draws land anywhere
    assert abs(image.mean() / 10**6 - 0.5) < 0.03


def test_epoch_batches_are_the_same_windows_for_any_number_of_ranks() -> None:
    stream = EpochOrder(_stream())
    for step in (0, 3, 7, 30):  # 31 windows per epoch: step 7 spans two epochs
        whole = stream.batch(step, 8, 32, seed=1)
        for world in (2, 4, 8):
            rows = [stream.batch(step, 8 // world, 32, seed=1, rank=r, world_size=world) for r in range(world)]
            assert torch.equal(torch.cat(rows), whole), (step, world)
    assert torch.equal(stream.batch(5, 8, 32, seed=1), EpochOrder(_stream()).batch(5, 8, 32, seed=1))
    tokens = stream.stream.tokens.long()
    for row, start in zip(whole, epoch_window_starts(len(stream), 30, 8, 32, 1).tolist(), strict=True):
        assert torch.equal(row, tokens[start : start + 33])
    assert stream.position(8, 4, 32) == {"epoch": 1, "window": 1, "windows": 31}


def test_epoch_order_is_chosen_by_name_and_refused_where_it_cannot_apply() -> None:
    stream = _stream()
    assert in_order(stream, "iid") is stream and isinstance(in_order(stream, "epoch"), EpochOrder)
    with pytest.raises(DataError, match=r"^unknown window order 'shuffled'; use one of iid, epoch$"):
        in_order(stream, "shuffled")
    with pytest.raises(DataError, match=r"fewer than training length \+ 1"):
        EpochOrder(_stream(10)).batch(0, 2, 10, seed=0)
    with pytest.raises(ConfigError, match=r"^training config: order must be one of iid, epoch, got 'random'$"):
        TrainConfig(order="random").validate()
    with pytest.raises(ConfigError, match=r"order epoch visits the windows of a text stream, but the task 'passkey'"):
        TrainConfig(order="epoch", task="passkey").validate()
    with pytest.raises(
        ConfigError, match=r"but the weighted mixture shakespeare:1\+python-code:2 draws its parts by weight"
    ):
        TrainConfig(order="epoch", corpus="shakespeare:1+python-code:2").validate()  # before any data is read


def _write_corpus(root: Path, documents: int = 12) -> str:
    """Text files of 12-20 random words: about 1,000 byte tokens in all."""
    rng = random.Random(0)
    words = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "seven", "wizards", "hex"]
    root.mkdir(parents=True)
    for index in range(documents):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(12, 20)))
        (root / f"doc{index:03d}.txt").write_text(text + "\n", encoding="utf-8")
    return str(root)


def _run(source: str, **kwargs: object) -> TrainConfig:
    model = GPTConfig(n_layer=1, n_head=2, d_model=32, train_len=32, layer_plan="alibi")
    fields = {"batch_size": 4, "steps": 12, "warmup": 2, "checkpoint_every": 3, "log_every": 2, "order": "epoch"}
    return TrainConfig(corpus=source, model=model, eval_sequences=0, **{**fields, **kwargs})  # type: ignore[arg-type]


def _same_weights(a: Path, b: Path) -> bool:
    one, two = load_model(a).state_dict(), load_model(b).state_dict()
    return all(torch.equal(one[name], two[name]) for name in one)


def test_an_epoch_order_run_resumes_mid_epoch_exactly_and_equals_the_raw_corpus_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _write_corpus(tmp_path / "corpus")
    monkeypatch.setenv(shards_module.DATA_CACHE_ENV, str(tmp_path / "cache"))
    whole = train(_run(source), tmp_path / "whole", progress=False)
    windows = epoch_windows(len(shards_module.cached_shards(source, "bytes", cache_dir=tmp_path / "cache")), 32)
    assert 4 < windows < 12 * 4 - 4  # the run spans an epoch boundary, and step 3 is inside the first epoch
    with pytest.raises(_StopError):
        train(_run(source), tmp_path / "cut", progress=False, on_step=_stop_at(5))
    state = json.loads((tmp_path / "cut" / "checkpoints" / "step_0000003" / "state.json").read_text())
    assert state["data_position"] == {"epoch": 0, "window": 12, "windows": windows}  # the checkpoint holds it
    shutil.copytree(tmp_path / "cut", tmp_path / "moved")
    moved = tmp_path / "moved" / "checkpoints" / "step_0000003" / "state.json"
    moved.write_text(json.dumps({**state, "data_position": {**state["data_position"], "window": 13}}))
    with pytest.raises(CheckpointError, match=r"its checkpoint at step 3 stands at \{'epoch': 0, 'window': 13"):
        train(_run(source), tmp_path / "moved", resume=True, progress=False)
    resumed = train(_run(source), tmp_path / "cut", resume=True, progress=False)
    assert _same_weights(whole, resumed)
    records = [json.loads(line) for line in (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records if r["step"] in (2, 12)] == [round(8 / windows, 4), round(48 / windows, 4)]
    # the raw corpus read into memory draws the same windows in epoch order
    monkeypatch.setenv(shards_module.DATA_CACHE_ENV, "off")
    assert _same_weights(whole, train(_run(source), tmp_path / "raw", progress=False))
    # the order is part of the run: i.i.d. trains on other windows, and a resume cannot change it
    iid = train(_run(source, order="iid"), tmp_path / "iid", progress=False)
    assert not _same_weights(whole, iid)
    with pytest.raises(ConfigError, match=r"incompatible config \(order: saved None, now 'epoch'\)"):
        train(_run(source, steps=14), tmp_path / "iid", resume=True, progress=False)


def test_epoch_order_is_refused_for_a_weighted_mixture_in_one_line(tmp_path: Path) -> None:
    letters, digits = _write_corpus(tmp_path / "a", 6), _write_corpus(tmp_path / "b", 6)
    for index, path in enumerate(Path(digits).iterdir()):
        path.rename(path.with_name(f"other{index}.txt"))  # ids differ from the first part's
    spec = f"{letters}:1+{digits}:3"
    prepare_shards(spec, "bytes", tmp_path / "mixed", progress=False)
    shards = PreparedShards.open(tmp_path / "mixed")
    with pytest.raises(DataError) as err:
        training_batches(shards, "epoch")
    assert str(err.value) == (
        f"{tmp_path / 'mixed'} holds a weighted mixture ({spec}), whose windows are drawn by weight; epoch order "
        "draws every window once, so use --order iid, or an unweighted mixture A+B"
    )
    assert isinstance(training_batches(shards, "iid"), WeightedMixture)


def test_order_is_a_flag_and_a_config_file_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "run.toml"
    config.write_text('order = "epoch"\nsteps = 3\n')
    parse = build_parser().parse_args
    assert train_config_from(parse(["train", "--config", str(config), "--out", "x"])).order == "epoch"
    assert train_config_from(parse(["train", "--config", str(config), "--order", "iid", "--out", "x"])).order == "iid"
    assert train_config_from(parse(["train", "--out", "x"])).order == "iid"
    assert main(["train", "--order", "random", "--out", str(tmp_path / "run")]) == 2
    assert "argument --order: invalid choice: 'random' (choose from 'iid', 'epoch')" in capsys.readouterr().err
    config.write_text('order = "sorted"\n')
    assert main(["train", "--config", str(config), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["lextra train: error: training config: order must be one of iid, epoch, got 'sorted'"]
