"""`InferenceSetup`: one way to set a trained model's RoPE scaling, temperatures, log-n scaling, extension method
and mask, on lextra GPTs and Hugging Face adapters, with the same numbers as the settings it replaces; and
`prepared`, which goes through it and refuses method names it does not know."""

from __future__ import annotations

import copy

import pytest
import torch
import transformers

from lextra.errors import ConfigError
from lextra.extend import KEEP, ExtensionMethod, InferenceSetup, build_extension
from lextra.hf import HFCausalLM, HFSeq2Seq, adapt
from lextra.methods import known_methods, methods_for, prepared
from lextra.model import GPT, GPTConfig
from lextra.positions.scaling import parse_rope_scaling

VOCAB = 60


def _gpt(scheme: str = "rope", seed: int = 0, **config) -> GPT:
    """2 layers, L = 16, q and k scaled up so that attention depends on position."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=VOCAB, n_layer=2, n_head=2, d_model=32, train_len=16, layer_plan=scheme, **config))
    with torch.no_grad():
        for block in model.blocks:
            block.attn.q_proj.weight.mul_(8.0)
            block.attn.k_proj.weight.mul_(8.0)
    return model.eval()


def _tokens(length: int = 40) -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, length), generator=torch.Generator().manual_seed(3))


TAU = [[0.5, 2.0], [1.5, 0.75]]


@torch.no_grad()
def test_a_setup_gives_a_gpt_the_logits_of_the_settings_it_replaces() -> None:
    base, ids = _gpt(), _tokens()
    old = copy.deepcopy(base)
    old._set_scheme_options(scaling={"rope_type": "yarn", "factor": 2.0})
    InferenceSetup(temperatures=TAU).apply(old)
    InferenceSetup(log_scaling="qwen").apply(old)
    new = InferenceSetup(rope_scaling="yarn:2", temperatures=TAU, log_scaling="qwen").apply(copy.deepcopy(base))
    assert torch.equal(new(ids), old(ids))
    assert new.config.to_dict() == old.config.to_dict()
    assert not torch.allclose(new(ids), base(ids), atol=1e-3)
    # and back: no scaling, temperatures 1, no log scaling is the trained model exactly
    InferenceSetup(rope_scaling=None, temperatures=None, log_scaling="none").apply(new)
    assert torch.equal(new(ids), base(ids)) and new.config.to_dict() == base.config.to_dict()


@torch.no_grad()
def test_a_setup_s_extension_is_its_reference() -> None:
    base, ids = _gpt(), _tokens()
    new = InferenceSetup(extension="rerope:window=8").apply(copy.deepcopy(base))
    assert all(isinstance(block.attn.extension, ExtensionMethod) for block in new.blocks)
    assert (new(ids) - new(ids, backend="reference")).abs().max() < 1e-5
    InferenceSetup(extension="none").apply(new)
    assert all(block.attn.extension is None for block in new.blocks)
    assert torch.equal(new(ids), base(ids))


@torch.no_grad()
def test_a_setup_s_mask_is_the_mask_calls_use_when_they_name_none() -> None:
    model, ids = _gpt("alibi"), _tokens()
    causal = model(ids)
    InferenceSetup(mask="window:8").apply(model)
    assert torch.equal(model(ids), model(ids, mask="window:8"))
    assert not torch.allclose(model(ids), causal, atol=1e-4)
    assert torch.equal(model(ids, mask="causal"), causal)  # a call's own mask wins
    InferenceSetup(mask=None).apply(model)
    assert model.blocks[0].attn.inference.mask is None and torch.equal(model(ids), causal)


def test_a_setup_leaves_what_it_keeps_and_lists_what_it_changes() -> None:
    setup = InferenceSetup(temperatures=None, log_scaling="qwen")
    assert setup.changes() == {"temperatures": None, "log_scaling": "qwen"}
    assert InferenceSetup().changes() == {} and InferenceSetup().rope_scaling is KEEP
    model = _gpt()
    InferenceSetup(temperatures=TAU).apply(model)
    InferenceSetup(log_scaling="qwen").apply(model)
    assert model.config.temperatures == TAU and all(b.attn.inference.log_scaling == "qwen" for b in model.blocks)
    with pytest.raises(AttributeError):
        setup.mask = "causal"  # type: ignore[misc]


def test_a_setup_refuses_what_the_model_cannot_take() -> None:
    with pytest.raises(ConfigError, match="rope scaling applies to rope, xpos and coca models, not 'alibi'"):
        InferenceSetup(rope_scaling="yarn:2").apply(_gpt("alibi"))
    unscaled = InferenceSetup(rope_scaling=None).apply(_gpt("alibi"))
    assert unscaled.config.plan()[0].scheme_options == {}  # nothing to remove
    with pytest.raises(ConfigError, match="cannot switch to 'ssmax'"):
        InferenceSetup(log_scaling="ssmax").apply(_gpt())
    with pytest.raises(ConfigError, match="cannot switch to 'none'"):
        InferenceSetup(log_scaling="none").apply(_gpt("rope+logn:ssmax"))
    with pytest.raises(ConfigError, match="log-n scaling must be one of none, qwen, ssmax"):
        InferenceSetup(log_scaling="log").apply(_gpt())
    with pytest.raises(ConfigError, match=r"temperatures must be \d+ lists of \d+ positive numbers"):
        InferenceSetup(temperatures=[[1.0]]).apply(_gpt())
    with pytest.raises(ConfigError, match="drop the mask"):
        InferenceSetup(mask="window:8", extension="rerope:window=8").apply(_gpt())
    extended = InferenceSetup(extension="rerope:window=8").apply(_gpt())
    with pytest.raises(ConfigError, match="drop the mask"):
        InferenceSetup(mask="bca:8").apply(extended)
    with pytest.raises(ConfigError, match="not dict"):
        InferenceSetup(temperatures=None).apply({})
    with pytest.raises(ConfigError, match="unknown extension method"):
        InferenceSetup(extension=lambda *args, **kwargs: None).apply(extended)  # type: ignore[arg-type]
    with pytest.raises(AttributeError, match="no setter"):  # read-only: a setup sets it
        extended.blocks[0].attn.extension = None


@torch.no_grad()
def test_prepared_goes_through_the_setup_and_refuses_unknown_methods() -> None:
    base, ids = _gpt(), _tokens()
    yarn = prepared(base, "yarn", None, 40, 2.0)
    assert torch.equal(yarn(ids), InferenceSetup(rope_scaling="yarn:2").apply(copy.deepcopy(base))(ids))
    dynamic = prepared(base, "dynamic", None, 40, 4.0)
    assert dynamic.config.plan()[0].scheme_options["scaling"] == {"rope_type": "dynamic", "factor": 1.0}
    qwen = prepared(base, "qwen", None, 40, 2.0)
    assert all(b.attn.inference.log_scaling == "qwen" for b in qwen.blocks)
    extended = prepared(base, "extend:rerope:window=8", None, 40, 2.0)
    assert torch.equal(extended(ids), InferenceSetup(extension="rerope:window=8").apply(copy.deepcopy(base))(ids))
    for unchanged in ("none", "pmax"):  # alignment at the training length: nothing to align
        assert torch.equal(prepared(base, unchanged, None, 16, 2.0)(ids), base(ids))
    assert base.config.plan()[0].scheme_options == {}  # the original is untouched
    assert all(b.attn.inference.log_scaling == "none" for b in base.blocks)
    with pytest.raises(ConfigError, match="unknown inference method 'yarn2'; choose one of none, linear, ntk"):
        prepared(base, "yarn2", None, 40, 2.0)
    assert "extend:NAME" in known_methods()


@torch.no_grad()
def test_stretch_methods_are_the_registries_names(monkeypatch) -> None:
    from lextra.positions.logn import LOG_SCALINGS, LogScaling

    class Doubled(LogScaling):
        name = "doubled"

        @staticmethod
        def factor(q_pos, k_pos, mask, train_len, scale):
            return torch.full((1, q_pos.numel()), 2.0)

    monkeypatch.setitem(LOG_SCALINGS._classes, "doubled", Doubled)  # as a plugin registers it
    base, ids = _gpt(), _tokens()
    assert methods_for(base)[-2:] == ["qwen", "doubled"] and "doubled" in known_methods()
    doubled = prepared(base, "doubled", None, 40, 2.0)
    assert all(block.attn.inference.log_scaling == "doubled" for block in doubled.blocks)
    assert not torch.equal(doubled(ids), base(ids))
    assert methods_for(_gpt("alibi"), ["extend:rerope"]) == ["none", "pmax", "entropy", "log-length", "qwen", "doubled"]


def _tiny_llama(seed: int = 0):
    torch.manual_seed(seed)
    config = transformers.AutoConfig.for_model(
        "llama",
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=16,
        rope_theta=10000.0,
    )
    return transformers.AutoModelForCausalLM.from_config(config).eval()


@torch.no_grad()
def test_a_setup_gives_a_hugging_face_adapter_the_logits_of_the_settings_it_replaces() -> None:
    reference = _tiny_llama()
    ids = _tokens(40)
    tau = torch.tensor([[0.5, 1.0, 2.0, 3.0], [1.0, 1.5, 0.75, 1.25]])
    old = adapt(copy.deepcopy(reference))
    old._scale_rope(parse_rope_scaling("yarn:2"), [0, 1])
    for step in (
        InferenceSetup(temperatures=tau),
        InferenceSetup(log_scaling="qwen"),
        InferenceSetup(mask="window:12"),
    ):
        step.apply(old)
    new = adapt(copy.deepcopy(reference))
    assert isinstance(new, HFCausalLM)
    setup = InferenceSetup(rope_scaling="yarn:2", temperatures=tau, log_scaling="qwen", mask="window:12")
    assert setup.apply(new) is new
    assert torch.equal(new(ids), old(ids))
    assert not torch.allclose(new(ids), reference(ids).logits, atol=1e-3)
    # swap the mask for an extension in one setup, as the mask then the extension primitives would
    InferenceSetup(mask=None).apply(old)
    InferenceSetup(extension=build_extension("rerope:window=8", 16)).apply(old)
    InferenceSetup(mask=None, extension="rerope:window=8").apply(new)
    assert new.extension is not None and torch.equal(new(ids), old(ids))
    InferenceSetup(rope_scaling=None, temperatures=None, log_scaling="none", extension=None).apply(new)
    assert (new(ids) - reference(ids).logits).abs().max() < 1e-5


def test_a_t5_adapter_refuses_rope_scalings_and_extensions() -> None:
    torch.manual_seed(0)
    config = transformers.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, decoder_start_token_id=0
    )
    model = adapt(transformers.T5ForConditionalGeneration(config).eval())
    assert isinstance(model, HFSeq2Seq)
    with pytest.raises(ConfigError, match="t5 models have no RoPE to scale"):
        InferenceSetup(rope_scaling="yarn:2").apply(model)
    with pytest.raises(ConfigError, match="extension methods apply to rotary models, not t5"):
        InferenceSetup(extension="rerope").apply(model)
    InferenceSetup(temperatures=torch.full((2, 4), 2.0), extension=None).apply(model)
    assert model.config.temperatures == [[2.0] * 4] * 2
