"""Differential attention (`lextra.attention.diffattn`): held to a float64 port of the authors' forward
(microsoft/unilm, Diff-Transformer/multihead_diffattn.py, `MultiheadDiffAttn.forward`) on the same weights and
gradients; every backend to the dense reference; cached decoding to the full forward; fp32 at 64k positions;
bad input refused with a ConfigError."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from lextra.analysis.capture import layer_attention
from lextra.attention import AttentionContext, attention, build_mask, flex_attention_forward
from lextra.attention.diffattn import DifferentialAttention, lambda_init_at
from lextra.attention.pieces import PIECES
from lextra.cli import main
from lextra.errors import ConfigError
from lextra.extend import InferenceSetup
from lextra.layer_inputs import LayerInputs
from lextra.model import GPT, GPTConfig, load_model, save_model
from lextra.positions import HeadDims, build_scheme
from lextra.positions.rotary import layout_permutation
from lextra.reporting.catalog import catalog_text

TOL = 1e-5
D_MODEL, HEADS = 32, 2  # heads of width 16: two maps of width 8 each
BACKENDS = ("reference", "sdpa", "chunked", "flex")


# ------------------------------------------------------------------------------------------------------------
# the authors' code, ported (float64): flash-attn's interleaved rotary, YOCO's frequencies, their RMSNorm and
# MultiheadDiffAttn.forward with num_kv_heads = num_heads
# ------------------------------------------------------------------------------------------------------------


def _apply_rotary_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """flash-attn's `apply_rotary_emb(x, cos, sin, interleaved=True)`: x (B, L, nh, d), cos/sin (L, d/2)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)


def _rel_pos(positions: torch.Tensor, dim: int, theta: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """YOCO's `precompute_freqs_cis(dim, ...)` at these positions, as `build_rel_pos` makes (cos, sin)."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
    angles = torch.outer(positions.float(), freqs).float()
    return torch.cos(angles).double(), torch.sin(angles).double()


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    out = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).type_as(x)
    return out * weight


def authors_forward(x, w, num_heads, depth, rel_pos, attn_mask=None, queries=None):
    """`MultiheadDiffAttn.forward` (num_kv_heads None), the module's parameters in `w`; `queries`: only the last
    that many rows' queries (their code's `offset` path), every row's keys."""
    bsz, src_len, embed_dim = x.size()
    tgt_len = queries or src_len
    head_dim = embed_dim // num_heads // 2
    scaling = head_dim**-0.5
    lambda_init = 0.8 - 0.6 * math.exp(-0.3 * depth)
    q = F.linear(x, w["q"]).view(bsz, src_len, 2 * num_heads, head_dim)
    k = F.linear(x, w["k"]).view(bsz, src_len, 2 * num_heads, head_dim)
    v = F.linear(x, w["v"]).view(bsz, src_len, num_heads, 2 * head_dim)
    q = _apply_rotary_interleaved(q[:, src_len - tgt_len :], *(t[src_len - tgt_len :] for t in rel_pos))
    k = _apply_rotary_interleaved(k, *rel_pos)
    offset = src_len - tgt_len
    q = q.transpose(1, 2)
    k = k.transpose(1, 2)
    v = v.transpose(1, 2)
    q = q * scaling
    attn_weights = torch.matmul(q, k.transpose(-1, -2))
    if attn_mask is None:
        attn_mask = torch.triu(
            torch.zeros([tgt_len, src_len]).float().fill_(float("-inf")).type_as(attn_weights), 1 + offset
        )
    attn_weights = torch.nan_to_num(attn_weights)
    attn_weights = attn_weights + attn_mask
    attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).type_as(attn_weights)
    lambda_1 = torch.exp(torch.sum(w["lambda_q1"] * w["lambda_k1"], dim=-1).float()).type_as(q)
    lambda_2 = torch.exp(torch.sum(w["lambda_q2"] * w["lambda_k2"], dim=-1).float()).type_as(q)
    lambda_full = lambda_1 - lambda_2 + lambda_init
    attn_weights = attn_weights.view(bsz, num_heads, 2, tgt_len, src_len)
    attn_weights = attn_weights[:, :, 0] - lambda_full * attn_weights[:, :, 1]
    attn = torch.matmul(attn_weights, v)
    attn = _rms_norm(attn, w["subln"])
    attn = attn * (1 - lambda_init)
    attn = attn.transpose(1, 2).reshape(bsz, tgt_len, num_heads * 2 * head_dim)
    return F.linear(attn, w["out"])


# ------------------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------------------


def _model(plan: str, n_layer: int = 3, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=61, n_layer=n_layer, n_head=HEADS, d_model=D_MODEL, train_len=16, layer_plan=plan)
    return GPT(config)


def _weights(model: GPT, layer: int) -> dict[str, torch.Tensor]:
    attn = model.blocks[layer].attn
    piece = attn.diffattn
    return {
        "q": attn.q_proj.weight,
        "k": attn.k_proj.weight,
        "v": attn.v_proj.weight,
        "out": attn.o_proj.weight,
        "lambda_q1": piece.lambda_q1,
        "lambda_k1": piece.lambda_k1,
        "lambda_q2": piece.lambda_q2,
        "lambda_k2": piece.lambda_k2,
        "subln": piece.subln_weight,
    }


def _layer_out(model: GPT, layer: int, x: torch.Tensor, backend: str = "reference") -> torch.Tensor:
    positions = torch.arange(x.shape[1])
    mask = model.blocks[layer].attn.inference.mask
    inputs = LayerInputs(model.scheme_for(layer), positions, mask or build_mask("causal"), backend, None, layer)
    return model.blocks[layer].attn(x, inputs)


def _randomise(model: GPT) -> None:
    """Lambda vectors large enough that lambda moves away from lambda_init, a subln weight away from 1."""
    with torch.no_grad():
        for block in model.blocks:
            piece = block.attn.diffattn
            for p in (piece.lambda_q1, piece.lambda_k1, piece.lambda_q2, piece.lambda_k2):
                p.normal_(0.0, 0.4)
            piece.subln_weight.uniform_(0.5, 1.5)


# ------------------------------------------------------------------------------------------------------------
# the authors' function
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [0, 2])
def test_equals_the_authors_forward_with_their_rotary(depth: int) -> None:
    model = _model("rope,layout=interleaved+diffattn").double()
    _randomise(model)
    x = torch.randn(2, 37, D_MODEL, dtype=torch.float64)
    theirs = authors_forward(x, _weights(model, depth), HEADS, depth, _rel_pos(torch.arange(37), D_MODEL // HEADS // 2))
    mine = _layer_out(model, depth, x)
    assert (mine - theirs).abs().max() < TOL
    assert (
        theirs - authors_forward(x, _weights(model, depth), HEADS, depth + 1, _rel_pos(torch.arange(37), 8))
    ).abs().max() > 1e-3


def test_equals_the_authors_forward_with_a_bias_on_both_maps() -> None:
    """ALiBi (no rotation) enters each map of a head: the authors' attn_mask holding the head's bias twice."""
    model = _model("alibi+diffattn")  # fp32 (a bias scheme's dense reference scores in fp32), against float64
    _randomise(model)
    x = torch.randn(2, 29, D_MODEL)
    pos = torch.arange(29)
    bias = model.scheme_for(1).bias(pos, pos).double().repeat_interleave(2, dim=0)  # (2H, L, L)
    causal = torch.zeros(29, 29, dtype=torch.float64).masked_fill(torch.ones(29, 29).triu(1).bool(), float("-inf"))
    no_rotation = (torch.ones(29, 4, dtype=torch.float64), torch.zeros(29, 4, dtype=torch.float64))
    weights = {name: w.detach().double() for name, w in _weights(model, 1).items()}
    theirs = authors_forward(x.double(), weights, HEADS, 1, no_rotation, attn_mask=bias + causal)
    with torch.no_grad():
        assert (_layer_out(model, 1, x).double() - theirs).abs().max() < TOL


def test_has_the_authors_gradients() -> None:
    model = _model("rope,layout=interleaved+diffattn").double()
    _randomise(model)
    x = torch.randn(2, 23, D_MODEL, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(2, 23, D_MODEL, dtype=torch.float64)
    w = _weights(model, 1)
    leaves = [x, *w.values()]
    theirs = torch.autograd.grad(
        (authors_forward(x, w, HEADS, 1, _rel_pos(torch.arange(23), 8)) * weight).sum(), leaves
    )
    for backend in ("reference", "chunked"):
        mine = torch.autograd.grad((_layer_out(model, 1, x, backend) * weight).sum(), leaves)
        for name, a, b in zip(["x", *w], mine, theirs, strict=True):
            assert (a - b).abs().max() < TOL, (backend, name)


def test_neox_rope_is_the_authors_map_with_channels_permuted() -> None:
    """`rope` (half layout) equals `rope,layout=interleaved` once each half-head's q/k rows are permuted."""
    inter = _model("rope,layout=interleaved+diffattn", n_layer=1).double()
    neox = _model("rope+diffattn", n_layer=1).double()
    neox.load_state_dict(inter.state_dict())
    perm = layout_permutation(8, "interleaved", "half")
    rows = torch.cat([perm + 8 * i for i in range(2 * HEADS)])
    with torch.no_grad():
        for name in ("q_proj", "k_proj"):
            getattr(neox.blocks[0].attn, name).weight.copy_(getattr(inter.blocks[0].attn, name).weight[rows])
    x = torch.randn(1, 21, D_MODEL, dtype=torch.float64)
    assert (_layer_out(neox, 0, x) - _layer_out(inter, 0, x)).abs().max() < TOL


def test_lambda_init_follows_the_authors_depth_index() -> None:
    assert lambda_init_at(0) == pytest.approx(0.2)  # 0.8 - 0.6: the first layer (depth 0 in their code)
    assert lambda_init_at(3) == pytest.approx(0.8 - 0.6 * math.exp(-0.9))
    piece = DifferentialAttention(HeadDims(2, 16, 32, 16), lambda_init=0.5)
    assert piece.lambda_init(7) == 0.5
    assert piece.lambda_q1.shape == (8,) and piece.subln_weight.shape == (16,)


# ------------------------------------------------------------------------------------------------------------
# every backend, the cache, extension methods, long positions
# ------------------------------------------------------------------------------------------------------------

CASES = [
    ("rope,layout=interleaved", "causal", {}),
    ("rope", "window:64", {"sinks": torch.tensor([0.7, -1.3])}),
    ("alibi", "causal", {"softcap": 20.0}),
    ("nope", "bca:32", {}),
    ("xpos", "causal", {}),
]


def _eager_flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **options: object) -> torch.Tensor:
    """The flex backend's call, eager (on CPU `attention(backend="flex")` compiles: tens of seconds a shape)."""
    options = {key: value for key, value in options.items() if key not in ("backend", "block_size")}
    return flex_attention_forward(q, k, v, AttentionContext.build(q, k, **options), eager=True)  # type: ignore[arg-type]


@pytest.mark.parametrize(("scheme", "mask", "extra"), CASES)
def test_every_backend_matches_the_reference(scheme: str, mask: str, extra: dict) -> None:
    """reference, sdpa, chunked (query blocks; exactly causal calls take its tiles), flex and auto, each map run
    by the backend, at 200 positions in blocks of 64."""
    torch.manual_seed(1)
    piece = DifferentialAttention(HeadDims(HEADS, 16, D_MODEL, 64))
    built = build_scheme(scheme, HeadDims(HEADS, 16, D_MODEL, 64))
    q, k, v = (torch.randn(2, HEADS, 200, 16) for _ in range(3))
    options = {"scheme": built, "mask": mask, **extra}
    with torch.no_grad():
        want = piece.attend(q, k, v, call=attention, layer=2, backend="reference", **options)
        checked = 0
        for backend in (*BACKENDS, "auto"):
            call = _eager_flex if backend == "flex" else attention
            try:
                got = piece.attend(q, k, v, call=call, layer=2, backend=backend, block_size=64, **options)
            except ConfigError as err:  # sdpa alone refuses a bias, sinks or a cap, naming the fix
                assert backend == "sdpa" and "backend='chunked' or 'auto'" in str(err)
                continue
            assert (got - want).abs().max() < TOL, backend
            checked += 1
    assert checked >= 4


def test_cached_decoding_equals_the_full_forward() -> None:
    model = _model("rope,layout=interleaved+diffattn;alibi+window:8+diffattn+sinks", n_layer=2)
    _randomise(model)
    tokens = torch.randint(0, 61, (2, 30))
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache()
        steps = [model(tokens[:, :12], cache=cache)] + [model(tokens[:, i : i + 1], cache=cache) for i in range(12, 30)]
    assert cache.rotated == [False, False]  # the halves rotate in the call: keys are cached untransformed
    assert (torch.cat(steps, 1) - full).abs().max() < TOL


def test_an_extension_method_runs_on_each_map_and_its_cache_agrees() -> None:
    model = _model("rope+diffattn", n_layer=2)
    _randomise(model)
    tokens = torch.randint(0, 61, (1, 40))
    with torch.no_grad():
        plain = model(tokens)
        InferenceSetup(extension="self_extend:window=8,group=4").apply(model)
        extended = model(tokens)
        cache = model.new_cache()
        steps = [model(tokens[:, :20], cache=cache)] + [model(tokens[:, i : i + 1], cache=cache) for i in range(20, 40)]
    assert (extended[:, :8] - plain[:, :8]).abs().max() < TOL  # inside the window nothing changes
    assert (extended - plain).abs().max() > 1e-3
    assert (torch.cat(steps, 1) - extended).abs().max() < TOL


@pytest.mark.parametrize("scheme", ["alibi", "rope,layout=interleaved"])
def test_fp32_at_64k_positions_is_finite_and_matches_the_authors_float64(scheme: str) -> None:
    """The last queries of a 65,536-token sequence (all keys visible), fp32, against the float64 port fed the same
    fp32 rotary angles (fp32 angles at 64k are off by ~4e-3 rad in any fp32 RoPE model; that is not checked here)."""
    model = _model(f"{scheme}+diffattn", n_layer=1)
    _randomise(model)
    L, rows = 65536, 4
    x = torch.randn(1, L, D_MODEL)
    positions = torch.arange(L)
    inputs = LayerInputs(model.scheme_for(0), positions, build_mask("causal"), "auto", None, 0, queries=rows)
    with torch.no_grad():
        mine = model.blocks[0].attn(x, inputs)
    hidden = torch.ones(rows, L, dtype=torch.bool).triu(1 + L - rows)
    mask = torch.zeros(rows, L, dtype=torch.float64).masked_fill(hidden, float("-inf"))
    if scheme == "alibi":
        mask = mask + model.scheme_for(0).bias(positions[-rows:], positions).double().repeat_interleave(2, dim=0)
        rel_pos = (torch.ones(L, 4, dtype=torch.float64), torch.zeros(L, 4, dtype=torch.float64))
    else:
        half = model.blocks[0].attn.diffattn._half_scheme(model.scheme_for(0))
        cos, sin = half.angles(positions, None)
        rel_pos = (cos.double(), sin.double())
    weights = {name: w.detach().double() for name, w in _weights(model, 0).items()}
    theirs = authors_forward(x.double(), weights, HEADS, 0, rel_pos, attn_mask=mask, queries=rows)
    assert torch.isfinite(mine).all()
    assert (mine.double() - theirs).abs().max() < TOL


# ------------------------------------------------------------------------------------------------------------
# training, listing, bad input
# ------------------------------------------------------------------------------------------------------------


def test_it_trains_lambda_and_subln() -> None:
    model = _model("rope+diffattn", n_layer=2)
    tokens = torch.randint(0, 61, (4, 17))
    model.loss(tokens).backward()
    piece = model.blocks[1].attn.diffattn
    for p in (piece.lambda_q1, piece.lambda_k2, piece.subln_weight):
        assert p.grad is not None and p.grad.abs().max() > 0


def test_it_is_listed_with_the_pieces() -> None:
    assert "diffattn" in PIECES.names()
    assert "diffattn" in catalog_text()


@pytest.mark.parametrize(
    ("plan", "d_model", "message"),
    [
        ("nope+diffattn", 30, "even head dimension"),  # heads of width 15
        ("rope+diffattn", 36, "rotates half-heads of width 9"),  # rope needs an even width, here of each half
        ("rope+diffattn,lambda_init=1.5", 32, "lambda_init must be a number in [0, 1)"),
        ("coca+diffattn", 32, "projects keys of another width"),
    ],
)
def test_bad_input_is_one_line_config_error(plan: str, d_model: int, message: str) -> None:
    with pytest.raises(ConfigError, match="diffattn") as err:
        config = GPTConfig(vocab_size=61, n_layer=1, n_head=2, d_model=d_model, train_len=16, layer_plan=plan)
        GPT(config)(torch.randint(0, 61, (1, 5)))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_cli_refuses_it_in_one_line_with_exit_2(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    common = ["--n-layer", "1", "--d-model", "32", "--n-head", "2", "--train-len", "16", "--steps", "1"]
    plan = "rope+diffattn,lambda_init=2"
    code = main(["train", "--out", str(tmp_path / "m"), "--layer-plan", plan, *common, "--quiet"])
    error = capsys.readouterr().err.strip()
    assert code == 2 and "diffattn: lambda_init must be a number in [0, 1), got 2.0" in error and "\n" not in error


def test_a_single_map_analysis_refuses_its_layers() -> None:
    model = _model("rope;rope+diffattn", n_layer=2)
    layers = layer_attention(model, torch.randint(0, 61, (1, 12)))
    assert next(layers).layer == 0  # a plain layer is captured
    with pytest.raises(ConfigError, match="layer 1 attends through 'diffattn', not one softmax map"):
        next(layers)


def test_it_saves_and_loads(tmp_path) -> None:
    model = _model("rope+diffattn,lambda_init=0.5;alibi+diffattn", n_layer=2)
    _randomise(model)
    loaded = load_model(save_model(model, tmp_path / "m"))
    tokens = torch.randint(0, 61, (1, 20))
    assert "blocks.1.attn.diffattn.lambda_q2" in loaded.state_dict()
    assert loaded.blocks[0].attn.diffattn.fixed_lambda_init == 0.5
    with torch.no_grad():
        assert torch.equal(loaded(tokens), model(tokens))
