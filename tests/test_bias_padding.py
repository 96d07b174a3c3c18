"""A materialised score bias (T5's `position_bias`) and padding mask (Hugging Face's `attention_mask`, boolean or
additive 0 / min) in the one attention call: every backend that takes them equals the dense reference, one that
does not is never chosen, and Hugging Face models with padding or T5's bias equal Hugging Face in every backend."""

from __future__ import annotations

import copy
from typing import ClassVar

import pytest
import torch
from test_hf import tiny_causal, tiny_t5, tokens
from torch import Tensor

from lextra.attention import attention, backends
from lextra.attention.context import AttentionBackend, AttentionContext
from lextra.errors import ConfigError
from lextra.hf import adapt

B, H, L, D = 2, 3, 40, 8
TOL = 1e-5
NAMES = ("sdpa", "chunked", "flex", "auto")
KINDS = ("bias", "padding", "additive", "bias+padding+tau", "per-query tau", "sinks", "softcap")


def _inputs(seed: int = 0) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """q, k, v (B, H, L, D), a T5-shaped bias (1, H, L, L) and a left-padding mask (B, 1, L, L), boolean."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, L, D, generator=g) for _ in range(3))
    bias = torch.randn(1, H, L, L, generator=g)
    padding = torch.ones(B, 1, L, L, dtype=torch.bool)
    padding[0, ..., :7] = False  # the first sequence left-padded by 7
    return q, k, v, bias, padding


def _additive(padding: Tensor) -> Tensor:
    """Hugging Face's additive form of a boolean mask: 0 visible, the dtype's min hidden."""
    return torch.zeros(padding.shape).masked_fill(~padding, torch.finfo(torch.float32).min)


def _options(kind: str, bias: Tensor, padding: Tensor) -> dict:
    """The call's options for each case: a bias, boolean or additive padding, with temperatures, sinks, a cap."""
    tau = torch.tensor([0.7, 1.3, 1.0])
    per_query = tau[:, None] * torch.linspace(1, 2, L)
    cases = {
        "bias": {"score_bias": bias},
        "padding": {"padding": padding},
        "additive": {"padding": _additive(padding)},
        "bias+padding+tau": {"score_bias": bias, "padding": padding, "temperature": tau},
        "per-query tau": {"score_bias": bias, "padding": padding, "temperature": per_query},
        "sinks": {"padding": padding, "sinks": torch.tensor([0.5, -1.0, 2.0])},
        "softcap": {"score_bias": bias, "padding": _additive(padding), "softcap": 4.0},
    }
    return cases[kind]


@pytest.mark.parametrize("mask", ["causal", "full", "window:9", "bca:16"])
@pytest.mark.parametrize("kind", KINDS)
@torch.no_grad()
def test_every_backend_equals_the_dense_reference(mask: str, kind: str) -> None:
    q, k, v, bias, padding = _inputs()
    options = _options(kind, bias, padding)
    want = attention(q, k, v, mask=mask, backend="reference", **options)
    assert not want.isnan().any()
    for name in NAMES:
        try:
            got = attention(q, k, v, mask=mask, backend=name, block_size=11 if name == "chunked" else None, **options)
        except ConfigError as err:  # a backend that cannot apply the call says so; auto never refuses
            assert name == "sdpa" and ("softcap" in str(err) or "mask" in str(err)), (name, err)
            continue
        assert (got - want).abs().max() < TOL, (name, mask, kind)


def test_chunked_slices_the_tensors_per_query_block_under_autograd() -> None:
    q, k, v, bias, padding = _inputs(seed=3)
    options = _options("bias+padding+tau", bias, padding)
    q.requires_grad_(True)
    want = attention(q, k, v, mask="causal", backend="reference", **options)
    got = attention(q, k, v, mask="causal", backend="chunked", block_size=6, **options)
    assert (got - want).abs().max() < TOL
    (grad_want,) = torch.autograd.grad(want.square().sum(), q)
    (grad_got,) = torch.autograd.grad(got.square().sum(), q)
    assert (grad_got - grad_want).abs().max() < 1e-4


@torch.no_grad()
def test_the_reference_is_hugging_faces_dense_computation() -> None:
    """scores * scale + bias (+ additive padding), over the temperature, masked, softmax: on every row that sees a
    key; a row the padding hides entirely attends to nothing."""
    q, k, v, bias, padding = _inputs(seed=1)
    tau = torch.tensor([0.7, 1.3, 1.0])
    scale = 0.5
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    logits = (q @ k.transpose(-1, -2)) * scale + bias + _additive(padding)
    logits = (logits / tau[:, None, None]).masked_fill(~causal, float("-inf"))
    want = torch.softmax(logits, dim=-1) @ v
    got = attention(q, k, v, backend="reference", scale=scale, temperature=tau, score_bias=bias, padding=padding)
    seen = (padding & causal).any(-1).expand(B, H, L)
    assert (got - want)[seen].abs().max() < TOL
    assert torch.equal(got[~seen], torch.zeros_like(got[~seen]))


class _Plain(AttentionBackend):
    """A backend that knows nothing of score biases and padding (as a plugin written before them)."""

    name: ClassVar[str] = "plain_only"

    def applies(self, ctx: AttentionContext) -> str | None:
        return None

    def run(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        return torch.zeros_like(q)


@torch.no_grad()
def test_a_backend_that_does_not_take_them_is_never_chosen() -> None:
    q, k, v, bias, padding = _inputs()
    backends.register_backend(_Plain(), auto={"cpu": 0})
    try:
        assert torch.equal(attention(q, k, v, backend="auto"), torch.zeros_like(q))  # chosen for plain calls
        want = attention(q, k, v, backend="reference", padding=padding, score_bias=bias)
        assert (attention(q, k, v, padding=padding, score_bias=bias) - want).abs().max() < TOL
        with pytest.raises(ConfigError, match="plain_only backend does not apply a materialised score bias"):
            attention(q, k, v, backend="plain_only", padding=padding)
    finally:
        backends.unregister_backend("plain_only")


@torch.no_grad()
def test_sdpa_refuses_a_softcap_and_auto_takes_chunked() -> None:
    q, k, v, _, padding = _inputs()
    with pytest.raises(ConfigError, match="softcap"):
        attention(q, k, v, backend="sdpa", padding=padding, softcap=3.0)
    ctx = AttentionContext.build(q, k, padding=padding, softcap=3.0)
    assert backends.choose_backend(ctx).name == "chunked"
    assert backends.choose_backend(AttentionContext.build(q, k, padding=padding)).name == "sdpa"


def test_bad_shapes_and_dtypes_are_refused() -> None:
    q, k, _, bias, padding = _inputs()
    with pytest.raises(ConfigError, match="score_bias must be broadcastable"):
        AttentionContext.build(q, k, score_bias=bias[0])
    with pytest.raises(ConfigError, match="padding must be broadcastable"):
        AttentionContext.build(q, k, padding=padding[..., :5])
    with pytest.raises(ConfigError, match="boolean or an additive float mask"):
        AttentionContext.build(q, k, padding=padding.long())
    ctx = AttentionContext.build(q, k, padding=_additive(padding), score_bias=bias.half())
    assert ctx.padding is not None and ctx.padding.dtype == torch.bool and torch.equal(ctx.padding, padding)
    assert ctx.score_bias is not None and ctx.score_bias.dtype == torch.float32


@pytest.mark.parametrize("name", ["reference", "sdpa", "chunked", "flex"])
@torch.no_grad()
def test_padded_llama_and_t5_equal_hugging_face_in_every_backend(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hugging Face layers build one context and call the one `attention`: with `auto` made to ask only `name`,
    a left-padded Llama and a padded T5 (its bucket bias a score bias) give Hugging Face's own outputs."""
    monkeypatch.setitem(backends.AUTO_ORDER, "cpu", [name])
    ids = tokens(length=30)
    padded = torch.ones_like(ids)
    padded[0, :6] = 0
    causal = tiny_causal()
    want = causal(ids, attention_mask=padded).logits
    got = adapt(copy.deepcopy(causal)).model(ids, attention_mask=padded).logits
    assert (got - want)[padded.bool()].abs().max() < TOL
    t5 = tiny_t5()
    decoder = tokens(length=5, seed=2)
    want = t5(input_ids=ids, attention_mask=padded, decoder_input_ids=decoder).logits
    got = adapt(copy.deepcopy(t5)).model(input_ids=ids, attention_mask=padded, decoder_input_ids=decoder).logits
    assert (got - want).abs().max() < TOL
