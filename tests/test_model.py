"""The GPT model: schemes plug in, positions behave, cached decoding is exact, checkpoints are safe."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import ALL_SCHEMES, RELATIVE_SCHEMES

from lextra.attention import build_mask
from lextra.errors import CheckpointError, ConfigError, LengthError
from lextra.kv_cache import KVCache
from lextra.layer_inputs import AttentionInputs
from lextra.model import GPT, GPTConfig, load_model, save_model
from lextra.positions.rotary import convert_qk_weight
from lextra.registry import format_spec


def tiny(scheme: str = "rope", **kwargs) -> GPT:
    options = kwargs.pop("scheme_options", {})
    config = GPTConfig(
        vocab_size=61, n_layer=2, n_head=2, d_model=32, train_len=16, layer_plan=format_spec(scheme, options), **kwargs
    )
    model = GPT(config).eval()
    with torch.no_grad():  # random scheme parameters, so they matter
        for scheme_module in model.schemes:
            for param in scheme_module.parameters():
                param.normal_(0, 0.3)
    return model


@pytest.mark.parametrize("name", ALL_SCHEMES)
def test_backends_agree_through_the_whole_model(name: str) -> None:
    model = tiny(name)
    tokens = torch.randint(0, 61, (2, 16))
    with torch.no_grad():
        ref = model(tokens, backend="reference")
        for mask in ("causal", "window:5", "bca"):
            torch.testing.assert_close(
                model(tokens, mask=mask), model(tokens, mask=mask, backend="reference"), atol=1e-5, rtol=0
            )
        torch.testing.assert_close(model(tokens), ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", [n for n in ALL_SCHEMES if n != "learned"])
def test_cached_decoding_equals_a_full_forward_past_the_training_length(name: str) -> None:
    model = tiny(name)
    tokens = torch.randint(0, 61, (1, 40))  # 2.5 x train_len
    with torch.no_grad():
        full = model(tokens)
        cache = KVCache(model.config.n_layer)
        pieces = [model(tokens[:, :7], cache=cache)]
        for i in range(7, 40):
            pieces.append(model(tokens[:, i : i + 1], cache=cache))
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=0)
    assert cache.length == 40


@pytest.mark.parametrize("name", ALL_SCHEMES)
def test_shifting_all_positions_changes_only_absolute_models(name: str) -> None:
    model = tiny(name, scheme_options={"max_len": 4096} if name == "learned" else {})
    tokens = torch.randint(0, 61, (1, 12))
    with torch.no_grad():
        base = model(tokens)
        shifted = model(tokens, positions=torch.arange(12) + 1000)
    if name in RELATIVE_SCHEMES:
        torch.testing.assert_close(shifted, base, atol=1e-4, rtol=1e-4)
    else:
        assert (shifted - base).abs().max() > 1e-3


def test_nope_and_relative_schemes_see_order_but_not_offset() -> None:
    model = tiny("alibi")
    tokens = torch.randint(0, 61, (1, 12))
    with torch.no_grad():
        assert (model(tokens) - model(tokens.flip(1)).flip(1)).abs().max() > 1e-3


def test_layer_sharing_follows_the_scheme() -> None:
    assert len(tiny("t5").schemes) == 1  # Hugging Face computes T5's bias once per stack
    assert len(tiny("kerple_log").schemes) == 2  # one kernel per layer, as in the reference code
    assert len(tiny("fire").schemes) == 2
    assert len(tiny("alibi").schemes) == 1
    assert tiny("coca").blocks[0].attn.k_proj.out_features == 2 * 8  # tau: D/2 per head


def test_layout_conversion_keeps_a_model_s_outputs() -> None:
    inter = tiny("rope", scheme_options={"layout": "interleaved"})
    half = tiny("rope", scheme_options={"layout": "half"})
    state = inter.state_dict()
    for key in list(state):
        if key.endswith(("q_proj.weight", "k_proj.weight")):
            state[key] = convert_qk_weight(state[key], 2, "interleaved", "half")
    half.load_state_dict(state)
    tokens = torch.randint(0, 61, (1, 16))
    with torch.no_grad():
        torch.testing.assert_close(half(tokens), inter(tokens), atol=1e-5, rtol=0)


def test_learned_model_refuses_inputs_beyond_its_table() -> None:
    model = tiny("learned")
    with pytest.raises(LengthError, match="learned position table has 16 entries"):
        model(torch.zeros(1, 17, dtype=torch.long))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"layer_plan": "rop"}, "unknown position scheme 'rop'"),
        ({"d_model": 30, "n_head": 2, "layer_plan": "rope"}, "even head dimension, got 15"),
        ({"d_model": 33}, "must be divisible by n_head"),
        ({"n_layer": 0}, "n_layer must be a positive integer"),
        ({"layer_plan": "rope,bass=1"}, "has no option 'bass'"),
        ({"dropout": 1.5}, "dropout must be in"),
    ],
)
def test_bad_configs_get_clear_errors(changes: dict, message: str) -> None:
    config = {"vocab_size": 61, "n_layer": 2, "n_head": 2, "d_model": 32, "train_len": 16, **changes}
    with pytest.raises(ConfigError, match=message):
        GPT(GPTConfig(**config))


def test_save_and_load_round_trip(tmp_path) -> None:
    for name in ("t5", "fire", "learned", "coca"):
        model = tiny(name)
        save_model(model, tmp_path / name)
        loaded = load_model(tmp_path / name).eval()
        tokens = torch.randint(0, 61, (1, 16))
        with torch.no_grad():
            assert torch.equal(loaded(tokens), model(tokens))
        assert loaded.head.weight is loaded.embed.weight
    assert not list(tmp_path.glob("**/*.tmp"))


def test_corrupt_or_missing_checkpoints_get_clear_errors(tmp_path) -> None:
    model = tiny("alibi")
    save_model(model, tmp_path / "ok")
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        load_model(tmp_path / "missing")
    weights = tmp_path / "ok" / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="sha256 does not match"):
        load_model(tmp_path / "ok")
    (tmp_path / "ok" / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="is corrupt"):
        load_model(tmp_path / "ok")
    save_model(model, tmp_path / "ok")
    meta = json.loads((tmp_path / "ok" / "config.json").read_text())
    meta["model"]["n_layer"] = 3
    (tmp_path / "ok" / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="does not fit its config"):
        load_model(tmp_path / "ok")


def test_a_failed_save_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch) -> None:
    model = tiny("rope")
    save_model(model, tmp_path)
    before = (tmp_path / "model.safetensors").read_bytes()

    def explode(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("lextra.model.save_file", explode)
    with pytest.raises(OSError, match="disk full"):
        save_model(tiny("rope"), tmp_path)
    assert (tmp_path / "model.safetensors").read_bytes() == before
    assert load_model(tmp_path) is not None
    assert not list(tmp_path.glob(".*tmp"))


@pytest.mark.slow
def test_model_is_finite_at_long_lengths_with_a_window() -> None:
    """A 1-layer model over 131072 tokens (windowed, so it is quick): no inf/NaN for the hardest schemes."""
    for name in ("xpos", "alibi", "fire", "coca", "sinusoidal"):
        config = GPTConfig(vocab_size=17, n_layer=1, n_head=2, d_model=16, train_len=64, layer_plan=name)
        model = GPT(config).eval()
        with torch.no_grad():
            logits = model(torch.randint(0, 17, (1, 131_072)), mask="window:64")
        assert torch.isfinite(logits).all(), name


@pytest.mark.parametrize("name", ["rope", "xpos", "coca"])
@pytest.mark.parametrize("scaling", [{"type": "dynamic", "factor": 2.0}, {"type": "yarn", "factor": 4.0}])
def test_cached_decoding_with_length_dependent_scaling_is_exact(name: str, scaling: dict) -> None:
    """One layer, so every cached key depends on its token alone: at each step past L_tr the cached, re-rotated
    keys give exactly the logits of a full forward over the prefix (whose frequencies use the prefix length).
    Deeper models cache hidden states computed at their own step, as Hugging Face's caches do."""
    config = GPTConfig(
        vocab_size=61, n_layer=1, n_head=2, d_model=32, train_len=8, layer_plan=format_spec(name, {"scaling": scaling})
    )
    model = GPT(config).eval()
    tokens = torch.randint(0, 61, (1, 30))
    cache = KVCache(1)
    with torch.no_grad():
        model(tokens[:, :4], cache=cache)
        for t in range(4, 30):
            step = model(tokens[:, t : t + 1], cache=cache)[:, -1]
            full = model(tokens[:, : t + 1])[:, -1]
            torch.testing.assert_close(step, full, atol=1e-5, rtol=0)
    scheme = model.schemes[0]
    if scaling["type"] == "dynamic":  # the frequencies really did change past L_tr
        assert not torch.equal(scheme.frequencies_for(30)[0], scheme.frequencies_for(8)[0])


@pytest.mark.parametrize("name", [n for n in ALL_SCHEMES if n != "learned"])
def test_every_scheme_is_finite_in_bf16_at_long_lengths(name: str) -> None:
    """Under bf16 autocast, position math stays fp32 inside the schemes; outputs stay finite at 16k tokens."""
    config = GPTConfig(vocab_size=17, n_layer=1, n_head=2, d_model=16, train_len=64, layer_plan=name)
    model = GPT(config).eval()
    tokens = torch.randint(0, 17, (1, 16_384))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(tokens, mask="window:64")
        short = model(tokens[:, :200])  # the dense causal path too
    assert torch.isfinite(logits).all() and torch.isfinite(short).all()
    if name in ("rope", "xpos", "coca"):
        q = torch.randn(1, 2, 8, 8, dtype=torch.bfloat16)
        rotated, _ = model.schemes[0].rotate(
            q, q[..., : model.schemes[0].key_dim()], torch.arange(8) + 131_064, torch.arange(8) + 131_064
        )
        assert rotated.dtype == torch.bfloat16 and torch.isfinite(rotated).all()


def test_an_observer_sees_each_layers_attention_inputs_and_changes_nothing() -> None:
    model = tiny("xpos")
    tokens = torch.randint(0, 61, (2, 12))
    seen: list[AttentionInputs] = []
    with torch.no_grad():
        plain = model(tokens, mask="window:5")
        observed = model(tokens, mask="window:5", observer=seen.append)
        x = model.embed_inputs(model.embed(tokens), torch.arange(12))
        q, k, _ = model.blocks[0].attn.project(model.blocks[0].ln_attn(x))
    assert torch.equal(observed, plain)
    assert [inputs.layer for inputs in seen] == [0, 1]
    assert torch.equal(seen[0].q, q) and torch.equal(seen[0].k, k)  # before the position transform
    assert seen[0].mask.name == "window" and seen[0].scheme is model.scheme_for(0)
    cache, steps = model.new_cache(), []
    with torch.no_grad():
        model(tokens[:, :7], cache=cache)
        model(tokens[:, 7:9], cache=cache, observer=steps.append)
    assert steps[0].k.shape[-2] == 9 and steps[0].k_pos.tolist() == list(range(9))  # cached keys included
    assert steps[0].q_pos.tolist() == [7, 8]


def test_the_forward_pass_run_block_by_block_is_the_forward_pass() -> None:
    model = tiny("alibi")
    tokens = torch.randint(0, 61, (2, 20))
    positions, mask = torch.arange(20), build_mask("bca", 16)
    with torch.no_grad():
        x = model.embed_inputs(model.embed(tokens), positions)
        for layer in range(model.config.n_layer):
            x = model.forward_layers(x, positions, mask, start=layer, stop=layer + 1)
        assert torch.equal(model.head(model.ln_f(x)), model(tokens, mask=mask))
        assert torch.equal(model.features_from_embeddings(model.embed(tokens)), model.features(tokens))


@pytest.mark.parametrize(
    ("name", "scaling", "rotated"),
    [("rope", None, True), ("rope", {"type": "yarn", "factor": 4.0}, True), ("xpos", None, False)],
)
def test_plain_rope_caches_its_keys_rotated_and_decoding_stays_exact(name: str, scaling, rotated: bool) -> None:
    """Keys whose rotation depends on their own position alone are cached rotated (a decoding step rotates one
    key); the cache grows in buffers, so steps past its room reallocate; logits equal a full forward."""
    options = {"scaling": scaling} if scaling else {}
    config = GPTConfig(
        vocab_size=61, n_layer=2, n_head=2, d_model=32, train_len=8, layer_plan=format_spec(name, options)
    )
    model = GPT(config).eval()
    tokens = torch.randint(0, 61, (1, 300))  # past CACHE_ROOM rows of room
    cache = KVCache(2)
    with torch.no_grad():
        pieces = [model(tokens[:, :5], cache=cache)] + [model(tokens[:, t : t + 1], cache=cache) for t in range(5, 300)]
        full = model(tokens)
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=0)
    assert cache.rotated == [rotated, rotated]
    assert cache.keys[0].shape[-2] == 300 and cache.buffers[0][0].shape[-2] > 300
    if rotated:  # the cached key at position p is the projected key rotated at p
        k = model.blocks[0].attn.project(
            model.blocks[0].ln_attn(model.embed_inputs(model.embed(tokens), torch.arange(300)))
        )[1]
        positions = torch.arange(300)
        torch.testing.assert_close(
            cache.keys[0], model.schemes[0].rotate(k, k, positions, positions)[1], atol=1e-5, rtol=0
        )
    with pytest.raises(ValueError, match="same model settings"):
        cache.extend(0, cache.keys[0][..., -1:, :], cache.values[0][..., -1:, :], rotated=not rotated)


def test_length_dependent_rotations_are_not_cached_rotated() -> None:
    dynamic = GPTConfig(
        vocab_size=61, train_len=8, layer_plan=format_spec("rope", {"scaling": {"type": "dynamic", "factor": 2.0}})
    )
    assert GPT(dynamic).schemes[0].rotates_keys_alone is False
    assert GPT(GPTConfig(vocab_size=61, train_len=8, layer_plan="rope")).schemes[0].rotates_keys_alone is True
