"""Each scheme checked against its definition: exact formulas, invariances and numerics at long lengths."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import ALL_SCHEMES, RELATIVE_SCHEMES, make_scheme, qkv

from lextra.attention import attention_logits
from lextra.errors import ConfigError, LengthError
from lextra.positions import SCHEMES, HeadDims, build_scheme
from lextra.positions.bias import alibi_slopes, t5_relative_position_bucket
from lextra.positions.rotary import apply_rotary, convert_qk_weight, layout_permutation, rotary_angles


# ---------------------------------------------------------------- T5 buckets = Hugging Face's
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (16, 64), (64, 256), (8, 20), (32, 1000)])
def test_t5_buckets_equal_hugging_face(bidirectional: bool, num_buckets: int, max_distance: int) -> None:
    from transformers.models.t5.modeling_t5 import T5Attention

    relative = torch.cat([torch.arange(-3000, 3001), torch.tensor([-(10**6), 10**6, 65535, -131071])])
    expected = T5Attention._relative_position_bucket(relative, bidirectional, num_buckets, max_distance)
    got = t5_relative_position_bucket(relative, bidirectional, num_buckets, max_distance)
    assert torch.equal(got, expected)
    assert int(got.max()) == num_buckets - 1


def test_t5_bias_reads_the_bucket_table() -> None:
    scheme = make_scheme("t5", n_heads=3)
    distance = torch.tensor([0, 1, 15, 16, 200, 5000])
    bias = scheme.distance_bias(distance)
    buckets = t5_relative_position_bucket(-distance, False, 32, 128)
    assert torch.equal(bias, scheme.relative_attention_bias.weight[buckets].T)


# ---------------------------------------------------------------- ALiBi slopes
def _alibi_reference(n: int) -> list[float]:
    """Press et al.'s construction, written independently: closest power of two, then interleave."""

    def power_of_two(k: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(k) - 3)))
        return [start * start**i for i in range(k)]

    if math.log2(n).is_integer():
        return power_of_two(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_two(closest) + _alibi_reference(2 * closest)[0::2][: n - closest]


@pytest.mark.parametrize("n_heads", range(1, 33))
def test_alibi_slopes_match_the_construction(n_heads: int) -> None:
    torch.testing.assert_close(alibi_slopes(n_heads), torch.tensor(_alibi_reference(n_heads)), rtol=1e-6, atol=0)


def test_alibi_slopes_for_twelve_heads_are_the_documented_values() -> None:
    expected = [2.0**-e for e in (1, 2, 3, 4, 5, 6, 7, 8, 0.5, 1.5, 2.5, 3.5)]
    torch.testing.assert_close(alibi_slopes(12), torch.tensor(expected), rtol=1e-6, atol=0)


def test_alibi_bias_is_minus_slope_times_distance() -> None:
    scheme = make_scheme("alibi", n_heads=8)
    bias = scheme.bias(torch.arange(10), torch.arange(10))
    d = (torch.arange(10)[:, None] - torch.arange(10)[None, :]).abs().float()
    torch.testing.assert_close(bias, -alibi_slopes(8)[:, None, None] * d)


def _ruoss_alibi(n_heads: int, length: int) -> torch.Tensor:
    """A port of Ruoss et al.'s `compute_alibi_encodings_biases` (bidirectional: -|i - j|, +0.5 below the diagonal)."""
    alibi = torch.zeros(length, length, dtype=torch.float64)
    for i in range(1, length):
        alibi -= torch.ones(length, length, dtype=torch.float64).tril(-i)
        alibi -= torch.ones(length, length, dtype=torch.float64).tril(-i).T
    alibi += 0.5 * torch.ones(length, length, dtype=torch.float64).tril(-1)
    slopes = torch.tensor(_alibi_reference(n_heads), dtype=torch.float64)
    return alibi * slopes[:, None, None]


@pytest.mark.parametrize("n_heads", [1, 5, 8])
def test_alibi_left_is_ruoss_encoder_alibi(n_heads: int) -> None:
    scheme = make_scheme("alibi", n_heads=n_heads, left=0.5)
    bias = scheme.bias(torch.arange(9), torch.arange(9))
    torch.testing.assert_close(bias, _ruoss_alibi(n_heads, 9).float(), rtol=1e-6, atol=1e-7)
    assert not torch.allclose(bias, bias.transpose(-1, -2))  # left and right now differ
    with pytest.raises(ConfigError, match="alibi: left"):
        make_scheme("alibi", left=2.0)


# ---------------------------------------------------------------- translation invariance
@pytest.mark.parametrize("name", RELATIVE_SCHEMES)
def test_relative_scores_are_translation_invariant(name: str) -> None:
    scheme = make_scheme(name)
    q, k, _ = qkv(scheme, 40, batch=1)
    pos = torch.arange(40)
    base = attention_logits(q, k, scheme, pos, pos)
    for offset in (1, 977, 100_000):
        shifted = attention_logits(q, k, scheme, pos + offset, pos + offset)
        torch.testing.assert_close(shifted, base, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("name", RELATIVE_SCHEMES)
def test_relative_scores_depend_only_on_the_distance(name: str) -> None:
    """Same query and key vectors at many (m, n) pairs with equal m - n give one score."""
    scheme = make_scheme(name)
    q, k, _ = qkv(scheme, 1, batch=1)
    scores = []
    for m in (5, 64, 1000, 33_333):
        scores.append(attention_logits(q, k, scheme, torch.tensor([m]), torch.tensor([m - 5])))
    for s in scores[1:]:
        torch.testing.assert_close(s, scores[0], atol=2e-5, rtol=1e-5)


def test_fire_depends_on_the_query_position_beyond_its_threshold() -> None:
    scheme = make_scheme("fire", threshold=16.0)
    near = scheme.bias(torch.tensor([20]), torch.tensor([10]))
    far = scheme.bias(torch.tensor([2000]), torch.tensor([1990]))
    assert not torch.allclose(near, far)
    # below the threshold the denominator is constant, so FIRE is a function of m - n there
    torch.testing.assert_close(
        scheme.bias(torch.tensor([10]), torch.tensor([3])), scheme.bias(torch.tensor([12]), torch.tensor([5]))
    )


# ---------------------------------------------------------------- rotary family
def _complex_rotation(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoPE as complex multiplication on (x_k, x_{k+D/2}) pairs, in fp64 from fp32 frequencies (as HF)."""
    D = x.shape[-1]
    theta = (1.0 / base ** (torch.arange(0, D, 2).float() / D)).double()
    z = torch.complex(x[..., : D // 2].double(), x[..., D // 2 :].double())
    z = z * torch.polar(torch.ones_like(theta), positions.double()[:, None] * theta)
    return torch.cat((z.real, z.imag), -1)


def test_rope_half_layout_is_complex_rotation() -> None:
    scheme = make_scheme("rope", n_heads=2, head_dim=32)
    q, k, _ = qkv(scheme, 50, batch=1)
    pos = torch.arange(50) * 37
    qr, kr = scheme.rotate(q, k, pos, pos)
    torch.testing.assert_close(qr.double(), _complex_rotation(q, pos), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(kr.double(), _complex_rotation(k, pos), atol=1e-5, rtol=1e-5)


def test_rope_matches_hugging_face_llama() -> None:
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    config = LlamaConfig(hidden_size=64, num_attention_heads=2, max_position_embeddings=4096, rope_theta=10000.0)
    hf_rope = LlamaRotaryEmbedding(config)
    scheme = make_scheme("rope", n_heads=2, head_dim=32)
    q, k, _ = qkv(scheme, 64, batch=1)
    pos = torch.arange(64) + 1000
    cos, sin = hf_rope(q, pos[None])
    hq, hk = apply_rotary_pos_emb(q, k, cos, sin)
    lq, lk = scheme.rotate(q, k, pos, pos)
    torch.testing.assert_close(lq, hq, atol=5e-4, rtol=1e-4)  # HF forms p * theta in fp32; we use fp64
    torch.testing.assert_close(lk, hk, atol=5e-4, rtol=1e-4)


def test_rope_layout_conversion_permutes_projection_rows() -> None:
    D, H = 8, 3
    perm = layout_permutation(D, "interleaved", "half")
    assert perm.tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    assert torch.equal(layout_permutation(D, "half", "interleaved")[perm], torch.arange(D))
    weight = torch.randn(H * D, 5)
    x = torch.randn(7, 5)
    pos = torch.arange(7) * 11
    inter = make_scheme("rope", n_heads=H, head_dim=D, layout="interleaved")
    half = make_scheme("rope", n_heads=H, head_dim=D, layout="half")
    q_inter = (x @ weight.T).view(7, H, D).transpose(0, 1)
    q_half = (x @ convert_qk_weight(weight, H, "interleaved", "half").T).view(7, H, D).transpose(0, 1)
    s_inter = attention_logits(q_inter, q_inter, inter, pos, pos)
    s_half = attention_logits(q_half, q_half, half, pos, pos)
    torch.testing.assert_close(s_half, s_inter, atol=1e-5, rtol=1e-5)
    back = convert_qk_weight(convert_qk_weight(weight, H, "interleaved", "half"), H, "half", "interleaved")
    assert torch.equal(back, weight)


def test_xpos_without_decay_is_rope() -> None:
    rope = make_scheme("rope")
    xpos = make_scheme("xpos", decay=False)
    q, k, _ = qkv(rope, 30)
    pos = torch.arange(30) + 5000
    torch.testing.assert_close(attention_logits(q, k, xpos, pos, pos), attention_logits(q, k, rope, pos, pos))


def test_xpos_logit_carries_zeta_to_the_distance_over_scale_base() -> None:
    D, B = 16, 512.0
    scheme = make_scheme("xpos", n_heads=1, head_dim=D, rotation=False)
    zeta = (torch.arange(0, D, 2, dtype=torch.float64) + 0.4 * D) / (1.4 * D)
    q = torch.zeros(1, 1, 1, D)
    k = torch.zeros(1, 1, 1, D)
    q[..., 3] = k[..., 3] = 1.0  # one channel of pair 3
    for m, n in ((700, 100), (70_000, 69_000), (131_071, 130_000)):
        got = attention_logits(q, k, scheme, torch.tensor([m]), torch.tensor([n]), scale=1.0)
        assert math.isclose(float(got), float(zeta[3] ** ((m - n) / B)), rel_tol=1e-5)


def test_xpos_scales_are_fp32_and_finite_at_131072_in_bf16() -> None:
    scheme = make_scheme("xpos", n_heads=2, head_dim=32)
    q, k, _ = qkv(scheme, 64, batch=1, key_length=4096)
    q_pos = torch.arange(131_072 - 64, 131_072)
    k_pos = torch.arange(131_072 - 4096, 131_072)
    qr, kr = scheme.rotate(q.bfloat16(), k.bfloat16(), q_pos, k_pos)
    assert qr.dtype == torch.bfloat16
    assert torch.isfinite(qr).all() and torch.isfinite(kr).all()


def test_rotary_angles_are_accurate_at_long_positions() -> None:
    inv_freq = torch.tensor([1.0, 1e-4])
    cos, sin = rotary_angles(torch.tensor([131_071]), inv_freq)
    assert math.isclose(float(cos[0, 0]), math.cos(131_071.0), abs_tol=1e-6)
    assert math.isclose(float(sin[0, 1]), math.sin(13.1071), abs_tol=1e-6)


def test_interleaved_rotation_rotates_adjacent_pairs() -> None:
    x = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    cos, sin = torch.tensor([[0.0, 1.0]]), torch.tensor([[1.0, 0.0]])
    torch.testing.assert_close(apply_rotary(x, cos, sin, "interleaved"), torch.tensor([[0.0, 1.0, 0.0, 1.0]]))


# ---------------------------------------------------------------- CoCA
def test_coca_score_is_the_collinear_formula_and_depends_only_on_distance() -> None:
    D = 16
    scheme = make_scheme("coca", n_heads=1, head_dim=D)
    q = torch.randn(1, 1, 1, D)
    tau_raw = torch.randn(1, 1, 1, D // 2)
    theta = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    magnitude = (q[..., : D // 2].double() ** 2 + q[..., D // 2 :].double() ** 2).flatten()
    tau = torch.relu(tau_raw.double()).flatten()
    for m, n in ((9, 2), (1007, 1000), (120_007, 120_000), (30, 2)):
        expected = (tau * magnitude * torch.cos((m - n) * theta)).sum() / math.sqrt(D)
        got = attention_logits(q, tau_raw, scheme, torch.tensor([m]), torch.tensor([n]))
        assert math.isclose(float(got), float(expected), rel_tol=1e-4, abs_tol=1e-5)


def test_coca_keys_are_non_negative_multiples_of_the_query_slice() -> None:
    """Un-rotated, K' is (tau, 0) per slice: the implied key k_{n,k} = tau q_{m,k} is collinear with q."""
    scheme = make_scheme("coca", n_heads=1, head_dim=8)
    q = torch.randn(1, 1, 3, 8)
    tau = torch.randn(1, 1, 3, 4)
    _, kp = scheme.rotate(q, tau, torch.zeros(3, dtype=torch.long), torch.zeros(3, dtype=torch.long))
    assert torch.equal(kp[..., :4], torch.relu(tau)) and torch.equal(kp[..., 4:], torch.zeros_like(tau))
    assert scheme.key_dim() == 4


# ---------------------------------------------------------------- Sandwich, KERPLE
def test_sandwich_equals_its_closed_form() -> None:
    H, d_bar = 6, 128
    scheme = make_scheme("sandwich", n_heads=H)
    distances = [0, 1, 2, 7, 100, 1000, 65_000]
    bias = scheme.distance_bias(torch.tensor(distances))
    for h in range(1, H + 1):
        for j, d in enumerate(distances):
            total = sum(math.cos(d * 10000 ** (-2 * i / d_bar)) for i in range(1, d_bar // 2 + 1)) - d_bar / 2
            assert math.isclose(float(bias[h - 1, j]), total / (8 * h / H), rel_tol=1e-5, abs_tol=1e-5)
    assert torch.all(bias[:, 0] == 0)


def test_smoothed_sandwich_is_the_log_fit() -> None:
    scheme = make_scheme("sandwich", n_heads=4, smoothed=True)
    d = torch.tensor([0.0, 10.0, 500.0])
    expected = (-0.825 * torch.log1p(d) - 0.8)[None] / (8 * torch.arange(1, 5)[:, None] / 4)
    torch.testing.assert_close(scheme.distance_bias(d.long()), expected)


@pytest.mark.parametrize("name", ["kerple_log", "kerple_power"])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_kerple_parameters_respect_constraints_after_optimizer_steps(name: str, sign: float) -> None:
    """Training through the bias pushes r1, r2 out of range (down for sign=-1, up for +1); the forward clamps."""
    scheme = make_scheme(name)
    optimizer = torch.optim.SGD(scheme.parameters(), lr=10.0)
    distance = torch.arange(0, 64)
    for _ in range(5):
        optimizer.zero_grad()
        (sign * scheme.distance_bias(distance).sum()).backward()
        optimizer.step()
    raw = torch.cat([scheme.r1.detach(), scheme.r2.detach()])
    assert float(raw.min()) < 0.01 if sign < 0 else float(raw.max()) > 2.0  # the raw values left the range
    r1, r2 = (p.detach() for p in scheme.parameters_clamped())
    floor = torch.tensor(0.01)
    assert bool((r1 >= floor).all()) and bool((r2 >= floor).all())
    if name == "kerple_power":
        assert float(r2.max()) <= 2.0
    bias = scheme.distance_bias(distance)
    assert torch.isfinite(bias).all() and bool((bias <= 0).all())


def test_kerple_formulas() -> None:
    log = make_scheme("kerple_log", n_heads=2)
    power = make_scheme("kerple_power", n_heads=2)
    d = torch.tensor([0, 3, 40])
    r1, r2 = log.parameters_clamped()
    torch.testing.assert_close(log.distance_bias(d), -r1[:, None] * torch.log1p(r2[:, None] * d.float()))
    r1, r2 = power.parameters_clamped()
    torch.testing.assert_close(power.distance_bias(d), -r1[:, None] * d.float()[None] ** r2[:, None])


def test_kerple_default_init_ranges() -> None:
    dims = HeadDims(1000, 8, 8000, 64)
    log = build_scheme("kerple_log", dims).requires_grad_(False)
    assert float(log.r1.min()) >= 0 and float(log.r1.max()) <= 2 and float(log.r2.max()) <= 1
    assert float(log.r1.max()) > 1.5  # U(0, 2), not U(0, 1)


# ---------------------------------------------------------------- absolute schemes and long-length numerics
def test_sinusoidal_table_values() -> None:
    scheme = make_scheme("sinusoidal", n_heads=2, head_dim=4, scale=1.0)
    x = torch.zeros(1, 3, 8)
    out = scheme.embed(x, torch.tensor([0, 1, 70_000]))
    scaled = make_scheme("sinusoidal", n_heads=2, head_dim=4).embed(x, torch.tensor([0, 1, 70_000]))
    torch.testing.assert_close(scaled, out / math.sqrt(8))
    for p_idx, p in enumerate((0, 1, 70_000)):
        for i in range(4):
            angle = p / 10000 ** (2 * i / 8)
            assert math.isclose(float(out[0, p_idx, 2 * i]), math.sin(angle), abs_tol=1e-6)
            assert math.isclose(float(out[0, p_idx, 2 * i + 1]), math.cos(angle), abs_tol=1e-6)


def test_learned_table_fails_clearly_beyond_its_length() -> None:
    scheme = make_scheme("learned", train_len=32)
    scheme.embed(torch.zeros(1, 32, 64), torch.arange(32))
    with pytest.raises(LengthError, match=r"32 entries.*position 32"):
        scheme.embed(torch.zeros(1, 33, 64), torch.arange(33))


@pytest.mark.parametrize("name", [n for n in ALL_SCHEMES if n != "learned"])
def test_every_scheme_is_finite_at_131072_positions(name: str) -> None:
    scheme = make_scheme(name, n_heads=2, head_dim=16)
    q, k, _ = qkv(scheme, 16, batch=1, key_length=2048)
    q_pos = torch.arange(131_072 - 16, 131_072)
    k_pos = torch.arange(131_072 - 2048, 131_072)
    logits = attention_logits(q, k, scheme, q_pos, k_pos)
    assert torch.isfinite(logits).all()
    x = scheme.embed(torch.zeros(1, 16, 32), q_pos)
    assert torch.isfinite(x).all()


# ---------------------------------------------------------------- configuration errors
def test_unknown_scheme_lists_the_known_ones() -> None:
    with pytest.raises(
        ConfigError, match=r"unknown position scheme 'ropee'; known position schemes: nope, .*rope.*alibi"
    ):
        build_scheme("ropee", HeadDims(2, 8, 16, 32))


@pytest.mark.parametrize("name", ["rope", "xpos", "coca"])
def test_rotary_schemes_need_an_even_head_dimension(name: str) -> None:
    with pytest.raises(ConfigError, match="even head dimension, got 7"):
        build_scheme(name, HeadDims(2, 7, 14, 32))


def test_unknown_option_names_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match=r"has no option 'bse'; its options: base, layout"):
        build_scheme("rope", HeadDims(2, 8, 16, 32), bse=500)


def test_every_scheme_fills_only_its_places() -> None:
    for name in ALL_SCHEMES:
        cls = SCHEMES.get(name)
        places = [cls.adds_embedding, cls.transforms_qk, cls.has_bias]
        assert sum(places) <= 1, name
        assert cls.summary, name
    assert SCHEMES.get("nope").relative and not any([SCHEMES.get("nope").has_bias])


def test_fire_piecewise_linear_evaluation_equals_its_mlp() -> None:
    """Without autograd FIRE evaluates its ReLU MLP exactly as one linear piece per interval between kinks."""
    scheme = make_scheme("fire", n_heads=4)
    u = torch.cat([torch.linspace(-5, 5, 10_001), torch.randn(1000) * 3, torch.tensor([0.0])])
    with torch.no_grad():
        pieces = scheme._mlp_heads(u)
        direct = scheme.mlp(u.unsqueeze(-1)).movedim(-1, 0)
    scale = float(direct.abs().max())
    assert (pieces - direct).abs().max() <= 1e-6 * max(1.0, scale) * 4


def test_fire_piecewise_gradients_equal_the_mlps_own() -> None:
    """Under autograd the pieces' slopes and intercepts carry the MLP's weight gradients (the piece only selects
    which applies), and d bias / du is the piece's slope: the same gradients as the explicit fp64 MLP."""
    scheme = make_scheme("fire", n_heads=4, threshold=32.0)
    q_pos, k_pos = torch.arange(40, 200), torch.arange(0, 200)
    upstream = torch.randn(4, 160, 200)
    params = list(scheme.parameters())
    pieces = scheme.bias(q_pos, k_pos)
    grads = torch.autograd.grad((pieces * upstream).sum(), params)
    threshold = scheme.l_mult.abs() * scheme.threshold
    u = scheme._psi((q_pos[:, None] - k_pos[None, :]).float())
    u = u / (scheme._psi(torch.maximum(q_pos.float(), threshold)) + scheme.eps)[:, None]
    up, down = scheme.mlp[0], scheme.mlp[2]
    hidden = torch.relu(F.linear(u.double().unsqueeze(-1), up.weight.double(), up.bias.double()))
    direct = F.linear(hidden, down.weight.double(), down.bias.double()).float().movedim(-1, 0)
    expected = torch.autograd.grad((direct * upstream).sum(), params)
    torch.testing.assert_close(pieces, direct, rtol=0, atol=1e-6)
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert float(grads[0].abs()) > 0  # c (psi's scale) does receive a gradient


@pytest.mark.parametrize(
    "scaling",
    [
        {"type": "linear", "factor": 4.0},
        {"type": "dynamic", "factor": 2.0},
        {"type": "yarn", "factor": 8.0},
        {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
    ],
)
def test_scaled_rope_matches_hugging_face_rotary_embedding(scaling: dict) -> None:
    """cos/sin (attention factor included) and the rotated q, k equal Llama's for the same rope_scaling."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    from lextra.positions.scaling_hf import to_hf

    train_len, D = 64, 32
    scheme = make_scheme("rope", n_heads=2, head_dim=D, train_len=train_len, scaling=scaling)
    hf_scaling = to_hf(scheme.scaling, base=10000.0)
    max_positions = train_len if scaling["type"] == "dynamic" else int(train_len * scaling["factor"])
    config = LlamaConfig(
        hidden_size=2 * D,
        num_attention_heads=2,
        head_dim=D,
        max_position_embeddings=max_positions,
        rope_parameters=dict(hf_scaling),
    )
    hf_rope = LlamaRotaryEmbedding(config)
    q, k, _ = qkv(scheme, 300, batch=1)
    pos = torch.arange(300)
    cos, sin = hf_rope(q, pos[None])
    hq, hk = apply_rotary_pos_emb(q, k, cos, sin)
    lq, lk = scheme.rotate(q, k, pos, pos)
    torch.testing.assert_close(lq, hq, atol=2e-4, rtol=1e-4)  # HF forms p * theta in fp32; we use fp64
    torch.testing.assert_close(lk, hk, atol=2e-4, rtol=1e-4)


def test_xpos_blocks_share_one_length_for_dynamic_scaling() -> None:
    """Rotated block by block (a small scale_base forces it), xPos with dynamic NTK uses the whole call's length."""
    from lextra.attention import attention

    scheme = make_scheme(
        "xpos", n_heads=2, head_dim=16, train_len=32, scale_base=8.0, scaling={"type": "dynamic", "factor": 2.0}
    )
    q, k, v = qkv(scheme, 300, batch=1)
    ref = attention(q, k, v, scheme=scheme, backend="reference")
    fast = attention(q, k, v, scheme=scheme, backend="chunked", block_size=64)
    torch.testing.assert_close(fast, ref, atol=1e-5, rtol=0)


@torch.no_grad()
def test_fire_bias_into_reused_buffers_equals_its_bias_exactly() -> None:
    torch.manual_seed(0)
    fire = build_scheme("fire", HeadDims(4, 16, 64, 128), threshold=32.0)
    workspace: dict[str, torch.Tensor] = {}
    blocks = [(40, 56, 0, 56), (56, 80, 10, 80), (80, 81, 0, 81), (300, 316, 200, 316), (33, 49, 0, 49)]
    for q0, q1, k0, k1 in blocks:  # growing and shrinking blocks reuse (and grow) the same buffers
        q_pos, k_pos = torch.arange(q0, q1), torch.arange(k0, k1)
        got = fire.bias_into(q_pos, k_pos, workspace).clone()
        assert torch.equal(got, fire.bias(q_pos, k_pos))
    assert set(workspace) == {"u", "piece", "bias", "offset"}
    below = torch.arange(0, 16)  # queries under the threshold keep the per-distance table path
    assert torch.equal(fire.bias_into(below, below, workspace), fire.bias(below, below))


@torch.no_grad()
def test_fire_blocks_on_one_linear_piece_skip_the_per_pair_gathers_exactly() -> None:
    """Far from the diagonal u = psi(m - n) / psi(m) spans a sliver of one piece of the MLP: one multiply-add."""
    torch.manual_seed(0)
    fire = build_scheme("fire", HeadDims(4, 16, 64, 128), threshold=32.0)
    q_pos, k_pos = torch.arange(6000, 6016), torch.arange(0, 64)
    breakpoints = fire.linear_pieces()[0]
    u = fire._psi((q_pos[:, None] - k_pos[None, :]).float()) / (fire._psi(q_pos.float()) + fire.eps)[:, None]
    assert torch.bucketize(u, breakpoints).unique().numel() == 1  # the case under test
    workspace: dict[str, torch.Tensor] = {}
    got = fire.bias_into(q_pos, k_pos, workspace).clone()
    assert "piece" not in workspace  # no per-pair piece index was built
    assert torch.equal(got, fire.bias(q_pos, k_pos))
    near = torch.arange(6000, 6016)  # the diagonal block spans several pieces: the general path, same values
    assert torch.equal(fire.bias_into(near, torch.arange(0, 6016), workspace), fire.bias(near, torch.arange(0, 6016)))
    assert "piece" in workspace


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotation_without_autograd_is_bit_identical_to_the_differentiable_one(dtype: torch.dtype) -> None:
    """Inference rotates into one preallocated output (four passes); the values must not change by one bit."""
    x = torch.randn(2, 3, 50, 16).to(dtype)
    angles = torch.randn(50, 8)
    cos, sin = angles.cos(), angles.sin()
    with torch.enable_grad():
        differentiable = apply_rotary(x, cos, sin, "half")
    with torch.no_grad():
        inference = apply_rotary(x, cos, sin, "half")
    assert inference.dtype == dtype
    assert torch.equal(inference, differentiable)
