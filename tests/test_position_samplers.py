"""Position samplers (`lextra train --positions`): PoSE and randomized positions, exact draws, every scheme served,
resume bit-identical, and one clear error for what cannot work."""

from __future__ import annotations

import json

import pytest
import torch

from lextra.cli import main
from lextra.data.positions import SAMPLERS, _position_seed, _randint, build_sampler
from lextra.errors import ConfigError
from lextra.model import GPT, GPTConfig, load_model
from lextra.registry import format_spec
from lextra.train import TrainConfig, train

LIMIT = 400_000
RELATIVE = ["rope", "xpos", "coca", "alibi", "t5", "kerple_log", "kerple_power", "sandwich", "fire"]


def tiny_config(scheme: str = "rope", steps: int = 12, **kwargs) -> TrainConfig:
    model = GPTConfig(n_layer=2, n_head=2, d_model=32, train_len=32, layer_plan=scheme)
    return TrainConfig(
        limit_chars=LIMIT, model=model, batch_size=4, steps=steps, warmup=3, checkpoint_every=5, log_every=2,
        eval_sequences=4, **kwargs,
    )  # fmt: skip


def test_registry_names_the_three_samplers() -> None:
    assert SAMPLERS.names() == ["contiguous", "pose", "randomized"]
    assert SAMPLERS.describe("pose") == "target=16 x L_tr, chunks=2, span=1"
    assert SAMPLERS.describe("randomized") == "max=16 x L_tr"


def test_contiguous_is_plain_positions() -> None:
    sampler = build_sampler("contiguous", 32)
    assert sampler.contiguous and torch.equal(sampler.positions(0, 5), torch.arange(32))


@pytest.mark.parametrize("step", [0, 1, 7, 123])
def test_pose_two_chunks_follow_the_authors_draws(step: int) -> None:
    """train_preprocess_function_pose: rt1 ~ U{1..(L+1)//2}, rt ~ U{0..target-L}, pos[rt1:] += rt."""
    L, target, seed = 32, 512, 3
    generator = torch.Generator().manual_seed(_position_seed("pose", seed, step, 0))
    first = _randint(generator, 1, (L + 1) // 2)
    skip = _randint(generator, 0, target - L)
    expected = torch.arange(L)
    expected[first:] += skip
    got = build_sampler(f"pose:{target}", L).positions(seed, step)
    assert torch.equal(got, expected)
    assert int(got[-1]) < target and 1 <= first <= (L + 1) // 2


def test_pose_chunks_skip_forward_and_cover_the_target() -> None:
    L, target = 32, 1024
    sampler = build_sampler(f"pose,target={target},chunks=4", L)
    largest = 0
    for step in range(300):
        positions = sampler.positions(0, step)
        gaps = positions.diff()
        assert positions[0] == 0 and bool((gaps >= 1).all()) and int((gaps > 1).sum()) <= 3
        assert int(positions[-1]) < target
        largest = max(largest, int(positions[-1]))
    assert largest > 0.95 * target  # the skips reach the whole target range
    assert torch.equal(sampler.positions(0, 5), sampler.positions(0, 5))
    assert not torch.equal(sampler.positions(0, 5), sampler.positions(0, 6))
    assert not torch.equal(sampler.positions(0, 5), sampler.positions(1, 5))


def test_randomized_is_a_sorted_sample_of_distinct_positions() -> None:
    sampler = build_sampler("randomized:100", 32)
    seen = torch.zeros(100, dtype=torch.bool)
    for step in range(50):
        positions = sampler.positions(0, step)
        assert positions.numel() == 32 and bool((positions.diff() > 0).all())
        assert int(positions.min()) >= 0 and int(positions.max()) < 100
        seen[positions] = True
    assert bool(seen.all())
    generator = torch.Generator().manual_seed(_position_seed("randomized", 0, 4, 0))
    assert torch.equal(sampler.positions(0, 4), torch.randperm(100, generator=generator)[:32].sort().values)


@pytest.mark.parametrize(
    ("spec", "scheme", "options", "message"),
    [
        ("pose:16", "rope", {}, r"pose: target \(16\) is below the training window L_tr \(32\); set target >= 32"),
        ("randomized:31", "rope", {}, r"randomized: max \(31\) is below the training window L_tr \(32\)"),
        ("pose:512", "learned", {}, r"draws positions up to 511, but the learned position table has 32 entries; "
         r"train with --scheme-option max_len=512"),
        ("randomized:64", "learned", {"max_len": 48}, "the learned position table has 48 entries"),
        ("nonsense", "rope", {}, "unknown position sampler 'nonsense'; known position samplers: contiguous, pose"),
    ],
)  # fmt: skip
def test_samplers_refuse_what_they_cannot_serve(spec, scheme, options, message) -> None:
    config = tiny_config(format_spec(scheme, options), positions=spec)
    with pytest.raises(ConfigError, match=message):
        config.validate()


def test_ssmax_is_refused_with_skipping_positions() -> None:
    config = tiny_config("rope+logn:ssmax", positions="pose")
    with pytest.raises(ConfigError, match="ssmax counts keys at contiguous positions"):
        config.validate()


def _one_step(model: GPT, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loss = model.loss(tokens, positions=positions)
    loss.backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and bool(torch.isfinite(param.grad).all()), name
    optimizer.step()
    return loss


@pytest.mark.parametrize("spec", ["pose:512", "randomized:512"])
@pytest.mark.parametrize("scheme", [*RELATIVE, "learned", "sinusoidal", "nope"])
def test_every_scheme_trains_a_step_at_sampled_positions(scheme: str, spec: str) -> None:
    torch.manual_seed(0)
    options = {"max_len": 512} if scheme == "learned" else {}
    model = GPT(GPTConfig(n_layer=2, n_head=2, d_model=32, train_len=32, layer_plan=format_spec(scheme, options)))
    positions = build_sampler(spec, 32).positions(0, 1)
    assert int(positions[-1]) > 32  # the draw skips past the window
    tokens = torch.randint(0, 256, (2, 33), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # the training backend scores exactly as the dense reference at those positions
        fast = model(tokens[:, :-1], positions=positions)
        dense = model(tokens[:, :-1], positions=positions, backend="reference")
        plain = model(tokens[:, :-1])
    torch.testing.assert_close(fast, dense, atol=2e-5, rtol=1e-4)
    if scheme != "nope":  # the positions reach the model (NoPE has none to take)
        assert (fast - plain).abs().max() > 1e-4
    before = model.loss(tokens, positions=positions).item()
    _one_step(model, tokens, positions)
    assert model.loss(tokens, positions=positions).item() < before


@pytest.mark.parametrize("spec", ["pose,target=256,chunks=3", "randomized:256"])
def test_resume_with_sampled_positions_ends_with_identical_weights(tmp_path, spec: str) -> None:
    def hook(done: int) -> None:
        if done == 8:
            raise KeyboardInterrupt

    whole = load_model(train(tiny_config("rope", positions=spec), tmp_path / "whole", progress=False))
    with pytest.raises(KeyboardInterrupt):
        train(tiny_config("rope", positions=spec), tmp_path / "cut", progress=False, on_step=hook)
    resumed = load_model(train(tiny_config("rope", positions=spec), tmp_path / "cut", resume=True, progress=False))
    for (name, a), (_, b) in zip(whole.state_dict().items(), resumed.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    saved = json.loads((tmp_path / "whole" / "config.json").read_text())["train"]
    assert saved["positions"] == spec
    contiguous = load_model(train(tiny_config("rope"), tmp_path / "plain", progress=False))
    assert not torch.equal(contiguous.embed.weight, whole.embed.weight)  # the positions changed the training


def test_contiguous_configs_save_as_before() -> None:
    saved = tiny_config().to_dict()
    assert "positions" not in saved and "s2_attn" not in saved
    assert TrainConfig.from_dict(saved).positions == "contiguous"


def test_resume_with_other_positions_exits_2_with_one_line(tmp_path, capsys) -> None:
    common = ["train", "--out", str(tmp_path), "--train-len", "32", "--n-layer", "1", "--d-model", "16"]
    common += ["--n-head", "2", "--batch-size", "2", "--limit-chars", str(LIMIT)]
    assert main([*common, "--steps", "2", "--positions", "pose:128"]) == 0
    capsys.readouterr()
    assert main([*common, "--steps", "3", "--positions", "pose:256", "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "positions: saved 'pose:128', now 'pose:256'" in err[0]
    assert main([*common, "--steps", "3", "--positions", "pose:8", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "below the training window L_tr (32)" in err[0]


def test_a_study_train_section_takes_a_sampler() -> None:
    from lextra.pipelines.study import parse_study

    train_section = {"positions": "pose,target=512,chunks=3", "model": {"train_len": 32}}
    study = parse_study({"name": "s", "train": train_section, "models": [{"label": "r", "scheme": "rope"}]})
    assert study.train.positions == "pose,target=512,chunks=3"
    assert study.train.sampler().limit == 512
    with pytest.raises(ConfigError, match="pose: target"):
        parse_study({"name": "s", "train": {"positions": "pose:8"}, "models": [{"label": "r", "scheme": "rope"}]})
