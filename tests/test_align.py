"""Temperature alignment and log-n scaling: targets reached, closed forms, identical in every backend, saved."""

from __future__ import annotations

import math

import pytest
import torch
from test_train_eval import tiny_config

from lextra.attention import build_mask
from lextra.cli import main
from lextra.data.prepare import prepare_data
from lextra.errors import ConfigError
from lextra.methods.align import align_temperatures, log_length_temperature, row_statistics
from lextra.model import GPT, GPTConfig, load_model
from lextra.train import train

LIMIT = 1_000_000  # characters: a validation split of a few thousand tokens for calibration


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    config = tiny_config("alibi", steps=30)
    config.limit_chars = LIMIT
    return train(config, tmp_path_factory.mktemp("align"), progress=False)


@pytest.fixture(scope="module")
def data():
    return prepare_data("python-code", limit_chars=LIMIT)


@pytest.mark.parametrize("strategy", ["pmax", "entropy"])
@pytest.mark.parametrize("per_head", [False, True])
def test_alignment_reaches_its_target_statistic(trained, data, strategy: str, per_head: bool) -> None:
    model = load_model(trained)
    result = align_temperatures(model, data, strategy, 128, windows=2, per_head=per_head)
    saturated_layers = {layer for layer, _ in result.saturated}
    assert len(saturated_layers) < len(result.target)
    for layer, (target, before, after) in enumerate(zip(result.target, result.before, result.after, strict=True)):
        if layer in saturated_layers:  # reported: some head's target lies beyond any temperature in range
            assert abs(after - target) < abs(before - target)
            continue
        assert abs(after - target) <= 1e-3 * abs(target)  # per-head alignment matches the layer mean too
        assert abs(before - target) > 10 * abs(after - target)  # there was something to correct
    taus = torch.tensor(result.temperatures)
    assert taus.shape == (2, 2) and bool((taus < 1).all())  # longer inputs need sharper softmaxes
    if not per_head:
        assert torch.equal(taus[:, 0], taus[:, 1])


def test_log_length_temperature_is_its_closed_form(trained, data) -> None:
    assert log_length_temperature(128, 2048) == pytest.approx(math.log(128) / math.log(2048))
    assert log_length_temperature(128, 100) == 1.0
    model = load_model(trained)
    result = align_temperatures(model, data, "log-length", 256, windows=1)
    assert torch.allclose(torch.tensor(result.temperatures), torch.tensor(math.log(32) / math.log(256)))


def test_row_statistics_of_uniform_attention() -> None:
    n = 7
    logits = torch.zeros(1, 2, 3, n)
    pmax, entropy = row_statistics(logits, torch.ones(2))
    torch.testing.assert_close(pmax, torch.full((2,), 1 / n))
    torch.testing.assert_close(entropy, torch.full((2,), math.log(n)))


@pytest.mark.parametrize("name", ["alibi", "rope", "t5", "fire"])
@pytest.mark.parametrize("log_scaling", ["none", "qwen", "ssmax"])
def test_temperatures_act_identically_in_every_backend(name: str, log_scaling: str) -> None:
    config = GPTConfig(
        vocab_size=61,
        n_layer=2,
        n_head=2,
        d_model=32,
        train_len=8,
        layer_plan=f"{name}+logn:{log_scaling}",
        temperatures=[[0.5, 1.5], [0.8, 1.2]],
    )
    model = GPT(config).eval()
    tokens = torch.randint(0, 61, (1, 40))
    with torch.no_grad():
        for mask in ("causal", "window:5", "bca"):
            ref = model(tokens, mask=mask, backend="reference")
            torch.testing.assert_close(model(tokens, mask=mask), ref, atol=1e-5, rtol=0)
        plain = GPT(GPTConfig(**{**config.to_dict(), "temperatures": None}))
        plain.load_state_dict(model.state_dict())
        assert (plain.eval()(tokens) - model(tokens)).abs().max() > 1e-5  # the temperatures do act (fp32 noise: 1e-7)


def test_log_n_factors() -> None:
    config = GPTConfig(vocab_size=11, n_layer=1, n_head=2, d_model=8, train_len=16, layer_plan="nope+logn:qwen")
    attn = GPT(config).blocks[0].attn
    pos = torch.arange(40)
    tau = attn.query_temperature(pos, pos, build_mask("causal"))
    expected = torch.where(pos + 1 > 16, math.log(16) / torch.log(pos + 1.0), torch.ones(40))
    torch.testing.assert_close(tau[0], expected.float())
    ssmax = GPT(GPTConfig(**{**config.to_dict(), "layer_plan": "nope+logn:ssmax"})).blocks[0].attn
    window = ssmax.query_temperature(pos, pos, build_mask("window:10"))
    visible = torch.minimum(pos + 1, torch.tensor(10)).float()
    # a query that sees one key has softmax 1 at any temperature: its factor uses n = 2 and stays finite
    torch.testing.assert_close(window[1], 1 / (ssmax.ssmax_scale[1].detach() * torch.log(visible.clamp(min=2))))
    assert torch.isfinite(window).all()
    bca = build_mask("bca:8").visible_keys(pos, 0, 39)
    assert bca.tolist() == [(int(p) - max(0, (int(p) // 8 - 1) * 8) + 1) for p in pos]


def test_ssmax_scale_is_learned(tmp_path) -> None:
    config = tiny_config("rope", steps=4)
    config.model.layer_plan = "rope+logn:ssmax"
    model = load_model(train(config, tmp_path, progress=False))
    scales = model.blocks[0].attn.ssmax_scale.detach()
    assert not torch.allclose(scales, torch.full_like(scales, 1 / math.log(32)))


def test_align_command_saves_temperatures_with_the_model(trained, tmp_path, capsys) -> None:
    out = tmp_path / "aligned"
    assert (
        main(["align", str(trained), "--strategy", "pmax", "--length", "96", "--windows", "1", "--out", str(out)]) == 0
    )
    text = capsys.readouterr().out
    assert "| layer 0 |" in text and "aligned model saved" in text
    loaded = load_model(out)
    assert loaded.config.temperatures is not None
    assert torch.equal(loaded.blocks[1].attn.inference.temperature, torch.tensor(loaded.config.temperatures[1]))
    with pytest.raises(ConfigError, match="unknown alignment strategy"):
        align_temperatures(loaded, prepare_data("python-code", limit_chars=LIMIT), "max", 64)


def test_align_refuses_to_save_a_copy_under_an_inference_setup(trained, tmp_path, capsys) -> None:
    out = tmp_path / "aligned-logn"
    args = ["align", str(trained), "--strategy", "pmax", "--length", "96", "--windows", "1", "--out", str(out)]
    assert main([*args, "--log-scaling", "qwen"]) == 2
    assert "saves the aligned copy of a lextra model as trained; drop the setup (logn-qwen)" in capsys.readouterr().err
    assert not out.exists()
