"""The 2024-26 Hugging Face decoder families on lextra's adapter: tiny random models of each (transformers 5.24),
checked against the family's own forward past its sliding window, with and without the cache and through
`generate()`; their layers in plan vocabulary; layer-selected scalings and extension methods, and the refusals."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import transformers

from lextra.analysis import layer_attention
from lextra.errors import ConfigError
from lextra.extend import InferenceSetup
from lextra.hf import HFCausalLM, adapt
from lextra.hf.families import DECODER_FAMILIES

VOCAB = 96
WINDOW = 8
#: each family's tiny config beyond the shared sizes: two layers of different kinds where the family has kinds
FAMILIES: dict[str, dict[str, Any]] = {
    "llama": {},
    "mistral": {"sliding_window": WINDOW},
    "qwen2": {"use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 1},
    "qwen3": {"use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 1},
    "gemma2": {"sliding_window": WINDOW, "query_pre_attn_scalar": 16, "final_logit_softcapping": 30.0},
    "gemma3_text": {"sliding_window": WINDOW, "sliding_window_pattern": 2, "final_logit_softcapping": 30.0},
    "smollm3": {"no_rope_layer_interval": 2},
    "gpt_oss": {
        "sliding_window": WINDOW,
        "num_local_experts": 2,
        "num_experts_per_tok": 1,
        "rope_parameters": {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 8,
            "rope_theta": 10000.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": False,
        },
    },
    "phi3": {"sliding_window": WINDOW},
    "phi": {"partial_rotary_factor": 0.5},
    "cohere2": {"sliding_window": WINDOW, "sliding_window_pattern": 2},
    "olmo2": {},
    "olmo3": {"sliding_window": WINDOW, "layer_types": ["sliding_attention", "full_attention"]},
    "llama4_text": {
        "attention_chunk_size": WINDOW,
        "no_rope_layer_interval": 2,
        "floor_scale": 4,
        "num_local_experts": 2,
        "intermediate_size_mlp": 96,
        "interleave_moe_layer_step": 2,
    },
}
#: each family's layers in plan vocabulary, as `--layers-select` reads them
PLANS = {
    "llama": ["rope,base=10000.0"] * 2,
    "mistral": ["rope,base=10000.0+window:8"] * 2,
    "qwen2": ["rope,base=10000.0", "rope,base=10000.0+window:8"],
    "qwen3": ["rope,base=10000.0+qknorm", "rope,base=10000.0+window:8+qknorm"],
    "gemma2": ["rope,base=10000.0+window:8+softcap,cap=50.0", "rope,base=10000.0+softcap,cap=50.0"],
    "gemma3_text": ["rope,base=10000.0+window:8+qknorm", "rope,base=1000000.0+qknorm"],
    "smollm3": ["rope,base=2000000.0", "nope"],
    "gpt_oss": ["rope,base=10000.0+window:8+sinks", "rope,base=10000.0+sinks"],
    "phi3": ["rope,base=10000.0+window:8"] * 2,
    "phi": ["rope,base=10000.0,fraction=0.5"] * 2,
    "cohere2": ["rope,base=10000.0+window:8", "nope"],
    "olmo2": ["rope,base=10000.0+qknorm"] * 2,
    "olmo3": ["rope,base=500000.0+window:8+qknorm", "rope,base=500000.0+qknorm"],
    "llama4_text": ["rope,base=500000.0+chunk:8+qknorm,weight=false", "nope+temp_tuning,beta=0.1,gamma=4.0"],
}
#: families an extension method applies to by default (a global rotary layer; Gemma 2's with its softcap,
#: gpt-oss's with its sinks)
EXTENDED = ["llama", "qwen2", "qwen3", "gemma2", "gemma3_text", "smollm3", "gpt_oss", "phi", "olmo2", "olmo3"]


def tiny(model_type: str, seed: int = 0, scale_qk: float = 1.0, **overrides: Any) -> Any:
    torch.manual_seed(seed)
    options = dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=32,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    options.update(FAMILIES[model_type])
    options.update(overrides)
    config = transformers.AutoConfig.for_model(model_type, **options)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    if scale_qk != 1.0:  # attention that depends strongly on positions
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.q_proj.weight.mul_(scale_qk)
                layer.self_attn.k_proj.weight.mul_(scale_qk)
    return model


def ids(length: int = 40, batch: int = 2) -> torch.Tensor:
    return torch.randint(3, VOCAB, (batch, length), generator=torch.Generator().manual_seed(1))


def test_every_adapted_family_is_tested() -> None:
    assert set(FAMILIES) == set(DECODER_FAMILIES) == set(PLANS)


@pytest.mark.parametrize("family", list(FAMILIES))
@torch.no_grad()
def test_each_family_equals_its_own_transformers_forward_cache_and_generate(family: str) -> None:
    """Past the window (40 tokens, window and chunk 8): logits, features + head, cached decoding and greedy
    `generate()` (its logits at every step) equal the family's own forward to 1e-5; the layers read as a plan."""
    reference = tiny(family)
    tokens = ids()
    want = reference(tokens).logits
    model = adapt(copy.deepcopy(reference))
    assert isinstance(model, HFCausalLM) and [v.spec() for v in model.variants] == PLANS[family]
    assert (model(tokens) - want).abs().max() < 1e-5
    assert (model.head(model.features(tokens)) - want).abs().max() < 1e-5
    cache = model.new_cache()
    steps = [model(tokens[:, :30], cache=cache)] + [model(tokens[:, t : t + 1], cache=cache) for t in range(30, 40)]
    assert (torch.cat(steps, dim=1) - want).abs().max() < 1e-5
    options = dict(max_new_tokens=6, do_sample=False, output_logits=True, return_dict_in_generate=True)
    theirs = reference.generate(tokens[:, :30], **options)
    ours = model.model.generate(tokens[:, :30], **options)
    assert torch.equal(ours.sequences, theirs.sequences)
    assert max(float((a - b).abs().max()) for a, b in zip(ours.logits, theirs.logits, strict=True)) < 1e-5


@pytest.mark.parametrize("family", ["qwen3", "gemma2", "gemma3_text", "gpt_oss", "cohere2", "llama4_text"])
@torch.no_grad()
def test_captured_attention_of_each_kind_of_layer_equals_eager_weights(family: str) -> None:
    """What the analyses read (each layer's own mask, sinks and softcap) equals the family's eager weights."""
    reference = tiny(family)
    tokens = ids(length=20, batch=1)
    eager = copy.deepcopy(reference)
    eager.set_attn_implementation("eager")
    want = eager(tokens, output_attentions=True).attentions
    views = list(layer_attention(adapt(reference), tokens, "causal", block_size=8))
    for view, weights in zip(views, want, strict=True):
        got = torch.zeros_like(weights)
        for b in view.blocks():
            got[..., int(b.q_pos[0]) : int(b.q_pos[-1]) + 1, int(b.k_pos[0]) : int(b.k_pos[-1]) + 1] = b.weights()
        assert (got - weights).abs().max() < 1e-5


@pytest.mark.parametrize("family", [f for f in FAMILIES if f not in ("gpt_oss", "phi3")])
@torch.no_grad()
def test_a_scaling_on_the_rotary_layers_equals_transformers_scaled_model(family: str) -> None:
    """`--rope-scaling linear:2 --layers-select rotary` gives the family's own model with that scaling in its
    `rope_parameters` (every rotary layer; Hugging Face's rotation, NoPE layers untouched). gpt-oss ships YaRN
    (refused: lextra scales plain RoPE), Phi-3's config accepts only `longrope`, so neither has such a model."""
    plain = tiny(family)
    params = copy.deepcopy(plain.config.rope_parameters)
    for entry in [v for v in params.values() if isinstance(v, dict)] or [params]:
        entry.update(rope_type="linear", factor=2.0)
    scaled = tiny(family, rope_parameters=params)
    scaled.load_state_dict(plain.state_dict())
    tokens = ids()
    model = InferenceSetup(rope_scaling="linear:2", layers="rotary").apply(adapt(copy.deepcopy(plain)))
    assert (model(tokens) - scaled(tokens).logits).abs().max() < 1e-5


@torch.no_grad()
def test_gemma3_s_scaling_applies_to_its_global_layers_as_transformers_does() -> None:
    """A RoPE scaling on Gemma 3 goes to its full-attention layers by default: transformers' own model with the
    scaling in `rope_parameters["full_attention"]`; `--layers-select all` also scales the sliding layers."""
    plain = tiny("gemma3_text")
    params = copy.deepcopy(plain.config.rope_parameters)
    params["full_attention"] = {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0}
    scaled = tiny("gemma3_text", rope_parameters=params)
    scaled.load_state_dict(plain.state_dict())
    tokens = ids()
    model = InferenceSetup(rope_scaling="linear:2").apply(adapt(copy.deepcopy(plain)))
    assert (model(tokens) - scaled(tokens).logits).abs().max() < 1e-5
    everywhere = InferenceSetup(rope_scaling="linear:2", layers="all").apply(adapt(copy.deepcopy(plain)))
    assert (everywhere(tokens) - model(tokens)).abs().max() > 1e-3
    InferenceSetup(rope_scaling=None, layers="all").apply(everywhere)
    assert (everywhere(tokens) - plain(tokens).logits).abs().max() < 1e-5


@torch.no_grad()
def test_a_scaling_on_some_layers_rotates_each_as_transformers_would() -> None:
    """YaRN on layer 0 only of a Llama: layer 0 attends as transformers' YaRN model, layer 1 as its plain one,
    on the same inputs (lextra rotates each layer with its own frequencies)."""
    plain = tiny("llama", scale_qk=4.0)
    scaled = tiny("llama", scale_qk=4.0, rope_parameters={"rope_type": "linear", "factor": 4.0, "rope_theta": 1e4})
    scaled.load_state_dict(plain.state_dict())
    model = InferenceSetup(rope_scaling="linear:4", layers="0").apply(adapt(copy.deepcopy(plain)))
    assert any(layer.rotary is not None for layer in model.state.layers)  # the layers no longer share one rotation
    inputs: list[torch.Tensor] = []
    outputs: list[torch.Tensor] = []

    def record(module: Any, args: Any, kwargs: dict[str, Any], out: Any) -> None:
        inputs.append(kwargs["hidden_states"])
        outputs.append(out[0])

    for layer in model.inner.layers:
        layer.self_attn.register_forward_hook(record, with_kwargs=True)
    tokens = ids()
    model(tokens)
    positions = torch.arange(40)[None]
    for index, reference in ((0, scaled), (1, plain)):
        attn = reference.model.layers[index].self_attn
        rotary = reference.model.rotary_emb(inputs[index], positions)
        want = attn(inputs[index], position_embeddings=rotary, attention_mask=None)[0]
        assert (outputs[index] - want).abs().max() < 1e-5
    assert (model(tokens) - plain(tokens).logits).abs().max() > 1e-3


@pytest.mark.parametrize("family", EXTENDED)
@torch.no_grad()
def test_an_extension_that_changes_nothing_keeps_each_family_s_logits(family: str) -> None:
    """Self-Extend with a window past the input moves no position: on the layers it takes (global rotary ones)
    and with lextra rotating the others, each family's logits stay its own, with and without the cache."""
    reference = tiny(family, scale_qk=4.0, max_position_embeddings=64)
    tokens = ids()
    want = reference(tokens).logits
    model = InferenceSetup(extension="self_extend:window=63").apply(adapt(copy.deepcopy(reference)))
    rotary = [i for i, v in enumerate(model.variants) if v.rotary and not v.local]
    assert model.extension is not None and sorted(model.state.extended) == rotary
    assert (model(tokens) - want).abs().max() < 1e-5
    cache = model.new_cache()
    steps = [model(tokens[:, :30], cache=cache)] + [model(tokens[:, t : t + 1], cache=cache) for t in range(30, 40)]
    assert (torch.cat(steps, dim=1) - want).abs().max() < 1e-5
    changed = InferenceSetup(extension="self_extend:window=4,group=4").apply(adapt(copy.deepcopy(reference)))
    assert (changed(tokens) - want).abs().max() > 1e-3


@pytest.mark.parametrize(
    ("family", "setup", "message"),
    [
        ("smollm3", {"extension": "self_extend", "layers": "nope"}, r"layer 1 \(it is a NoPE layer"),
        ("smollm3", {"rope_scaling": "yarn:2", "layers": "1"}, r"layer 1 \(it is a NoPE layer, with no RoPE"),
        ("mistral", {"extension": "self_extend"}, "window:8 mask .* set sliding_window to null"),
        ("gpt_oss", {"extension": "rerope", "layers": "0"}, r"layer 0 \(it attends through a window:8 mask"),
        ("gpt_oss", {"rope_scaling": "yarn:2"}, "already uses rope_type 'yarn'"),
        ("cohere2", {"extension": "dca", "layers": "global"}, r"layer 1 \(it is a NoPE layer"),
        ("gemma3_text", {"log_scaling": "ssmax"}, "ssmax is a learned per-head scale"),
        ("llama", {"temp_tuning": "temp_tuning"}, "NoPE layers by default and this model has none"),
    ],
)
def test_what_a_layer_cannot_take_is_refused_in_one_line(family: str, setup: dict, message: str) -> None:
    model = adapt(tiny(family))
    with pytest.raises(ConfigError, match=message) as caught:
        InferenceSetup(**setup).apply(model)
    assert "\n" not in str(caught.value)


@torch.no_grad()
def test_temperature_tuning_and_log_scaling_on_selected_layers() -> None:
    """Llama 4's temperature tuning added to SmolLM3's NoPE layer equals scaling its queries as Llama 4 does;
    a log-n scaling on the global layers leaves the others' logits alone."""
    reference = tiny("smollm3", scale_qk=4.0)
    tokens = ids()
    model = InferenceSetup(temp_tuning="temp_tuning,beta=0.5,gamma=4").apply(adapt(copy.deepcopy(reference)))
    assert [i for i, layer in enumerate(model.state.layers) if layer.temp_tuning] == [1]
    queries = copy.deepcopy(reference)
    attn = queries.model.layers[1].self_attn
    scale = torch.log1p(torch.floor((torch.arange(40).float() + 1.0) / 4)) * 0.5 + 1.0
    attn.q_proj.register_forward_hook(lambda m, a, out: out * scale[None, :, None])
    assert (model(tokens) - queries(tokens).logits).abs().max() < 1e-5
    logn = InferenceSetup(log_scaling="qwen", layers="nope").apply(adapt(copy.deepcopy(reference)))
    assert [i for i, layer in enumerate(logn.state.layers) if layer.log_scaling == "qwen"] == [1]
    assert (logn(tokens)[:, :32] - reference(tokens).logits[:, :32]).abs().max() < 1e-5
    assert (logn(tokens)[:, 32:] - reference(tokens).logits[:, 32:]).abs().max() > 1e-4


#: the methods the backend tests extend with, at the tiny models' trained length 32 (active past it)
BACKEND_METHODS = ["self_extend:group=4,window=8", "dca:chunk=24", "rerope:window=12"]


def _spied(monkeypatch: pytest.MonkeyPatch, module: Any, names: list[str], calls: list[str]) -> None:
    """Record in `calls` the name of each of `module`'s functions `names` as it is called."""
    for name in names:
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real, _name=name, **k: calls.append(_name) or _real(*a, **k))


def _full_and_cached(model: HFCausalLM, tokens: torch.Tensor, prefill: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The logits of a full forward, and of a prefill followed by one-token cached decoding steps."""
    cache = model.new_cache()
    steps = [model(tokens[:, :prefill], cache=cache)]
    steps += [model(tokens[:, t : t + 1], cache=cache) for t in range(prefill, tokens.shape[1])]
    return model(tokens), torch.cat(steps, dim=1)


def _relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max())


@pytest.mark.parametrize("method", BACKEND_METHODS)
@pytest.mark.parametrize("family", ["llama", "gemma2", "gpt_oss"])
@torch.no_grad()
def test_an_extended_family_gives_the_same_logits_on_the_reference_backend_and_auto(
    family: str, method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The extended layers attend through one `attention` call with the state's method: under
    `backend='reference'` the method's dense reference, under 'auto' its tiled passes (CPU), with the layer's
    softcap (Gemma 2) or sinks (gpt-oss); the same logits (1e-5 relative) past the trained length, in a full
    forward and in cached decoding (one-token steps folded onto the key/value heads)."""
    import lextra.attention.backends.reference as dense
    import lextra.attention.backends.tiled as tiled

    model = InferenceSetup(extension=method).apply(adapt(tiny(family, scale_qk=4.0)))
    method_of = model.state.layers[model.state.extended[0]].extension
    assert method_of is not None and method_of is model.extension  # the method itself, kept in the state
    tokens = ids(48)
    calls: list[str] = []
    _spied(monkeypatch, dense, ["extension_logits"], calls)
    _spied(monkeypatch, tiled, ["tiled_extension"], calls)
    logits = {}
    for backend in ("auto", "reference"):
        calls.clear()
        model.state.backend = backend
        logits[backend] = _full_and_cached(model, tokens, 36)
        want = "extension_logits" if backend == "reference" else "tiled_extension"
        assert set(calls) == {want} and len(calls) == len(model.state.extended) * (2 + 12)
    assert model.state.layers[model.state.extended[0]].extension is method_of  # not rebuilt per call
    for auto, reference in zip(logits["auto"], logits["reference"], strict=True):
        assert _relative(auto, reference) < 1e-5
    plain = adapt(tiny(family, scale_qk=4.0))(tokens)
    assert (logits["auto"][0][:, 32:] - plain[:, 32:]).abs().max() > 1e-3  # the method is active past 32


@pytest.mark.parametrize("family", ["llama", "gpt_oss"])
@torch.no_grad()
def test_backend_flex_reaches_an_extended_family_s_flex_passes(family: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`backend='flex'` runs the extended layers as one FlexAttention call per pass (eager on CPU: forward only,
    small inputs), with gpt-oss's sinks, and gives the reference's logits in a full forward and cached decoding."""
    import lextra.attention.backends.flex as flex
    import lextra.attention.backends.tiled as tiled

    model = InferenceSetup(extension="self_extend:group=4,window=8").apply(adapt(tiny(family, scale_qk=4.0)))
    tokens = ids(40, batch=1)
    model.state.backend = "reference"
    want = _full_and_cached(model, tokens, 36)
    calls: list[str] = []
    _spied(monkeypatch, flex, ["flex_passes"], calls)
    _spied(monkeypatch, tiled, ["tiled_extension"], calls)
    model.state.backend = "flex"
    got = _full_and_cached(model, tokens, 36)
    assert calls == ["flex_passes"] * len(model.state.extended) * (2 + 4)
    for mine, theirs in zip(got, want, strict=True):
        assert _relative(mine, theirs) < 1e-5


@torch.no_grad()
def test_the_backend_an_evaluation_names_reaches_every_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    """`features(backend=...)` (what `lextra eval --backend` passes) runs each plain layer on that backend, as a
    lextra model's layers; every backend gives Hugging Face's own hidden states, and the state's backend is back
    to 'auto' afterwards. An unknown name is refused in one line."""
    import lextra.attention.backends.dispatch as dispatch

    reference = tiny("llama", scale_qk=4.0)
    model = adapt(copy.deepcopy(reference))
    tokens = ids()
    want = reference.model(tokens).last_hidden_state
    chosen: list[str] = []
    real = dispatch.resolve_backend
    monkeypatch.setattr(dispatch, "resolve_backend", lambda ctx: chosen.append(real(ctx).name) or real(ctx))
    for backend in ("reference", "chunked", "sdpa", "flex"):
        chosen.clear()
        assert (model.features(tokens, backend=backend) - want).abs().max() < 1e-5, backend
        assert chosen == [backend] * 2 and model.state.backend == "auto"
    with pytest.raises(ConfigError, match="unknown attention backend 'dense'") as caught:
        model.features(tokens, backend="dense")
    assert "\n" not in str(caught.value)
