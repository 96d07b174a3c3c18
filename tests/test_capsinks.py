"""Training-free extension methods on layers with a score softcap (Gemma 2) and learned sinks (gpt-oss): every
method's dense reference, tiled passes and FlexAttention passes against a float64 formula written here, on lextra
models (full forward and cached decoding) and the layers they apply to by default."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
import virtual_device as vd
from test_extend import SPECS, extended  # every method at L = 64 (and a loaded plugin's); attention under one
from torch import Tensor

from lextra.attention import attention
from lextra.attention.backends import AttentionContext, passes_path, run_attention
from lextra.attention.backends.tiled import tile_attention
from lextra.errors import ConfigError
from lextra.extend import (
    EXTENSIONS,
    ExtensionMethod,
    InferenceSetup,
    build_extension,
)
from lextra.model import GPT, GPTConfig
from lextra.positions import HeadDims, PositionScheme, build_scheme

L = 64
N = 300
BASE = 10000.0
SINKS = torch.tensor([0.7, -1.2])
#: (softcap, sinks): each alone and both (a cap of 2 bites: the scores' spread is about 1)
CASES = {"softcap": (2.0, None), "sinks": (None, SINKS), "both": (2.0, SINKS)}


def _rotated_scores(q: Tensor, k: Tensor, distance: Tensor, freq: Tensor | None = None, factor: float = 1.0) -> Tensor:
    """float64 q_m . k_n with q rotated at `distance` (Lq, Lk) and k at 0, half-split RoPE (pair i on channels i
    and i + D/2) at inverse frequencies `freq` (default BASE^(-2i/D)) with cos and sin times `factor` (YaRN's)."""
    q, k = q.double(), k.double()
    half = q.shape[-1] // 2
    if freq is None:
        freq = BASE ** (-torch.arange(half, dtype=torch.float64) * 2 / q.shape[-1])
    angle = distance.double()[..., None] * freq.double()  # (Lq, Lk, D/2)
    cos, sin = torch.cos(angle) * factor**2, torch.sin(angle) * factor**2  # q's factor and k's
    q1, q2 = q[..., :half], q[..., half:]  # (B, H, Lq, D/2)
    k1, k2 = k[..., :half], k[..., half:]
    r1 = q1[..., :, None, :] * cos - q2[..., :, None, :] * sin  # (B, H, Lq, Lk, D/2)
    r2 = q2[..., :, None, :] * cos + q1[..., :, None, :] * sin
    return (r1 * k1[..., None, :, :]).sum(-1) + (r2 * k2[..., None, :, :]).sum(-1)


def dense_formula(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    method: ExtensionMethod,
    q_pos: Tensor,
    k_pos: Tensor,
    softcap: float | None,
    sinks: Tensor | None,
    tau: Tensor | None = None,
    *,
    scale: float | None = None,
    rotation: tuple[Tensor, float] | None = None,
) -> Tensor:
    """The method's attention with Gemma 2's cap and gpt-oss's sinks, in float64 from the definitions: scores at
    the remapped distance (RoPE at `rotation` = inverse frequencies and cos/sin factor, default base 10000),
    scaled (times the method's query scale, over the temperature (H,) or (H, Lq)), capped as
    google-deepmind/gemma's `Attention` caps them (tanh(s / c) c before the mask), then gpt-oss's `sdpa`
    (openai/gpt-oss, gpt_oss/torch/model.py): the sink logit (per head, or per head and query row) concatenated
    as one more column of the masked scores, one softmax, that column dropped."""
    distance, visible = method.remap(q_pos[:, None], k_pos[None, :])
    freq, factor = rotation if rotation is not None else (None, 1.0)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = _rotated_scores(q, k, distance.expand(q_pos.numel(), k_pos.numel()), freq, factor) * scale
    row_scale = method.query_scale(q_pos)  # the method's own logit scale per query (ReRoPE's log n), or None
    if row_scale is not None:
        scores = scores * row_scale.double()[:, None]
    if tau is not None:
        scores = scores / (tau.double()[:, None, None] if tau.dim() == 1 else tau.double()[..., None])
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    scores = scores.masked_fill(~visible, float("-inf"))
    if sinks is not None:
        column = sinks.double().reshape(1, sinks.shape[0], -1, 1).expand(*scores.shape[:-1], 1)
        scores = torch.cat((scores, column), dim=-1)
    weights = torch.softmax(scores, dim=-1)
    if sinks is not None:
        weights = weights[..., :-1]
    return weights @ v.double()


def formula_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scheme: PositionScheme,
    method: ExtensionMethod,
    q_pos: Tensor | None = None,
    k_pos: Tensor | None = None,
    scale: float | None = None,
    temperature: Tensor | None = None,
    softcap: float | None = None,
    sinks: Tensor | None = None,
) -> Tensor:
    """`dense_formula` with `attention`'s defaults for the positions and the temperature, rotating at the scheme's
    own RoPE frequencies: what the command tests run in place of the tiled passes."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    q_pos = torch.arange(Lk - Lq, Lk) if q_pos is None else q_pos.cpu()
    k_pos = torch.arange(Lk) if k_pos is None else k_pos.cpu()
    inv_freq, factor = scheme.frequencies_for(None)
    tau = None if temperature is None else torch.as_tensor(temperature)
    out = dense_formula(q, k, v, method, q_pos, k_pos, softcap, sinks, tau, scale=scale, rotation=(inv_freq, factor))
    return out.to(v.dtype)


def _inputs(n: int = N, seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, 2, n, 16, generator=gen) for _ in range(3))  # type: ignore[return-value]


def _scheme():
    return build_scheme("rope", HeadDims(2, 16, 32, L), base=BASE)


def test_every_registered_method_is_tested() -> None:
    assert set(SPECS) == set(EXTENSIONS.names())


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", list(SPECS))
@torch.no_grad()
def test_each_method_with_a_softcap_and_sinks_equals_the_dense_formula(name: str, case: str) -> None:
    """Reference, tiled passes (two block sizes; the last rows and one row, as a cache asks) and FlexAttention
    passes, under a temperature, against the float64 formula; and the cap and sinks change the output."""
    softcap, sinks = CASES[case]
    q, k, v = _inputs()
    scheme, method = _scheme(), build_extension(SPECS[name], L)
    scores, tau, pos = {"softcap": softcap, "sinks": sinks}, torch.tensor([0.8, 1.3]), torch.arange(N)
    want = dense_formula(q, k, v, method, pos, pos, softcap, sinks, tau).float()
    ref = extended("reference", q, k, v, scheme, method, temperature=tau, **scores)
    assert (ref - want).abs().max() < 1e-5
    for block in (100, None):
        tiled = extended("tiled", q, k, v, scheme, method, temperature=tau, block_size=block, **scores)
        assert (tiled - want).abs().max() < 1e-5
    last = extended("tiled", q[..., -5:, :], k, v, scheme, method, temperature=tau, block_size=3, **scores)
    assert (last - want[..., -5:, :]).abs().max() < 1e-5
    assert (extended("flex", q, k, v, scheme, method, temperature=tau, **scores) - want).abs().max() < 1e-5
    plain = extended("reference", q, k, v, scheme, method, temperature=tau)
    assert (plain - want).abs().max() > 1e-2


@torch.no_grad()
def test_the_sink_enters_the_merged_denominator_once_not_once_per_pass() -> None:
    """DCA runs three passes per query block past its second chunk, each with its own softmax; the merged rows
    equal the formula's one softmax with the sink once, where a sink in each pass's denominator would not."""
    q, k, v = _inputs()
    scheme, method = _scheme(), build_extension("dca", L)
    pos = torch.arange(N)
    want = dense_formula(q, k, v, method, pos, pos, None, SINKS).float()
    assert len(method.passes(200, 210)) == 3
    ours = extended("tiled", q, k, v, scheme, method, sinks=SINKS)
    assert (ours - want).abs().max() < 1e-5
    thrice = dense_formula(q, k, v, method, pos, pos, None, SINKS + math.log(3)).float()  # e^sink per pass
    assert (ours[..., 200:, :] - thrice[..., 200:, :]).abs().max() > 1e-3


@pytest.mark.parametrize("name", ["dca", "leaky_rerope"])
def test_under_autograd_the_capped_passes_agree_and_have_finite_gradients(name: str) -> None:
    q, k, v = (x.requires_grad_() for x in _inputs(120))
    scheme, method = _scheme(), build_extension(SPECS[name], 32)
    pos = torch.arange(120)
    out = extended("tiled", q, k, v, scheme, method, softcap=2.0, sinks=SINKS, block_size=50)
    want = dense_formula(q.detach(), k.detach(), v.detach(), method, pos, pos, 2.0, SINKS).float()
    assert (out.detach() - want).abs().max() < 1e-5
    out.square().sum().backward()
    grads = [x.grad for x in (q, k, v)]
    assert all(g is not None and bool(g.isfinite().all()) and float(g.abs().max()) > 0 for g in grads)


@torch.no_grad()
def test_decoding_sinks_per_folded_row_equal_sinks_per_head() -> None:
    """A decoding step with the query heads that share a key/value head folded into rows (Hugging Face's
    grouped-query decoding) takes the sinks per (key/value head, row) and gives each head's own output."""
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(1, 4, 1, 16, generator=gen)
    k, v = torch.randn(1, 2, 90, 16, generator=gen), torch.randn(1, 2, 90, 16, generator=gen)
    sinks = torch.tensor([0.3, -0.5, 1.1, -2.0])
    scheme, method = _scheme(), build_extension("self_extend:group=16,window=8", 16)
    wide = (k.repeat_interleave(2, 1), v.repeat_interleave(2, 1))
    heads = extended("tiled", q, *wide, scheme, method, q_pos=torch.tensor([89]), softcap=2.0, sinks=sinks)
    rows = q.reshape(1, 2, 2, 16)
    at = torch.tensor([89, 89])
    ctx = AttentionContext.build(rows, k, scheme=scheme, extension=method, backend="tiled", q_pos=at, softcap=2.0)
    folded = run_attention(rows, k, v, replace(ctx, sinks=sinks.reshape(2, 2)))  # sinks per row, as a fold has them
    assert (folded.reshape(1, 4, 1, 16) - heads).abs().max() < 1e-6


# ------------------------------------------------------------------------------------------- lextra models
#: Gemma 2's and gpt-oss's layers in plan vocabulary (window 8, then a global layer)
PLANS = {"gemma2": "rope+window:8+softcap:3;rope+softcap:3", "gpt-oss": "rope+window:8+sinks;rope+sinks"}


def _tiny(plan: str) -> GPT:
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=50, n_layer=2, n_head=2, d_model=32, train_len=32, layer_plan=plan)
    model = GPT(config).eval()
    with torch.no_grad():
        for block in model.blocks:
            block.attn.q_proj.weight.mul_(6.0)
            block.attn.k_proj.weight.mul_(6.0)
            for name, param in block.attn.named_parameters():
                if "sinks" in name:
                    param.copy_(torch.tensor([0.5, -0.5]))
    return model


@pytest.mark.parametrize("family", list(PLANS))
@torch.no_grad()
def test_a_lextra_model_of_each_family_extends_its_global_layer_exactly(family: str) -> None:
    """By default the method takes the global layer (the sliding one sets its own visibility); the layer's output
    equals the formula on its own inputs (its softcap or sinks applied), and the full forward, the reference and
    cached decoding agree (FlexAttention through the layer's hook: the virtual CUDA test)."""
    model = _tiny(PLANS[family])
    tokens = torch.randint(0, 50, (1, 100), generator=torch.Generator().manual_seed(1))
    plain = model(tokens)
    InferenceSetup(extension="self_extend:group=4,window=8").apply(model)
    attns = [block.attn for block in model.blocks]
    assert [attn.extension is not None for attn in attns] == [False, True]
    seen: dict[str, Tensor] = {}

    def observe(inputs) -> None:
        if inputs.layer == 1:
            seen.update(q=inputs.q, k=inputs.k, q_pos=inputs.q_pos, k_pos=inputs.k_pos)
            seen["softcap"], seen["sinks"] = inputs.softcap, inputs.sinks

    captured: list[Tensor] = []
    hooks = [attns[1].v_proj.register_forward_hook(lambda m, a, out: captured.append(out))]
    hooks.append(attns[1].o_proj.register_forward_pre_hook(lambda m, a: captured.append(a[0])))
    full = model(tokens, observer=observe)
    for hook in hooks:
        hook.remove()
    v = captured[0].view(1, 100, 2, 16).transpose(1, 2)
    method = attns[1].extension
    want = dense_formula(seen["q"], seen["k"], v, method, seen["q_pos"], seen["k_pos"], seen["softcap"], seen["sinks"])
    assert (family == "gemma2") == (seen["softcap"] is not None) and (family == "gpt-oss") == (
        seen["sinks"] is not None
    )
    assert (captured[1] - want.transpose(1, 2).reshape(1, 100, 32).float()).abs().max() < 1e-5
    assert (model(tokens, backend="reference") - full).abs().max() < 1e-5
    cache = model.new_cache()
    steps = [model(tokens[:, :40], cache=cache)] + [model(tokens[:, i : i + 1], cache=cache) for i in range(40, 100)]
    assert (torch.cat(steps, dim=1) - full).abs().max() < 1e-5
    assert (full[:, 40:] - plain[:, 40:]).abs().max() > 1e-3  # the method is active past its window


def test_a_sliding_layer_named_by_layers_select_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"cannot apply to layer 0 \(it attends through its own mask") as caught:
        InferenceSetup(extension="rerope", layers="0").apply(_tiny(PLANS["gpt-oss"]))
    assert "\n" not in str(caught.value)


def test_a_model_no_layer_of_which_takes_the_method_names_each_reason() -> None:
    model = _tiny("rope+window:8+softcap:3;nope+sinks")
    with pytest.raises(
        ConfigError, match=r"applies to no layer of this model: layer 0: .*mask .*; layer 1: "
    ) as caught:
        InferenceSetup(extension="self_extend").apply(model)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("name", ["dca", "leaky_rerope"])
def test_on_the_virtual_cuda_device_auto_runs_capped_flex_passes_with_the_cpu_numbers(name: str) -> None:
    """On the virtual CUDA device (`virtual_device.py`) `auto` runs the passes through FlexAttention, the cap in
    its score_mod and the sinks on the merged log-sum-exp: the CPU reference's forward and gradients, no device
    mix."""
    q, k, v = (x.requires_grad_() for x in _inputs(150))
    scheme, method = _scheme(), build_extension(SPECS[name], 32)
    weight = torch.randn(1, 2, 150, 16)

    def run(backend: str, *tensors: Tensor) -> list[Tensor]:
        qs, ks, vs, w, sinks = tensors
        out = attention(qs, ks, vs, scheme=scheme, extension=method, backend=backend, softcap=2.0, sinks=sinks)
        return [out.detach(), *torch.autograd.grad((out * w).sum(), [qs, ks, vs])]

    want = run("reference", q, k, v, weight, SINKS)
    with vd.virtual_cuda() as mode:
        scheme.to("cuda")
        got = run("auto", *(vd.virtual(t) for t in (q, k, v, weight, SINKS)))
        flex_calls = mode.flex_calls
        scheme.to("cpu")
    assert flex_calls >= len(method.passes(100, 100))
    for mine, theirs in zip(got, want, strict=True):
        assert isinstance(mine, vd.VirtualTensor) and (vd.plain(mine) - theirs).abs().max() < 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["dca", "self_extend"])
def test_cuda_flex_passes_with_a_softcap_and_sinks_forward_and_backward_match_the_reference(name: str) -> None:
    """On CUDA `auto` runs the capped passes through compiled FlexAttention (the cap a score_mod) and the sinks on
    the merged log-sum-exp: forward and q/k/v gradients against the dense reference (fp32)."""
    device = torch.device("cuda")
    q, k, v = _inputs(777)
    scheme, method = _scheme().to(device), build_extension(SPECS[name], L)
    sinks = SINKS.to(device)
    q, k, v = (x.to(device).requires_grad_(True) for x in (q, k, v))
    weights = torch.cos(torch.arange(q.numel(), device=device, dtype=torch.float32)).view_as(q)
    results = []
    for backend in ("auto", "reference"):
        out = attention(q, k, v, scheme=scheme, extension=method, backend=backend, softcap=2.0, sinks=sinks)
        results.append((out.detach(), torch.autograd.grad((out * weights).sum(), (q, k, v))))
    ctx = AttentionContext.build(q, k, scheme=scheme, extension=method, softcap=2.0, sinks=sinks)
    assert passes_path(ctx) == "flex"
    (out, grads), (ref, ref_grads) = results
    assert (out - ref).abs().max() < 1e-5
    for grad, expected in zip(grads, ref_grads, strict=True):
        assert (grad - expected).abs().max() <= 1e-4 * max(1.0, float(expected.abs().max()))


@pytest.mark.parametrize("cap", [2.0, 60.0, 100.0])
def test_a_capped_tile_without_autograd_equals_the_explicit_one(cap: float) -> None:
    """The in-place tile (pieces of 128 x 512; caps up to 60 summed without a log-sum-exp, wider ones merged by
    it) equals the explicit computation, causal and with a float mask hiding whole rows, at scores up to 150."""
    gen = torch.Generator().manual_seed(4)
    q, k, v = (
        torch.randn(1, 2, 300, 16, generator=gen) * 12,
        torch.randn(1, 2, 700, 16, generator=gen),
        torch.randn(1, 2, 700, 16, generator=gen),
    )
    mask = torch.zeros(1, 1, 300, 700).masked_fill_(torch.rand(300, 700, generator=gen) < 0.3, float("-inf"))
    mask[..., 5, :] = float("-inf")
    for options in ({"causal": True}, {"mask": mask}):
        with torch.enable_grad():
            want, want_lse = tile_attention(q, k, v, 0.25, cap, **options)
        with torch.no_grad():
            out, lse = tile_attention(q, k, v, 0.25, cap, **options)
        assert (out - want.detach()).abs().max() < 1e-5 * max(1.0, cap / 20)  # fp32 rounding of scores up to cap
        finite = torch.isfinite(want_lse)
        assert torch.equal(finite, torch.isfinite(lse)) and (lse - want_lse.detach())[finite].abs().max() < 1e-4
    assert bool(torch.isneginf(lse[..., 5]).all()) and bool((out[..., 5, :] == 0).all())


@torch.no_grad()
def test_at_64k_positions_capped_passes_with_sinks_stay_finite_and_exact() -> None:
    """The last queries of 65,536 positions under ReRoPE (the log-n query scale past L) with a cap of 50, sinks and
    large scores through CPU's path (the tiled passes): finite, and the float64 formula on two of them."""
    n = 1 << 16
    gen = torch.Generator().manual_seed(5)
    q, k, v = (
        torch.randn(1, 2, 4, 16, generator=gen) * 20,
        torch.randn(1, 2, n, 16, generator=gen),
        torch.randn(1, 2, n, 16, generator=gen),
    )
    scheme, method = _scheme(), build_extension("rerope", L)
    q_pos = torch.arange(n - 4, n)
    tiled = extended("tiled", q, k, v, scheme, method, q_pos=q_pos, softcap=50.0, sinks=SINKS)
    assert bool(tiled.isfinite().all())
    want = dense_formula(q[..., :2, :], k, v, method, q_pos[:2], torch.arange(n), 50.0, SINKS).float()
    assert (tiled[..., :2, :] - want).abs().max() < 1e-5
