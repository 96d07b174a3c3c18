"""FoX (Lin et al. 2025, arXiv 2503.02130): the forget bias held to the authors' definition and their attention
layer, every backend to the dense reference (forward and gradients), cached decoding to the full forward, fp32 at
64k positions, O(L) training memory, and the combinations it refuses."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from lextra.analysis.capture import layer_attention
from lextra.attention import attention, build_mask
from lextra.attention.backends.forget_tiled import TiledForgetAttention
from lextra.attention.forget_bias import ForgetBias, cumulative_log_gates
from lextra.attention.plan import LayerVariant
from lextra.cli import main
from lextra.errors import ConfigError
from lextra.layer_inputs import LayerInputs
from lextra.model import GPT, GPTConfig, SelfAttention
from lextra.positions import build_scheme


# ---------------------------------------------------------------- the authors' functions, ported to float64
def authors_forgetting_attention(q, k, v, log_fgate, sm_scale):
    """The dense definition the authors test their kernel against (`forgetting_attention.py`, `test_op`): head-first
    q (B, H, M, D), k and v (B, H, N, D), log_fgate (B, H, N); the M queries are the last M keys."""
    M, N = q.shape[-2], k.shape[-2]
    visible = torch.ones(M, N, dtype=torch.bool).tril(diagonal=N - M)
    log_lambda = torch.cumsum(log_fgate, dim=-1)
    scores = q @ k.transpose(-1, -2) * sm_scale + (log_lambda[..., -M:, None] - log_lambda[..., None, :])
    scores = scores.masked_fill(~visible, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def authors_group_rms_norm(x, weight, groups, eps):
    """`group_norm_ref(..., is_rms_norm=True)`: RMS over each group of the last axis, times the weight."""
    shape = x.shape
    xg, wg = x.reshape(*shape[:-1], groups, -1), weight.reshape(groups, -1)
    return (xg * torch.rsqrt(xg.square().mean(-1, keepdim=True) + eps) * wg).reshape(shape)


def authors_shift(x, alpha, heads):
    """`ShiftLinear` after its linear map: alpha_t x_{t-1} + (1 - alpha_t) x_t per head, x_{-1} = 0."""
    B, T, _ = x.shape
    xh = x.reshape(B, T, heads, -1)
    before = torch.cat((torch.zeros_like(xh[:, :1]), xh[:, :-1]), dim=1)
    return (alpha[..., None] * before + (1 - alpha[..., None]) * xh).reshape(B, T, -1)


def authors_layer(x, w, heads, pro):
    """`ForgettingAttentionLayer.forward` (no cache, no RoPE, fgate 'full'); with `pro` the Pro config's key and
    value shifts, QK-norm (GroupNorm, eps 1e-5), output norm (eps 1e-6) with the sigmoid output gate."""
    B, T, d = x.shape
    q, k, v = x @ w["q"].T, x @ w["k"].T, x @ w["v"].T
    if pro:
        k = authors_shift(k, torch.sigmoid(x @ w["kshift"].T), heads)
        v = authors_shift(v, torch.sigmoid(x @ w["vshift"].T), heads)
        q = authors_group_rms_norm(q, w["qnorm"], heads, 1e-5)
        k = authors_group_rms_norm(k, w["knorm"], heads, 1e-5)
    log_fgate = F.logsigmoid(x @ w["fgate"].T + w["fgate_bias"]).transpose(1, 2)
    split = [t.reshape(B, T, heads, -1).transpose(1, 2) for t in (q, k, v)]
    o = authors_forgetting_attention(*split, log_fgate, 1 / math.sqrt(d // heads))
    o = o.transpose(1, 2).reshape(B, T, d)
    if pro:
        o = authors_group_rms_norm(o, w["onorm"], heads, 1e-6) * torch.sigmoid(x @ w["ogate"].T)
    return o @ w["o"].T


# ---------------------------------------------------------------- helpers
def fox_layer(pro: bool, H: int = 4, d: int = 32) -> SelfAttention:
    config = GPTConfig(n_layer=1, n_head=H, d_model=d, train_len=16, layer_plan="nope")
    layer = SelfAttention(config, d // H, LayerVariant("nope", {}, "causal", {"fox": {"pro": pro}}))
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 1.0))
        layer.fox.fgate.bias.uniform_(-1.0, 4.0)  # gates from 0.27 to 0.98
    return layer


def forget_inputs_for(B=2, H=3, Lq=40, Lk=40, D=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, n, D, generator=g) for n in (Lq, Lk, Lk))
    log_f = F.logsigmoid(torch.randn(B, H, Lk, generator=g) * 2 + 2)
    return q, k, v, log_f


def bias_of(log_f, Lq):
    c = cumulative_log_gates(log_f)
    return ForgetBias(c[..., -Lq:], c)


# ---------------------------------------------------------------- against the authors
@pytest.mark.parametrize("Lq", [40, 13])
def test_forget_bias_equals_the_authors_definition_with_gradients(Lq: int) -> None:
    q, k, v, log_f = forget_inputs_for(Lq=Lq)
    leaves = [t.double().requires_grad_() for t in (q, k, v, log_f)]
    ref = authors_forgetting_attention(*leaves, 1 / math.sqrt(8))
    ref.backward(torch.ones_like(ref))
    for backend in ("reference", "chunked"):
        ours = [t.clone().requires_grad_() for t in (q, k, v, log_f)]
        out = attention(*ours[:3], forget=bias_of(ours[3], Lq), backend=backend, block_size=8)
        torch.testing.assert_close(out.double(), ref.detach(), atol=1e-5, rtol=0)
        out.backward(torch.ones_like(out))
        for mine, theirs in zip(ours, leaves, strict=True):
            assert mine.grad is not None and theirs.grad is not None
            torch.testing.assert_close(mine.grad.double(), theirs.grad, atol=1e-5, rtol=0)


@pytest.mark.parametrize("pro", [False, True])
def test_the_fox_layer_equals_the_authors_layer(pro: bool) -> None:
    torch.manual_seed(1)
    layer = fox_layer(pro)
    x = torch.randn(2, 24, 32)
    fox = layer.fox
    w = {"q": layer.q_proj.weight, "k": layer.k_proj.weight, "v": layer.v_proj.weight, "o": layer.o_proj.weight}
    w |= {"fgate": fox.fgate.weight, "fgate_bias": fox.fgate.bias}
    if pro:
        w |= {"kshift": fox.k_shift.weight, "vshift": fox.v_shift.weight, "ogate": fox.ogate.weight}
        w |= {"qnorm": fox.q_norm.reshape(-1), "knorm": fox.k_norm.reshape(-1), "onorm": fox.out_norm.reshape(-1)}
    with torch.no_grad():
        expected = authors_layer(x.double(), {n: t.double() for n, t in w.items()}, 4, pro)
        inputs = LayerInputs(
            build_scheme("nope", GPTConfig(n_head=4, d_model=32).head_dims()), torch.arange(24), build_mask("causal")
        )
        got = layer(x, inputs)
    torch.testing.assert_close(got.double(), expected, atol=1e-5, rtol=0)


# ---------------------------------------------------------------- every backend against the dense reference
@pytest.mark.parametrize("backend", ["chunked", "sdpa", "flex"])
@pytest.mark.parametrize("mask", ["causal", "window:5", "bca:8"])
def test_every_backend_equals_the_reference(backend: str, mask: str) -> None:
    q, k, v, log_f = forget_inputs_for(Lq=29, Lk=37)
    forget = bias_of(log_f, 29)
    tau = torch.rand(3, 29) + 0.5
    for temperature in (None, tau):
        options = {"forget": forget, "mask": mask, "temperature": temperature, "block_size": 8}
        ref = attention(q, k, v, backend="reference", **options)
        torch.testing.assert_close(attention(q, k, v, backend=backend, **options), ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("backend", ["chunked", "sdpa"])
def test_training_gradients_of_each_backend_equal_the_reference(backend: str) -> None:
    q, k, v, log_f = forget_inputs_for(Lq=33, Lk=33)
    tau = torch.rand(3, 33) + 0.5
    grads = {}
    for name in ("reference", backend):
        leaves = [t.clone().requires_grad_() for t in (q, k, v, log_f, tau)]
        out = attention(
            *leaves[:3],
            forget=bias_of(leaves[3], 33),
            temperature=leaves[4],
            backend=name,
            mask="window:9",
            block_size=8,
        )
        out.backward(torch.linspace(-1, 1, out.numel()).reshape(out.shape))
        grads[name] = [t.grad for t in leaves]
    for mine, ref in zip(grads[backend], grads["reference"], strict=True):
        torch.testing.assert_close(mine, ref, atol=1e-5, rtol=0)


def test_tiled_gradients_pass_gradcheck_in_float64() -> None:
    q, k, v, log_f = (t.double() for t in forget_inputs_for(B=1, H=2, Lq=11, Lk=11, D=4))
    rows = (torch.rand(1, 2, 11, dtype=torch.float64) + 0.5).requires_grad_()
    causal = torch.ones(11, 11, dtype=torch.bool).tril()

    def run(q, k, v, cq, ck, rows):
        return TiledForgetAttention.apply(
            q, k, v, cq, ck, rows, 0.5, 4, 4, lambda a, b: [(0, 11)], lambda a, b, lo, hi: causal[a:b, lo:hi]
        )

    c = torch.cumsum(log_f, -1)
    leaves = [t.clone().requires_grad_() for t in (q, k, v, c, c)] + [rows]
    assert torch.autograd.gradcheck(run, leaves)


# ---------------------------------------------------------------- the model: plans, decoding, training
@pytest.mark.parametrize("plan", ["nope+fox", "nope+fox:true", "rope+fox,kshift=true"])
def test_cached_decoding_equals_the_full_forward(plan: str) -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, d_model=32, train_len=16, layer_plan=plan)).eval()
    with torch.no_grad():
        for block in model.blocks:
            block.attn.fox.fgate.bias.uniform_(-1.0, 4.0)
        tokens = torch.randint(0, 256, (2, 40))
        full = model(tokens)
        cache = model.new_cache()
        steps = [model(tokens[:, :7], cache=cache)]
        steps += [model(tokens[:, i : i + 1], cache=cache) for i in range(7, 30)]
        twice = cache.repeat_rows(2)  # the piece state (c, the last unshifted k and v) repeats with the keys
        steps += [model(tokens[:, i : i + 1], cache=cache) for i in range(30, 40)]
        doubled = model(tokens[:, 30:40].repeat_interleave(2, dim=0), cache=twice)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    torch.testing.assert_close(doubled, full[:, 30:40].repeat_interleave(2, dim=0), atol=1e-5, rtol=0)
    assert cache.piece_state[0]["fox.c"].shape == (2, 2, 40)


def test_the_gate_learns_and_every_backend_agrees_through_the_model() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, d_model=32, train_len=16, layer_plan="nope+fox:true"))
    tokens = torch.randint(0, 256, (2, 24))
    model.loss(tokens).backward()
    gate = model.blocks[0].attn.fox.fgate
    assert gate.weight.grad is not None and float(gate.weight.grad.abs().sum()) > 0
    assert gate.bias.grad is not None and float(gate.bias.grad.abs().sum()) > 0
    with torch.no_grad():
        ref = model(tokens, backend="reference")
        for backend in ("chunked", "sdpa", "flex", "auto"):
            torch.testing.assert_close(model(tokens, backend=backend), ref, atol=1e-5, rtol=0)


# ---------------------------------------------------------------- numerics and memory
def test_fp32_at_64k_positions_stays_finite_and_exact() -> None:
    """Strong and weak forgetting over 65536 positions (c reaches -2.6e5): the windowed tiles stay finite and the
    last rows equal a float64 computation from the gates' own segment sums."""
    L, W, D = 65536, 64, 8
    g = torch.Generator().manual_seed(0)
    logits = torch.stack((torch.full((L,), -1.0), torch.full((L,), 3.0), torch.randn(L, generator=g) * 3))[None]
    log_f = F.logsigmoid(logits)
    q, k, v = (torch.randn(1, 3, L, D, generator=g) for _ in range(3))
    c = cumulative_log_gates(log_f)
    with torch.no_grad():
        out = attention(q, k, v, forget=ForgetBias(c, c), mask=f"window:{W}", backend="chunked")
    assert torch.isfinite(out).all()
    rows = torch.arange(L - 16, L)
    keys = rows[:, None] - torch.arange(W)[None]  # (16, W): the window of each row, nearest first
    segment = torch.cumsum(F.pad(log_f.double()[0, :, rows[:, None] - torch.arange(W - 1)[None]], (1, 0)), -1)
    scores = torch.einsum("hrd,hrwd->hrw", q[0, :, rows].double(), k[0, :, keys].double()) / math.sqrt(D)
    weights = torch.softmax(scores + segment, dim=-1)  # bias of key r - w: the sum of the w gates after it
    expected = torch.einsum("hrw,hrwd->hrd", weights, v[0, :, keys].double())
    torch.testing.assert_close(out[0, :, rows].double(), expected, atol=1e-5, rtol=0)


def test_training_saves_no_l_by_l_tensor() -> None:
    L = 512
    q, k, v, log_f = forget_inputs_for(B=1, H=2, Lq=L, Lk=L, D=8)
    largest = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        largest.append(t.numel())
        return t

    leaves = [t.clone().requires_grad_() for t in (q, k, v, log_f)]
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = attention(*leaves[:3], forget=bias_of(leaves[3], L), backend="chunked", block_size=64)
    out.sum().backward()
    assert max(largest) <= 2 * L * 8  # q, k, v and c: O(L) per head, never (L, L)


# ---------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"mask": "full"}, "use a causal mask"),
        ({"softcap": 30.0}, "sinks and softcaps are not defined"),
        ({"backend": "chunked", "scheme": "alibi"}, "'alibi' adds a second one"),
    ],
)
def test_undefined_combinations_are_config_errors(options: dict, needle: str) -> None:
    q, k, v, log_f = forget_inputs_for()
    if "scheme" in options:
        options["scheme"] = build_scheme(options["scheme"], GPTConfig(n_head=3, d_model=24).head_dims())
    with pytest.raises(ConfigError, match=needle):
        attention(q, k, v, forget=bias_of(log_f, 40), **options)


def test_flex_refuses_training_on_cpu() -> None:
    q, k, v, log_f = forget_inputs_for()
    with pytest.raises(ConfigError, match="cannot train on CPU"):
        attention(q, k, v, forget=bias_of(log_f.requires_grad_(), 40), backend="flex")


def test_the_cli_exits_2_with_one_line_on_a_bias_scheme(tmp_path, capsys) -> None:
    """Refused while the plan is parsed, before any data is read."""
    assert main(["train", "--out", str(tmp_path / "r"), "--layer-plan", "alibi+fox", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fox:" in err[0] and "'alibi'" in err[0], err


def test_analyses_see_the_forget_bias() -> None:
    """The attention a capture reports (`lextra analyze`) is the one the layer computes, forget bias included."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, d_model=32, train_len=16, layer_plan="nope+fox"))
    with torch.no_grad():
        model.blocks[0].attn.fox.fgate.bias.fill_(-1.0)
    tokens = torch.randint(0, 256, (1, 20))
    view = next(layer_attention(model, tokens, block_size=20))
    (block,) = view.blocks()
    assert view.forget is not None
    c = view.forget.keys.double()
    scores = view.q.double() @ view.k.double().transpose(-1, -2) / math.sqrt(16) + c[..., :, None] - c[..., None, :]
    causal = torch.ones(20, 20, dtype=torch.bool).tril()
    expected = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    torch.testing.assert_close(block.weights().double(), expected, atol=1e-6, rtol=0)
