"""Mixed context-window training (LongRoPE2, `lextra.train.mixed`): a short step is the authors' packed row (pieces
attended alone, numbered from 0, under the short factors), the long rows run under the rescaled frequencies, the
schedule depends on (seed, step) alone, and bad windows are one line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from lextra.cli.app import main
from lextra.errors import ConfigError
from lextra.model import GPT, GPTConfig, load_model
from lextra.positions.scaling import RopeScaling, frequencies, rope_inv_freq
from lextra.registry import format_spec
from lextra.train import TrainConfig, train
from lextra.train.mixed import MixedWindow, as_longrope

LIMIT = 400_000
ORIGINAL_32 = '{"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 32}'


def test_a_short_step_is_the_long_window_cut_into_pieces_each_predicting_its_own_targets() -> None:
    mixed = MixedWindow(4, 12, 0.5)
    batch = torch.arange(2 * 13).view(2, 13)
    cut = mixed.cut(batch)
    assert cut.shape == (6, 5)
    for row in range(2):
        for piece in range(3):
            assert cut[row * 3 + piece].tolist() == batch[row, piece * 4 : piece * 4 + 5].tolist()
    targets = sorted(cut[:, 1:].flatten().tolist())  # every target of the long windows, once
    assert targets == sorted(batch[:, 1:].flatten().tolist())


def test_one_model_runs_short_rows_under_the_original_rope_and_long_rows_under_the_rescaled_one() -> None:
    """The mixed model (longrope: ones up to 8, yarn's factors beyond) equals, with the same weights, the yarn model on
    a long window and the plain RoPE model (times the same attention factor) on a piece of 8."""
    torch.manual_seed(0)
    yarn = RopeScaling("yarn", factor=4.0, original_max_position_embeddings=8)
    mixed = as_longrope(yarn, 8, 10000.0, 8)
    plain = {**dict(mixed), "long_factor": mixed["short_factor"]}  # the short side at every length

    def model(scaling: dict) -> GPT:
        config = GPTConfig(vocab_size=64, n_layer=2, n_head=2, d_model=16, train_len=32,
                           layer_plan=format_spec("rope", {"scaling": scaling}))  # fmt: skip
        torch.manual_seed(0)
        return GPT(config).eval()

    batch = torch.randint(0, 64, (2, 33))
    piece = MixedWindow(8, 32, 0.5).cut(batch)[:, :-1]
    with torch.no_grad():
        torch.testing.assert_close(model(dict(mixed))(batch[:, :-1]), model(dict(yarn))(batch[:, :-1]),
                                   rtol=1e-5, atol=1e-5)  # fmt: skip
        torch.testing.assert_close(model(dict(mixed))(piece), model(plain)(piece), rtol=0, atol=0)
    q, k, at = torch.randn(1, 2, 8, 8), torch.randn(1, 2, 8, 8), torch.arange(8)
    pairs = [("yarn", dict(yarn)), ("plain", plain)]
    rotated = {name: model(scaling).scheme_for(0).rotate(q, k, at, at) for name, scaling in pairs}
    assert (rotated["yarn"][0] - rotated["plain"][0]).abs().max() > 0.05  # the piece does not take yarn's frequencies


def test_a_fixed_scaling_becomes_longrope_with_its_frequencies_beyond_the_original_length() -> None:
    for given in (
        RopeScaling("yarn", factor=8.0, original_max_position_embeddings=64),
        RopeScaling("llama3", factor=8.0, original_max_position_embeddings=64),
        RopeScaling("linear", factor=4.0),
    ):
        mixed = as_longrope(given, 16, 500.0, 64)
        assert mixed.rope_type == "longrope" and mixed["original_max_position_embeddings"] == 64
        long, long_attention = frequencies(mixed, 16, 500.0, 65)
        want, want_attention = frequencies(given, 16, 500.0, None)
        torch.testing.assert_close(long, want, rtol=2e-7, atol=0)  # one float32 rounding
        assert long_attention == pytest.approx(want_attention, rel=1e-12)
        short, short_attention = frequencies(mixed, 16, 500.0, 64)
        assert torch.equal(short, rope_inv_freq(16, 500.0).float()) and short_attention == long_attention
    assert as_longrope(mixed, 16, 500.0, 64) is mixed  # a longrope scaling is kept as it is
    with pytest.raises(ConfigError, match="'dynamic' changes them with the length"):
        as_longrope(RopeScaling("dynamic", factor=4.0, original_max_position_embeddings=64), 16, 500.0, 64)


def test_the_share_of_short_steps_depends_on_seed_and_step_alone() -> None:
    mixed = MixedWindow(8, 32, 0.3)
    draws = [mixed.is_short(5, step) for step in range(4000)]
    assert draws == [MixedWindow(8, 32, 0.3).is_short(5, step) for step in range(4000)]
    share = sum(draws) / len(draws)
    assert abs(share - 0.3) < 4 * math.sqrt(0.3 * 0.7 / 4000)
    assert draws != [mixed.is_short(6, step) for step in range(4000)]


def _mixed_config(steps: int = 8) -> TrainConfig:
    model = GPTConfig(n_layer=1, n_head=2, d_model=16, train_len=32,
                      layer_plan=format_spec("rope", {"scaling": {"rope_type": "yarn", "factor": 4.0,
                                                                  "original_max_position_embeddings": 8}}))  # fmt: skip
    return TrainConfig(limit_chars=LIMIT, model=model, batch_size=2, steps=steps, warmup=2, checkpoint_every=3,
                       log_every=2, eval_sequences=2, mixed_window="8:32", mixed_share=0.5)  # fmt: skip


def test_a_mixed_run_resumed_equals_a_straight_one_and_saves_the_longrope_scaling(tmp_path: Path) -> None:
    def stop(done: int) -> None:
        if done == 4:
            raise KeyboardInterrupt

    whole = load_model(train(_mixed_config(), tmp_path / "whole", progress=False))
    with pytest.raises(KeyboardInterrupt):
        train(_mixed_config(), tmp_path / "cut", progress=False, on_step=stop)
    resumed = load_model(train(_mixed_config(), tmp_path / "cut", resume=True, progress=False))
    for (name, a), (_, b) in zip(whole.state_dict().items(), resumed.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    scaling = whole.config.plan()[0].scheme_options["scaling"]
    assert scaling["rope_type"] == "longrope" and scaling["short_factor"] == [1.0] * 4
    saved = json.loads((tmp_path / "whole" / "config.json").read_text())["train"]
    assert saved["mixed_window"] == "8:32" and "mixed_share" not in saved  # the default share is left out
    plain = _mixed_config()
    plain.mixed_window = None
    assert "mixed_window" not in plain.to_dict()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--mixed-window", "64:32", "--rope-scaling", "yarn:4"], "must be longer than the short one"),
        (["--mixed-window", "8:64", "--rope-scaling", "yarn:4"], "set --train-len 64"),
        (["--mixed-window", "12:32", "--rope-scaling", "yarn:4"], "use a short window that divides 32"),
        (["--mixed-window", "8-32", "--rope-scaling", "yarn:4"], "write it as SHORT:LONG"),
        (["--mixed-window", "8:32"], "give --rope-scaling"),
        (["--mixed-window", "8:32", "--rope-scaling", "yarn:4", "--mixed-share", "1"], "strictly between 0 and 1"),
        (["--mixed-window", "8:32", "--rope-scaling", "yarn:4", "--positions", "pose:128"], "drop --positions"),
        (["--mixed-window", "8:32", "--rope-scaling", "dynamic:4"], "changes them with the length"),
        (["--mixed-window", "8:32", "--rope-scaling", "yarn:4", "--pack", "documents"], "drop --pack documents"),
        (["--mixed-window", "8:32", "--rope-scaling", ORIGINAL_32], "must lie between the short window"),
    ],
)
def test_a_bad_mixed_window_is_one_line_and_writes_nothing(tmp_path: Path, capsys, flags, message) -> None:
    out = tmp_path / "run"
    args = ["train", "--out", str(out), "--train-len", "32", "--n-layer", "1", "--d-model", "16", "--n-head", "2"]
    args += ["--steps", "2", "--batch-size", "2", "--limit-chars", str(LIMIT), "--quiet", *flags]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not out.exists()
