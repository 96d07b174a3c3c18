"""CoPE (Golovneva et al. 2024, arXiv 2405.18719) held to the authors' module and every backend to the dense one."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import make_scheme

from lextra.analysis import layer_attention
from lextra.attention import attention
from lextra.errors import ConfigError
from lextra.model import GPT, GPTConfig

TOL = 1e-5


def authors_cope(q, k, v, pos_emb, npos, nodiv=False, weights=False):
    """The authors' `ContextPosSelfAttn.forward` (facebookresearch/RAM, projects/cope/src/cope/context_position.py;
    default flags: gates from the attention keys, causal 0/1 mask), ported to float64 on (B*H, L, D) tensors;
    `weights`: the attention weights instead of the output."""
    head_dim = q.shape[-1]
    L = q.shape[-2]
    mask = torch.ones(L, L, dtype=q.dtype).tril()[None]
    gate_logits = torch.bmm(q, k.transpose(-1, -2))
    gates = torch.sigmoid(gate_logits / math.sqrt(head_dim)) * mask
    positions = gates.flip(-1).cumsum(dim=-1).flip(-1).clamp(max=npos - 1)
    fixed = torch.matmul(q, pos_emb)
    ceil, floor = positions.ceil().long(), positions.floor().long()
    weight = positions - floor
    pos_logits = fixed.gather(-1, ceil) * weight + fixed.gather(-1, floor) * (1 - weight)
    if nodiv:
        logits = gate_logits / math.sqrt(head_dim) + pos_logits
    else:
        logits = (gate_logits + pos_logits) / math.sqrt(head_dim)
    logits = logits + mask.log()
    attn = torch.softmax(logits, dim=-1)
    return attn if weights else torch.bmm(attn, v)


def _inputs(scheme, length, batch=2, queries=None, grad=False, scale=1.0):
    H, D = scheme.dims.n_heads, scheme.dims.head_dim
    q, k, v = (torch.randn(batch, H, length, D) * scale for _ in range(3))
    if queries is not None:
        q = q[..., -queries:, :]
    return [t.requires_grad_(grad) for t in (q, k, v)]


@pytest.mark.parametrize("nodiv", [False, True])
@pytest.mark.parametrize("backend", ["reference", "chunked"])
def test_cope_equals_the_authors_module(backend: str, nodiv: bool) -> None:
    """Same tensors, the authors' function in float64: counts past npos - 1 = 12 are clamped (L = 29)."""
    scheme = make_scheme("cope", n_heads=3, head_dim=8, train_len=12, nodiv=nodiv)
    q, k, v = _inputs(scheme, 29, scale=2.0)
    got = attention(q, k, v, scheme=scheme, backend=backend, block_size=8)
    flat = [t.double().reshape(-1, 29, 8) for t in (q, k, v)]
    want = authors_cope(*flat, scheme.pos_emb.detach().double()[None], scheme.npos, nodiv).reshape(got.shape)
    assert scheme.npos == 13
    assert (got.double() - want).abs().max() <= TOL
    # the table matters: without it the result is plain causal attention, which differs
    plain = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert (got - plain).abs().max() > 1e-2


@pytest.mark.parametrize(
    ("mask", "queries", "tile", "extras"),
    [
        ("causal", None, 7, {}),
        ("causal", 9, 4, {"temperature": "per_query"}),
        ("window:6", None, 5, {}),
        ("bca:8", None, 3, {"temperature": "per_query"}),
        ("causal", None, 16, {"sinks": True, "softcap": 3.0}),
        ("full", None, 6, {}),
    ],
)
def test_tiled_path_equals_the_dense_one(mask: str, queries: int | None, tile: int, extras: dict) -> None:
    """Key tiles walked leftwards with carried counts equal the dense counts: uneven tiles, queries offset from the
    keys (cached decoding), windows, BCA, a full mask, per-query temperatures, sinks and a softcap."""
    scheme = make_scheme("cope", n_heads=2, head_dim=8, train_len=16)
    q, k, v = _inputs(scheme, 33, queries=queries, scale=1.5)
    options = {"mask": mask, "softcap": extras.get("softcap")}
    if extras.get("temperature"):
        options["temperature"] = torch.linspace(0.6, 1.4, q.shape[-2]).repeat(2, 1)
    if extras.get("sinks"):
        options["sinks"] = torch.tensor([0.5, -1.0])
    with torch.no_grad():
        want = attention(q, k, v, scheme=scheme, backend="reference", **options)
        got = attention(q, k, v, scheme=scheme, backend="chunked", block_size=tile, **options)
        auto = attention(q, k, v, scheme=scheme, **options)
    assert (got - want).abs().max() <= TOL and torch.equal(auto, attention(q, k, v, scheme=scheme, **options))
    assert (auto - want).abs().max() <= TOL


def test_tiled_gradients_equal_the_dense_ones() -> None:
    """Training through the checkpointed tiles gives the dense path's gradients for q, k, v and the table."""
    scheme = make_scheme("cope", n_heads=2, head_dim=8, train_len=10)
    q, k, v = _inputs(scheme, 23, grad=True, scale=1.5)
    weight = torch.randn(2, 2, 23, 8)

    def grads(backend: str) -> list[torch.Tensor]:
        out = attention(q, k, v, scheme=scheme, backend=backend, block_size=6, mask="window:9")
        return list(torch.autograd.grad((out * weight).sum(), [q, k, v, scheme.pos_emb]))

    want, got = grads("reference"), grads("chunked")
    assert want[3].abs().max() > 1e-3  # the table is learned through the gather and the interpolation
    for a, b in zip(want, got, strict=True):
        assert (a - b).abs().max() <= TOL


def test_zero_table_is_plain_attention_and_positions_are_never_read() -> None:
    """Zero-initialised as the authors' table, CoPE starts as attention without positions; its scores read no
    position, so shifting every position changes nothing."""
    scheme = make_scheme("cope", n_heads=2, head_dim=8, train_len=16)
    q, k, v = _inputs(scheme, 20)
    with torch.no_grad():
        shifted = torch.arange(20) + 1000
        base = attention(q, k, v, scheme=scheme, backend="chunked")
        moved = attention(q, k, v, scheme=scheme, backend="chunked", q_pos=shifted, k_pos=shifted)
        scheme.pos_emb.zero_()
        zero = attention(q, k, v, scheme=scheme, backend="chunked")
    assert torch.equal(base, moved)
    assert (zero - F.scaled_dot_product_attention(q, k, v, is_causal=True)).abs().max() <= TOL


def test_cached_decoding_equals_the_full_forward() -> None:
    """A KV cache, one token at a time after a prompt, gives the full forward's logits (both backends)."""
    torch.manual_seed(1)
    model = GPT(GPTConfig(vocab_size=61, n_layer=2, n_head=2, d_model=16, train_len=8, layer_plan="cope")).eval()
    with torch.no_grad():
        for scheme in model.schemes:
            scheme.pos_emb.normal_(0.0, 0.5)
        tokens = torch.randint(0, 61, (2, 21))
        full = model(tokens)
        cache = model.new_cache()
        steps = [model(tokens[:, :6], cache=cache)] + [model(tokens[:, i : i + 1], cache=cache) for i in range(6, 21)]
        dense = model(tokens, backend="reference")
    assert len(model.schemes) == 2  # a table per layer
    assert (torch.cat(steps, dim=1) - full).abs().max() <= TOL and (dense - full).abs().max() <= TOL


def test_layer_plan_trains_cope_beside_rope() -> None:
    """In a plan (CoPE on layer 0, RoPE on layer 1) the tiled path's loss and table gradient are the dense path's."""
    config = GPTConfig(vocab_size=61, n_layer=2, n_head=2, d_model=16, train_len=8, layer_plan="cope,npos=12;rope")
    model = GPT(config)
    with torch.no_grad():
        model.schemes[0].pos_emb.normal_(0.0, 0.5)
    tokens = torch.randint(0, 61, (2, 13))
    results = []
    for backend in ("reference", "chunked"):
        model.zero_grad()
        loss = model.loss(tokens, backend=backend)
        loss.backward()
        results.append((loss.detach(), model.schemes[0].pos_emb.grad.clone()))
    assert model.schemes[0].npos == 12 and model.variants[1].scheme == "rope"
    assert (results[0][0] - results[1][0]).abs() <= TOL
    assert results[1][1].abs().max() > 0 and (results[0][1] - results[1][1]).abs().max() <= TOL


def test_fp32_counts_at_64k_keys_stay_finite_and_exact() -> None:
    """The last queries of a 64k sequence count up to 64k gates in fp32: finite, and the float64 authors' values
    (the tiles carry the counts' whole part in fp64 and sum each tile's gates in fp32)."""
    L, n = 1 << 16, 3
    scheme = make_scheme("cope", n_heads=1, head_dim=4, train_len=L)
    q, k, v = _inputs(scheme, L, batch=1, queries=n, scale=3.0)
    with torch.no_grad():
        got = attention(q, k, v, scheme=scheme, backend="chunked")
    qd, kd, vd = (t.double()[0, 0] for t in (q, k, v))
    s = qd @ kd.T / 2.0
    gates = torch.sigmoid(s) * (torch.arange(L)[None] <= torch.arange(L - n, L)[:, None])
    counts = gates.flip(-1).cumsum(-1).flip(-1)
    fixed = qd @ scheme.pos_emb.detach().double()
    w = counts - counts.floor()
    pos = fixed.gather(-1, counts.ceil().long()) * w + fixed.gather(-1, counts.floor().long()) * (1 - w)
    logits = (s + pos / 2.0).masked_fill(gates == 0, float("-inf"))
    want = torch.softmax(logits, -1) @ vd
    assert bool(torch.isfinite(got).all()) and counts.max() > 3e4
    # fp32 scores leave each gate ~1e-7 off, ~3e-5 over 64k of them, read through a table whose neighbouring entries
    # differ by ~2 logits here; a bare fp32 count would be resolved to 1/256 at 64k (an error of ~1e-2)
    assert (got[0, 0].double() - want).abs().max() <= 5e-4


def test_backends_that_cannot_run_cope_are_refused_in_one_line() -> None:
    scheme = make_scheme("cope", n_heads=2, head_dim=8, train_len=16)
    q, k, v = _inputs(scheme, 8)
    for backend, word in (("flex", "reverse cumulative sum"), ("sdpa", "gate-counted positions")):
        with pytest.raises(ConfigError, match=word) as err:
            attention(q, k, v, scheme=scheme, backend=backend)
        assert "\n" not in str(err.value) and "reference" in str(err.value)


def test_counts_past_the_table_are_refused_without_clamping() -> None:
    """`clamp=false`: a call with more keys than the table can count is a ConfigError naming npos; clamped (the
    authors' default), the same call runs."""
    model = GPT(GPTConfig(vocab_size=61, n_layer=1, n_head=2, d_model=16, train_len=8, layer_plan="cope,clamp=false"))
    tokens = torch.randint(0, 61, (1, 9))
    with torch.no_grad():
        assert model(tokens[:, :8]).shape == (1, 8, 61)  # 8 keys count at most 8 = npos - 1
        with pytest.raises(ConfigError, match=r"npos >= 10, or set clamp=true"):
            model(tokens)
    with pytest.raises(ConfigError, match="cope: npos"):
        GPTConfig(layer_plan="cope,npos=1").validate()


def test_analyses_read_copes_own_weights() -> None:
    """The analyses' capture (`layer_attention`) gives a CoPE layer's weights as the authors' module computes them
    from the layer's q and k, in query blocks that see only the keys their mask reaches."""
    torch.manual_seed(2)
    model = GPT(GPTConfig(vocab_size=61, n_layer=1, n_head=2, d_model=16, train_len=8, layer_plan="cope"))
    with torch.no_grad():
        model.schemes[0].pos_emb.normal_(0.0, 0.5)
    view = next(layer_attention(model, torch.randint(0, 61, (1, 19)), block_size=5))
    got = torch.cat([torch.nn.functional.pad(b.weights(), (0, 19 - b.logits.shape[-1])) for b in view.blocks()], -2)
    q, k = (t.double().reshape(2, 19, 8) for t in (view.q, view.k))
    want = authors_cope(q, k, k, model.schemes[0].pos_emb.double()[None], 9, weights=True)
    assert (got.double().reshape(2, 19, 19) - want).abs().max() <= TOL
