"""Layer plans (`lextra.attention.plan`) and the attention pieces they add: a one-variant plan is today's model bit
for bit; every piece equals its authors' definition (transformers' gpt_oss, gemma2, qwen3, llama4, phi and
proportional RoPE code called on the same tensors) and its dense reference in every backend; presets round-trip
through save/load; inference-time changes address layers and refuse the ones that cannot take them."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch
import virtual_device as vd
from test_analysis import corpus  # noqa: F401  (the fixture)

from lextra.attention import attention, build_mask
from lextra.attention.pieces import PIECES, QKNorm, temperature_tuning_scale
from lextra.attention.plan import PRESETS, format_plan, parse_plan, select_layers
from lextra.errors import ConfigError
from lextra.extend import InferenceSetup
from lextra.layer_inputs import LayerInputs
from lextra.model import GPT, GPTConfig, load_model, save_model
from lextra.positions import HeadDims, build_scheme

TOL = 1e-5
BACKENDS = ("reference", "sdpa", "chunked", "flex")


def _tiny(plan: str = "rope", n_layer: int = 4, **options) -> GPT:
    config = GPTConfig(vocab_size=61, n_layer=n_layer, n_head=2, d_model=32, train_len=16, layer_plan=plan, **options)
    return GPT(config)


# ------------------------------------------------------------------------------------------------ the plan


@pytest.mark.parametrize(("plan", "scheme"), [("rope", "rope"), ("4*fire", "fire"), ("(t5);t5", "t5")])
def test_a_one_variant_plan_is_todays_model_bit_for_bit(plan: str, scheme: str) -> None:
    torch.manual_seed(3)
    today = GPT(GPTConfig(vocab_size=61, n_layer=4, n_head=2, d_model=32, train_len=16, layer_plan=scheme))
    torch.manual_seed(3)
    planned = _tiny(plan)
    tokens = torch.randint(0, 61, (2, 40))
    assert list(today.state_dict()) == list(planned.state_dict())
    pairs = zip(today.state_dict().values(), planned.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    assert len(today.schemes) == len(planned.schemes)
    assert torch.equal(today(tokens), planned(tokens))


def test_a_config_writes_its_plan_alone_and_reads_a_scheme_as_the_plan_of_one_variant(tmp_path) -> None:
    config = GPTConfig()
    written = config.to_dict()
    assert written["layer_plan"] == "rope" and not {"scheme", "scheme_options", "log_scaling"} & set(written)
    old = {**{k: v for k, v in written.items() if k != "layer_plan"}, "scheme": "rope", "scheme_options": {}}
    assert GPTConfig.from_dict({**old, "log_scaling": "none"}).plan() == parse_plan("rope", config.n_layer)
    model = save_model(_tiny(), tmp_path / "m")
    meta = json.loads((model / "config.json").read_text())
    assert meta["model"]["layer_plan"] == "rope" and "scheme" not in meta["model"]
    assert load_model(model).config.layer_plan == "rope"


def test_a_config_stating_scheme_options_and_log_scaling_reads_as_the_plan_they_make() -> None:
    shape = {"vocab_size": 61, "n_layer": 4, "n_head": 2, "d_model": 32, "train_len": 16}
    old = GPTConfig.from_dict({**shape, "scheme": "rope", "scheme_options": {"base": 500}, "log_scaling": "ssmax"})
    assert old.layer_plan == "rope,base=500.0+logn,kind=ssmax"
    torch.manual_seed(0)
    read = GPT(old)
    torch.manual_seed(0)
    written = GPT(GPTConfig(**shape, layer_plan="rope,base=500+logn:ssmax"))
    assert list(read.state_dict()) == list(written.state_dict()) and "blocks.0.attn.ssmax_scale" in read.state_dict()
    pairs = zip(read.state_dict().values(), written.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    # a plan's own logn piece stays; the model-wide scaling goes to the layers without one
    swan = GPTConfig.from_dict({**shape, "layer_plan": "swan,window=8", "log_scaling": "ssmax"})
    assert [v.pieces.get("logn") for v in swan.plan()] == [{"kind": "ssmax"}] * 3 + [{"kind": "qwen"}]
    assert [b.attn.inference.log_scaling for b in GPT(swan).blocks] == ["ssmax"] * 3 + ["qwen"]


def test_scheme_flags_state_the_plan_and_a_rope_scaling_takes_its_rotary_layers() -> None:
    from lextra.cli.app import build_parser
    from lextra.cli.training_options import train_config_from

    def plan(*flags: str) -> list:
        return train_config_from(build_parser().parse_args(["train", "--out", "x", *flags])).model.plan()

    one = plan("--scheme", "alibi", "--scheme-option", "slope_shift=1")
    assert [(v.scheme, v.scheme_options) for v in one] == [("alibi", {"slope_shift": 1.0})] * 4
    scaled = plan("--layer-plan", "rnope-swa,window=8", "--rope-scaling", "yarn:2")
    assert ["scaling" in v.scheme_options for v in scaled] == [True, True, True, False]
    with pytest.raises(ConfigError, match="--scheme and --layer-plan both state the model's layers"):
        plan("--scheme", "alibi", "--layer-plan", "gemma3")


def test_the_grammar_repeats_groups_and_cycles_to_n_layer() -> None:
    variants = parse_plan("3*(rope,base=10000+window:1024);rope,base=1000000", 9)
    local = [v.local for v in variants]
    assert local == [True, True, True, False, True, True, True, False, True]
    assert variants[0].scheme_options == {"base": 10000.0} and variants[0].mask == "window,width=1024"
    assert variants[3].scheme_options == {"base": 1000000.0} and variants[3].mask == "causal"
    assert parse_plan(format_plan(variants), 9) == variants
    nested = parse_plan("2*(nope;2*(rope+sinks))", 6)
    assert [v.scheme for v in nested] == ["nope", "rope", "rope"] * 2
    assert [list(v.pieces) for v in nested[:3]] == [[], ["sinks"], ["sinks"]]


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        ("rope;;nope", "empty layer"),
        ("rope+windw:4", "'windw' is neither a mask"),
        ("rope+window:4+chunk:8", "names two masks"),
        ("rope+sinks+sinks", "names 'sinks' twice"),
        ("3*(rope;nope", "an opening .* without its closing one"),
        ("window:4", "not a position scheme"),
        ("gemma3,windw=4", "preset 'gemma3' has no option windw; its options: window"),
        ("gemma3,window=-4", "must be a positive int"),
        ("rope+softcap:-1", "softcap: cap must be"),
        ("rope+gate:rowwise", "gate: kind must be one of elementwise, headwise"),
        ("rope,fraction=0.2", "must rotate an even number"),
        ("rope,fraction=0.5,proportional=0.5", "exclude each other"),
    ],
)
def test_bad_plans_are_one_line_errors_naming_the_fix(plan: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        GPTConfig(n_layer=4, n_head=2, d_model=32, layer_plan=plan).validate()


def test_a_plan_refuses_a_different_scheme_beside_it_and_per_layer_absolute_embeddings() -> None:
    with pytest.raises(ConfigError, match="drop scheme='alibi'"):
        GPTConfig.from_dict({"scheme": "alibi", "layer_plan": "gemma3"})
    with pytest.raises(ConfigError, match="sinusoidal adds its positions to the input embedding once"):
        GPTConfig(layer_plan="sinusoidal;rope").validate()


EXPECTED_PRESETS = {
    # layer kinds of the first 8 layers: scheme, mask name, pieces
    "gemma3": [("rope", "window", ["qknorm"])] * 5
    + [("rope", "causal", ["qknorm"])]
    + [("rope", "window", ["qknorm"])] * 2,
    "irope": ([("rope", "chunk", ["qknorm"])] * 3 + [("nope", "causal", ["temp_tuning"])]) * 2,
    "rnope-swa": ([("rope", "window", [])] * 3 + [("nope", "causal", [])]) * 2,
    "smollm3": ([("rope", "causal", [])] * 3 + [("nope", "causal", [])]) * 2,
    "gpt-oss": [("rope", "window", ["sinks"]), ("rope", "causal", ["sinks"])] * 4,
    "swan": ([("rope", "window", [])] * 3 + [("nope", "causal", ["logn"])]) * 2,
}


@pytest.mark.parametrize("name", list(PRESETS))
def test_each_preset_is_its_familys_layout_and_round_trips_save_and_load(name: str, tmp_path) -> None:
    variants = parse_plan(name, 8)
    kinds = [(v.scheme, v.mask.split(",")[0], list(v.pieces)) for v in variants]
    assert kinds == EXPECTED_PRESETS[name]
    small = {"gemma3": "window=8", "irope": "chunk=8,gamma=4", "rnope-swa": "window=8", "smollm3": "base=10000",
             "gpt-oss": "window=8", "swan": "window=8"}[name]  # fmt: skip
    model = _tiny(f"{name},{small}", n_layer=6 if name == "gemma3" else 4).eval()
    with torch.no_grad():
        for param in model.parameters():  # sinks, norms and gates away from their neutral start
            param.add_(0.05 * torch.randn_like(param))
    folder = save_model(model, tmp_path / name)
    again = load_model(folder).eval()
    tokens = torch.randint(0, 61, (1, 40))
    assert again.config.layer_plan == f"{name},{small}" and again.variants == model.variants
    assert torch.equal(again(tokens), model(tokens))
    with torch.no_grad():
        assert (model(tokens) - model(tokens, backend="reference")).abs().max() < 1e-4


def test_the_family_defaults_of_the_presets() -> None:
    """What transformers' configs default to (gemma3 4096 / 10k / 1M, llama4 8192 chunks, beta 0.1, gamma 8192,
    base 500k; cohere2 4096; smollm3 base 2M; gpt_oss 128 and base 150k)."""
    gemma = parse_plan("gemma3", 6)
    assert gemma[0].scheme_options["base"] == 10000 and gemma[5].scheme_options["base"] == 1e6
    assert gemma[0].mask == "window,width=4096"
    irope = parse_plan("irope", 4)
    assert irope[0].mask == "chunk,size=8192" and irope[0].scheme_options["base"] == 500000
    assert irope[0].pieces["qknorm"] == {"weight": False, "eps": 1e-5}
    assert irope[3].pieces["temp_tuning"] == {"beta": 0.1, "gamma": 8192.0}
    assert parse_plan("rnope-swa", 4)[0].mask == "window,width=4096"
    assert parse_plan("smollm3", 4)[0].scheme_options["base"] == 2e6
    oss = parse_plan("gpt-oss", 2)
    assert oss[0].mask == "window,width=128" and oss[0].scheme_options["base"] == 150000


def test_cached_decoding_of_a_hybrid_equals_its_full_forward() -> None:
    model = _tiny("rope+window:6+sinks+gate+qknorm;nope+temp_tuning,beta=0.5,gamma=4;rope+chunk:8+softcap:3").eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.1 * torch.randn_like(param))
        tokens = torch.randint(0, 61, (1, 30))
        cache = model.new_cache()
        steps = [model(tokens[:, :5], cache=cache)] + [model(tokens[:, t : t + 1], cache=cache) for t in range(5, 30)]
        assert (torch.cat(steps, 1) - model(tokens)).abs().max() < 1e-4


def test_a_hybrid_trains_with_gradients_into_every_piece() -> None:
    model = _tiny("rope+window:6+sinks+gate:headwise+qknorm;rope,fraction=0.5+softcap:4;rope,proportional=0.5")
    loss = model.loss(torch.randint(0, 61, (2, 25)))
    loss.backward()
    for name in ("attn.sinks.logits", "attn.gate.proj.weight", "attn.qknorm.q_weight", "attn.qknorm.k_weight"):
        grad = dict(model.blocks[0].named_parameters())[name].grad
        assert grad is not None and bool(grad.abs().sum() > 0), name


# ------------------------------------------------------------------------------------------------ the pieces


def _qkv(H: int = 2, L: int = 70, D: int = 16, grad: bool = False) -> tuple[torch.Tensor, ...]:
    return tuple(torch.randn(2, H, L, D, requires_grad=grad) for _ in range(3))


def test_sinks_equal_gpt_oss_eager_attention() -> None:
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    q, k, v = _qkv()
    sinks = torch.randn(2)
    module = SimpleNamespace(sinks=sinks, num_key_value_groups=1, training=False)
    hidden = torch.ones(70, 70, dtype=torch.bool).triu(1)
    additive = torch.zeros(70, 70).masked_fill(hidden, float("-inf"))[None, None]
    theirs, _ = eager_attention_forward(module, q, k, v, additive, scaling=0.25)
    mine = attention(q, k, v, mask="causal", backend="reference", sinks=sinks, scale=0.25)
    assert (mine.transpose(1, 2) - theirs).abs().max() < TOL


def test_softcap_equals_gemma2_eager_attention() -> None:
    from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward

    q, k, v = _qkv()
    module = SimpleNamespace(num_key_value_groups=1, training=False, head_dim=16)
    window = build_mask("window:9")
    visible = window.allowed(torch.arange(70), torch.arange(70))
    additive = torch.zeros(70, 70).masked_fill(~visible, float("-inf"))[None, None]
    theirs, _ = eager_attention_forward(module, q * 3, k, v, additive, scaling=0.25, softcap=5.0)
    mine = attention(q * 3, k, v, mask="window:9", backend="reference", softcap=5.0, scale=0.25)
    assert (mine.transpose(1, 2) - theirs).abs().max() < TOL


def test_qknorm_equals_qwen3_rms_norm_and_llama4_l2_norm() -> None:
    from transformers.models.llama4.modeling_llama4 import Llama4TextL2Norm
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    dims = HeadDims(2, 16, 32, 16)
    x, y = torch.randn(2, 2, 9, 16), torch.randn(2, 2, 9, 16)
    learned = QKNorm(dims)
    hf = Qwen3RMSNorm(16, eps=1e-6)
    with torch.no_grad():
        learned.q_weight.normal_()
        hf.weight.copy_(learned.q_weight)
    assert torch.equal(learned.transform_qk(x, y)[0], hf(x))
    plain = QKNorm(dims, weight=False, eps=1e-5)
    assert plain.q_weight is None and not list(plain.parameters())
    assert torch.equal(plain.transform_qk(x, y)[1], Llama4TextL2Norm(1e-5)(y))


def test_temperature_tuning_is_llama4s_query_scale() -> None:
    positions = torch.arange(0, 40000, 7)
    theirs = torch.log1p(torch.floor((positions.float() + 1.0) / 8192)) * 0.1 + 1.0  # modeling_llama4 line by line
    assert torch.equal(temperature_tuning_scale(positions, 0.1, 8192.0), theirs)
    model = _tiny("nope+temp_tuning,beta=0.5,gamma=4", n_layer=1).eval()
    attn = model.blocks[0].attn
    x = torch.randn(1, 23, 32)
    q, k, v = attn.project(x)
    scaled = q * temperature_tuning_scale(torch.arange(23), 0.5, 4.0)[:, None]
    want = attn.o_proj(attention(scaled, k, v, backend="reference").transpose(1, 2).reshape(1, 23, -1))
    got = attn(x, LayerInputs(model.scheme_for(0), torch.arange(23), build_mask("causal"), "auto"))
    assert (got - want).abs().max() < TOL


def test_the_output_gate_is_a_sigmoid_of_the_layer_input_per_head() -> None:
    dims = HeadDims(2, 16, 32, 16)
    x, out = torch.randn(1, 5, 32), torch.randn(1, 2, 5, 16)
    elementwise, headwise = PIECES.build("gate", dims), PIECES.build("gate:headwise", dims)
    assert elementwise.proj.weight.shape == (32, 32) and headwise.proj.weight.shape == (2, 32)
    score = (x @ elementwise.proj.weight.T).view(1, 5, 2, 16).transpose(1, 2)
    assert torch.allclose(elementwise.transform_output(x, out), out * torch.sigmoid(score))
    per_head = (x @ headwise.proj.weight.T).transpose(1, 2)[..., None]  # (1, H, 5, 1): one gate per head
    assert torch.allclose(headwise.transform_output(x, out), out * torch.sigmoid(per_head))


def test_partial_rotary_equals_phis_rotation_of_the_first_channels() -> None:
    from transformers.models.phi.modeling_phi import apply_rotary_pos_emb

    dims = HeadDims(2, 16, 32, 16)
    scheme = build_scheme("rope,fraction=0.5", dims)
    q, k = torch.randn(1, 2, 12, 16), torch.randn(1, 2, 12, 16)
    positions = torch.arange(12)
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, 8, 2, dtype=torch.int64).float() / 8))
    freqs = positions.float()[:, None] * inv_freq[None]
    emb = torch.cat((freqs, freqs), dim=-1)[None]
    hq, hk = apply_rotary_pos_emb(q[..., :8], k[..., :8], emb.cos(), emb.sin())
    mq, mk = scheme.rotate(q, k, positions, positions)
    assert (mq[..., :8] - hq).abs().max() < 1e-5 and (mk[..., :8] - hk).abs().max() < 1e-5
    assert torch.equal(mq[..., 8:], q[..., 8:]) and torch.equal(mk[..., 8:], k[..., 8:])


def test_p_rope_keeps_the_highest_frequencies_as_hugging_faces_proportional_rope() -> None:
    from transformers import PretrainedConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = PretrainedConfig()
    config.hidden_size, config.num_attention_heads, config.head_dim = 64, 4, 16
    config.rope_parameters = {"rope_type": "proportional", "rope_theta": 10000.0, "partial_rotary_factor": 0.75}
    theirs, _ = ROPE_INIT_FUNCTIONS["proportional"](config, "cpu")
    scheme = build_scheme("rope,proportional=0.75", HeadDims(4, 16, 64, 16))
    assert torch.equal(scheme.inv_freq, theirs)
    assert scheme.inv_freq[-2:].eq(0).all() and scheme.inv_freq[:6].gt(0).all()  # the lowest two removed


def test_the_chunk_mask_is_llama4s_chunked_causal_mask() -> None:
    from transformers.masking_utils import chunked_causal_mask_function

    rule = chunked_causal_mask_function(8, torch.zeros(1, dtype=torch.long))
    positions = torch.arange(37)
    theirs = rule(torch.zeros(1, dtype=torch.long), 0, positions[:, None], positions[None, :])
    mask = build_mask("chunk:8")
    assert torch.equal(mask.allowed(positions, positions), theirs)
    counts = mask.visible_keys(positions, 0, 36)
    assert torch.equal(counts, mask.allowed(positions, positions).sum(-1))
    assert build_mask("chunk", 32).size == 32  # the default: L_tr


PIECE_CASES = [
    ("causal", {"sinks": True}),
    ("window:9", {"sinks": True}),
    ("chunk:16", {}),
    ("chunk:16", {"sinks": True, "softcap": 4.0}),
    ("causal", {"softcap": 4.0}),
    ("window:9", {"softcap": 2.0}),
]


def _piece_args(options: dict) -> dict:
    sinks = torch.tensor([0.7, -1.3]) if options.get("sinks") else None
    return {"sinks": sinks, "softcap": options.get("softcap")}


SCHEMES_BY_CASE = ["rope", "alibi", "rope,proportional=0.5", "alibi", "rope,fraction=0.5", "rope"]


CASES = [(*case, scheme) for case, scheme in zip(PIECE_CASES, SCHEMES_BY_CASE, strict=True)]


@pytest.mark.parametrize(("mask", "options", "scheme"), CASES)
def test_each_piece_equals_its_reference_in_every_backend(mask: str, options: dict, scheme: str) -> None:
    built = build_scheme(scheme, HeadDims(2, 16, 32, 16))
    q, k, v = _qkv(L=300)
    args = _piece_args(options)
    with torch.no_grad():
        want = attention(q, k, v, scheme=built, mask=mask, backend="reference", **args)
        for backend in BACKENDS:
            try:
                got = attention(q, k, v, scheme=built, mask=mask, backend=backend, block_size=64, **args)
            except ConfigError as err:  # only sdpa refuses, naming the fix
                assert backend == "sdpa" and "use backend='chunked' or 'auto'" in str(err)
                continue
            assert (got - want).abs().max() < TOL, backend
        got = attention(q, k, v, scheme=built, mask=mask, backend="auto", **args)
        assert (got - want).abs().max() < TOL


@pytest.mark.parametrize(("mask", "options"), PIECE_CASES)
def test_each_piece_has_the_reference_gradients_on_the_chunked_path(mask: str, options: dict) -> None:
    q, k, v = _qkv(L=90, grad=True)
    args = _piece_args(options)
    if args["sinks"] is not None:
        args["sinks"].requires_grad_(True)
    weight = torch.randn(2, 2, 90, 16)
    leaves = [q, k, v] + ([args["sinks"]] if args["sinks"] is not None else [])

    def grads(backend: str) -> list[torch.Tensor]:
        out = attention(q, k, v, mask=mask, backend=backend, block_size=32, **args)
        return list(torch.autograd.grad((out * weight).sum(), leaves))

    for mine, theirs in zip(grads("chunked"), grads("reference"), strict=True):
        assert (mine - theirs).abs().max() < 1e-4


@pytest.mark.parametrize(("mask", "options"), PIECE_CASES[:4])
def test_each_piece_takes_cudas_path_with_the_cpu_numbers(mask: str, options: dict) -> None:
    """On the virtual CUDA device (`virtual_device.py`), `auto` (flex: softcap in the score_mod, sinks from the
    log-sum-exp) and `chunked` give the CPU reference, forward and gradients, with no device mix."""
    q, k, v = _qkv(L=60, grad=True)
    args = _piece_args(options)
    weight = torch.randn(2, 2, 60, 16)

    def run(backend: str, *tensors: torch.Tensor) -> list[torch.Tensor]:
        qs, ks, vs, w = tensors[:4]
        sinks = tensors[4] if len(tensors) > 4 else None
        out = attention(qs, ks, vs, mask=mask, backend=backend, sinks=sinks, softcap=args["softcap"])
        return [out.detach(), *torch.autograd.grad((out * w).sum(), [qs, ks, vs])]

    extra = [args["sinks"]] if args["sinks"] is not None else []
    want = run("reference", q, k, v, weight, *extra)
    with vd.virtual_cuda() as mode:
        moved = [vd.virtual(t) for t in (q, k, v, weight, *extra)]
        got = run("auto", *moved)
        flex_calls = mode.flex_calls
        chunked = run("chunked", *moved)
    assert flex_calls >= 1
    for mine, other, theirs in zip(got, chunked, want, strict=True):
        assert isinstance(mine, vd.VirtualTensor)
        assert (vd.plain(mine) - theirs).abs().max() < 1e-4 and (vd.plain(other) - theirs).abs().max() < 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("mask", "options", "scheme"), CASES)
def test_each_piece_on_a_cuda_gpu_matches_the_reference(mask: str, options: dict, scheme: str, dtype) -> None:
    """On a real GPU, `auto` (flex: the softcap in the score_mod, sinks from the log-sum-exp, the chunk mask as a
    block mask) gives the fp32 reference's output and gradients, the sinks' gradient included."""
    device = torch.device("cuda")
    tol = 1e-4 if dtype == torch.float32 else 5e-2  # bf16: 8 mantissa bits in inputs, outputs and gradients
    built = build_scheme(scheme, HeadDims(2, 16, 32, 64)).to(device)
    q, k, v = (x.to(device) for x in _qkv(L=333))
    args = _piece_args(options)
    sinks = None if args["sinks"] is None else args["sinks"].to(device)
    weight = torch.randn(2, 2, 333, 16, device=device)

    def run(backend: str, cast: torch.dtype) -> list[torch.Tensor]:
        leaves = [x.to(cast).requires_grad_(True) for x in (q, k, v)]
        extra = [] if sinks is None else [sinks.clone().requires_grad_(True)]
        out = attention(*leaves, scheme=built, mask=mask, backend=backend, sinks=extra[0] if extra else None,
                        softcap=args["softcap"])  # fmt: skip
        grads = torch.autograd.grad((out.float() * weight).sum(), leaves + extra)
        return [out.detach().float(), *(g.float() for g in grads)]

    want = run("reference", torch.float32)
    got = run("auto", dtype)
    for i, (mine, theirs) in enumerate(zip(got, want, strict=True)):
        assert (mine - theirs).abs().max() <= tol * max(1.0, float(theirs.abs().max())), i


def test_sinks_on_the_tiled_path_merge_as_one_more_tile() -> None:
    q, k, v = _qkv(L=700)
    sinks = torch.tensor([2.0, -0.5])
    with torch.no_grad():
        want = attention(q, k, v, backend="reference", sinks=sinks)
        tiled = attention(q, k, v, backend="chunked", sinks=sinks, block_size=128)  # 6 query blocks x key tiles
        fused = attention(q, k, v, backend="sdpa", sinks=sinks)
        # a cap past BOUNDED_CAP: tiles merged by their log-sum-exp instead of summed exponentials
        wide = attention(q * 8, k, v, backend="chunked", sinks=sinks, softcap=100.0)
        assert (wide - attention(q * 8, k, v, backend="reference", sinks=sinks, softcap=100.0)).abs().max() < TOL
    assert (tiled - want).abs().max() < TOL and (fused - want).abs().max() < TOL
    with pytest.raises(ConfigError, match="sdpa backend applies sinks through the CPU flash kernel"):
        attention(q, k, v, backend="sdpa", sinks=sinks)  # under autograd


# ------------------------------------------------------------------------------------------------ inference


def test_yarn_on_the_global_layers_only() -> None:
    model = _tiny("gemma3,window=6", n_layer=6)
    InferenceSetup(rope_scaling="yarn:4", layers="global").apply(model)
    scaled = [layer for layer, v in enumerate(model.variants) if "scaling" in v.scheme_options]
    assert scaled == [5] and model.scheme_for(5).scaling.rope_type == "yarn"
    assert "scaling" not in model.scheme_for(0).options
    assert GPTConfig.from_dict(model.config.to_dict()).plan() == model.variants  # the plan records it
    InferenceSetup(rope_scaling="yarn:4").apply(model)  # default: every rotary layer
    assert all("scaling" in v.scheme_options for v in model.variants)
    InferenceSetup(rope_scaling=None).apply(model)
    assert not any("scaling" in v.scheme_options for v in model.variants)


def test_inference_changes_refuse_layers_that_cannot_take_them() -> None:
    model = _tiny("rnope-swa,window=6")
    with pytest.raises(ConfigError, match=r"rope scaling cannot apply to layer 3 .*'nope' does not rotate"):
        InferenceSetup(rope_scaling="yarn:4", layers="all").apply(model)
    with pytest.raises(ConfigError, match=r"extension 'self_extend' cannot apply to layer 3 .*'nope'"):
        InferenceSetup(extension="self_extend,group=4", layers="3").apply(model)
    with pytest.raises(ConfigError, match="applies to no layer of this model"):
        InferenceSetup(extension="self_extend,group=4").apply(model)  # every rotary layer has its own window
    plain = _tiny("smollm3,base=10000")
    InferenceSetup(extension="self_extend,group=4").apply(plain)
    assert [block.attn.extension is not None for block in plain.blocks] == [True, True, True, False]
    with pytest.raises(ConfigError, match="layer selector 'top'"):
        select_layers(plain.variants, "top")


def test_temperature_tuning_at_inference_on_the_nope_layers() -> None:
    model = _tiny("smollm3,base=10000").eval()
    tokens = torch.randint(0, 61, (1, 30))
    with torch.no_grad():
        before = model(tokens)
        InferenceSetup(temp_tuning="temp_tuning,beta=2,gamma=4").apply(model)
        assert [b.attn.inference.temp_tuning is not None for b in model.blocks] == [False, False, False, True]
        assert (model(tokens) - before).abs().max() > 1e-3
        InferenceSetup(temp_tuning=None).apply(model)
        assert torch.equal(model(tokens), before)


def test_the_cli_trains_a_plan_and_lists_the_presets(tmp_path, capsys) -> None:
    from lextra.cli.app import main

    assert main(["list"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in PRESETS) and "temp_tuning" in listing and "chunk[:SIZE]" in listing
    shape = ["--train-len", "16", "--n-layer", "2", "--d-model", "32", "--n-head", "2", "--batch-size", "2"]
    code = main(["train", "--out", str(tmp_path / "run"), "--layer-plan", "gpt-oss,window=4", "--steps", "2", *shape])
    assert code == 0
    model = load_model(tmp_path / "run" / "model")
    assert model.config.layer_plan == "gpt-oss,window=4" and model.blocks[0].attn.sinks is not None
    assert math.isfinite(float(model.blocks[1].attn.sinks.logits.detach().sum()))


# ------------------------------------------------------------------------------------------------ analyses


def test_analyses_report_a_hybrids_local_and_global_layers_apart(tmp_path, corpus) -> None:  # noqa: F811
    from lextra.analysis import layer_attention
    from lextra.analysis.resolution import resolution
    from lextra.cli.app import main

    plan = "2*(rope+window:4+sinks);nope+softcap:3"
    config = GPTConfig(n_layer=3, n_head=2, d_model=32, train_len=16, layer_plan=plan)
    model = GPT(config).eval()
    with torch.no_grad():
        model.blocks[0].attn.sinks.logits.fill_(1.5)
    tokens = torch.randint(0, 256, (1, 12))
    views = list(layer_attention(model, tokens))
    assert [view.mask.options for view in views] == [{"width": 4}, {"width": 4}, {}]  # each layer's own mask
    weights = torch.cat([block.weights() for block in views[0].blocks()], dim=-2)
    assert bool((weights.sum(-1) < 0.99).all())  # the sink takes its share of every row
    assert views[2].softcap == 3.0 and all(bool(b.logits.abs().le(3.0).all()) for b in views[2].blocks())
    extra = {"train": {"corpus": str(corpus)}, "tokenizer": {"kind": "bytes"}}
    folder = save_model(model, tmp_path / "hybrid", extra=extra)
    out = tmp_path / "res"
    argv = ["analyze", "resolution", str(folder), "--train-len", "16", "--lengths", "16", "--documents", "2"]
    assert main([*argv, "--out", str(out)]) == 0
    data = json.loads((out / "resolution.json").read_text())
    label = next(iter(data["table"]))
    per_layer = torch.tensor(data["rows"][label]["by_length"]["16"]["s_per_layer"])
    kinds = data["table_by_layer_kind"]
    assert kinds[f"{label} local layers"]["16"] == pytest.approx(resolution(per_layer[:2].mean(0)), rel=1e-6)
    assert kinds[f"{label} global layers"]["16"] == pytest.approx(resolution(per_layer[2:].mean(0)), rel=1e-6)
    out = tmp_path / "disp"
    argv = ["analyze", "dispersion", str(folder), "--lengths", "8,16", "--documents", "2", "--out", str(out)]
    assert main(argv) == 0
    table = (out / "dispersion.md").read_text()
    assert f"{label} local layers" in table and f"{label} global layers" in table


def test_the_hybrids_study_trains_each_plan_it_names() -> None:
    from pathlib import Path

    from lextra.pipelines.study import load_study, parse_study
    from lextra.pipelines.study.run import train_config

    study = load_study(Path(__file__).parent.parent / "experiments" / "hybrids.toml")
    configs = {spec.label: train_config(study, spec, 0).model for spec in study.models}
    assert configs["rope"].layer_plan == "rope" and configs["nope"].plan()[0].scheme == "nope"
    assert [v.scheme for v in configs["rnope-swa"].plan()] == ["rope", "rope", "rope", "nope"]
    assert configs["irope"].plan()[3].pieces["temp_tuning"] == {"beta": 0.1, "gamma": 128.0}
    assert set(study.retrieval["variants"]) == set(configs)
    bad = {"train": {"model": {"n_layer": 4}}, "models": [{"label": "x", "layer_plan": "rope+windw:3"}]}
    with pytest.raises(ConfigError, match="'windw' is neither a mask"):
        parse_study(bad)


def test_a_hybrid_training_step_on_cuda_equals_the_cpu_step() -> None:
    """A plan with every piece trains on the virtual CUDA device (flex with sinks and a softcap, chunked, sdpa) with
    the CPU's loss and gradients."""
    import copy

    plan = "rope+window:6+sinks+softcap:3+qknorm+gate;nope+temp_tuning,beta=0.5,gamma=4;rope,fraction=0.5+chunk:8"
    model = GPT(GPTConfig(vocab_size=61, n_layer=3, n_head=2, d_model=32, train_len=16, layer_plan=plan)).train()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    twin = copy.deepcopy(model)
    tokens = torch.randint(0, 61, (2, 24))
    loss = model.loss(tokens)
    loss.backward()
    with vd.virtual_cuda() as mode:
        twin.to("cuda")
        twin_loss = twin.loss(vd.virtual(tokens))
        twin_loss.backward()
    assert mode.flex_calls >= 2 and abs(vd.plain(twin_loss).item() - loss.item()) < TOL
    for (name, param), (_, moved) in zip(model.named_parameters(), twin.named_parameters(), strict=True):
        assert isinstance(moved.grad, vd.VirtualTensor), name
        assert (vd.plain(moved.grad) - param.grad).abs().max() <= 1e-5 * (1 + float(param.grad.abs().max())), name


def test_two_pieces_that_run_the_attention_call_are_refused_in_one_layer() -> None:
    """diffattn and stickbreak each run the layer's call themselves: nested, one would silently skip the other."""
    with pytest.raises(ConfigError, match="'diffattn' and 'stickbreak' both do: put them in different layers"):
        parse_plan("rope+diffattn+stickbreak", 2)
    assert [list(v.pieces) for v in parse_plan("rope+diffattn;nope+stickbreak", 2)] == [["diffattn"], ["stickbreak"]]
    model = GPT(GPTConfig(vocab_size=32, n_layer=1, n_head=2, d_model=16, train_len=16, layer_plan="rope+diffattn"))
    dims = model.config.head_dims()
    with pytest.raises(ConfigError, match="'diffattn' and 'stickbreak' both do"):
        model.blocks[0].attn.set_piece("stickbreak", PIECES.build("stickbreak", dims))
    assert model.blocks[0].attn.piece_names == ["diffattn"]
