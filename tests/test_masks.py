"""Masks defined outside the package get the backends' fast paths through what they declare, and stay exact."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from conftest import make_scheme, qkv
from torch import Tensor
from torch.nn.attention.flex_attention import create_mask

from lextra.attention import Mask, attention, build_mask
from lextra.attention.backends import attention_path, chunked, common, tiled
from lextra.positions.base import PositionScheme

TOL = 1e-5


class LambdaMask(Mask):
    """Lambda-shaped attention: the first `sinks` keys plus a sliding window of `width` (LM-Infinite, Han et al.
    2023, arXiv 2308.16137; attention sinks, Xiao et al. 2023, arXiv 2309.17453)."""

    name = "lambda"
    causal = True

    def __init__(self, sinks: int, width: int) -> None:
        self.sinks, self.width = sinks, width

    def visible(self, q: Tensor, k: Tensor) -> Tensor:
        return (k <= q) & ((k < self.sinks) | (q - k < self.width))

    def key_range(self, q_first: int, q_last: int) -> tuple[int, int]:
        return 0, q_last

    def key_spans(self, q_first: int, q_last: int) -> list[tuple[int, int]]:
        window = q_first - self.width + 1
        return [(0, q_last)] if window <= self.sinks else [(0, self.sinks - 1), (window, q_last)]


class UndeclaredLambdaMask(Mask):
    """The Lambda rule with nothing declared but `visible`: every default must be conservative."""

    name = "lambda-undeclared"

    def __init__(self, sinks: int, width: int) -> None:
        self.sinks, self.width = sinks, width

    def visible(self, q: Tensor, k: Tensor) -> Tensor:
        return (k <= q) & ((k < self.sinks) | (q - k < self.width))


class DilatedWindowMask(Mask):
    """Every `dilation`-th key among the last width x dilation positions (Longformer's dilated window, Beltagy
    et al. 2020, arXiv 2004.05150): a rule in the distance alone."""

    name = "dilated"
    causal = True

    def __init__(self, width: int, dilation: int) -> None:
        self.width, self.dilation = width, dilation

    def allowed_distance(self, distance: Tensor) -> Tensor:
        return (distance >= 0) & (distance < self.width * self.dilation) & (distance % self.dilation == 0)

    def key_range(self, q_first: int, q_last: int) -> tuple[int, int]:
        return q_first - (self.width - 1) * self.dilation, q_last


class UndeclaredDilatedMask(Mask):
    """The dilated rule given as `visible` alone: exact, but without the distance-table path."""

    name = "dilated-undeclared"

    def visible(self, q: Tensor, k: Tensor) -> Tensor:
        return DilatedWindowMask(9, 3).allowed_distance(q - k)


class BandMask(Mask):
    """Bidirectional local band |m - n| < width from `visible` alone: it sees later keys, which the conservative
    defaults (not causal, every key) must keep."""

    name = "band"

    def visible(self, q: Tensor, k: Tensor) -> Tensor:
        return (q - k).abs() < 20


class PlainCausalMask(Mask):
    """Plain causal attention declared by its facts alone (its rule follows): the fused, tiled and strided paths
    apply to it as to the built-in one."""

    name = "plain-causal"
    causal = True
    exactly_causal = True


CUSTOM = {
    "lambda": lambda: LambdaMask(4, 37),
    "lambda-undeclared": lambda: UndeclaredLambdaMask(4, 37),
    "dilated": lambda: DilatedWindowMask(9, 3),
    "dilated-undeclared": UndeclaredDilatedMask,
    "band": BandMask,
    "plain-causal": PlainCausalMask,
}
BUILT_IN = ["causal", "window:5", "bca:4", "bca:3", "full"]


def _mask(spec: str) -> Mask:
    return CUSTOM[spec]() if spec in CUSTOM else build_mask(spec)


def _run(
    scheme: PositionScheme, q: Tensor, k: Tensor, v: Tensor, mask: Mask, backend: str, grad: bool, **kwargs
) -> tuple[Tensor, list[Tensor]]:
    """Output and, under autograd, the input gradients under a fixed, non-trivial upstream gradient."""
    with torch.set_grad_enabled(grad):
        out = attention(q, k, v, scheme=scheme, mask=mask, backend=backend, **kwargs)
    if not grad:
        return out, []
    weights = torch.cos(torch.arange(out.numel(), dtype=out.dtype)).view_as(out)
    return out.detach(), list(torch.autograd.grad((out * weights).sum(), [q, k, v]))


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("name", ["nope", "rope", "xpos", "alibi", "t5", "fire"])
@pytest.mark.parametrize("spec", list(CUSTOM))
def test_custom_masks_match_reference_in_every_backend(spec: str, name: str, grad: bool) -> None:
    """300 keys: every query, and 37 queries offset to the end (cached decoding), at default and odd blocks."""
    mask = _mask(spec)
    options = {"threshold": 64.0, "hidden": 8} if name == "fire" else {}  # FIRE's per-query bias past 64
    scheme = make_scheme(name, n_heads=2, head_dim=8, **options)
    for queries in (300, 37):
        q, k, v = qkv(scheme, queries, batch=1, key_length=300, grad=grad)
        q_pos = torch.arange(300 - queries, 300)
        ref, ref_grads = _run(scheme, q, k, v, mask, "reference", grad, q_pos=q_pos)
        for backend, block in (("chunked", None), ("chunked", 16), ("auto", None)):
            out, grads = _run(scheme, q, k, v, mask, backend, grad, q_pos=q_pos, block_size=block)
            assert (out - ref).abs().max() <= TOL, (backend, block, queries)
            for g, r in zip(grads, ref_grads, strict=True):
                assert (g - r).abs().max() <= TOL * max(1.0, float(r.abs().max())), (backend, block, "gradient")


def test_lambda_blocks_touch_only_their_sinks_and_window(monkeypatch) -> None:
    """Each block of 64 queries sees 4 sinks + 36 + 64 keys, not all 1000; the undeclared rule sees them all."""
    seen: list[int] = []
    fused = F.scaled_dot_product_attention

    def counting(q: Tensor, k: Tensor, v: Tensor, *args, **kwargs) -> Tensor:
        seen.append(k.shape[-2])
        return fused(q, k, v, *args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counting)
    scheme = make_scheme("alibi", n_heads=2, head_dim=8)
    q, k, v = qkv(scheme, 1000, batch=1)
    for mask, most in ((LambdaMask(4, 37), 4 + 36 + 64), (UndeclaredLambdaMask(4, 37), 1000)):
        seen.clear()
        with torch.no_grad():
            ref = attention(q, k, v, scheme=scheme, mask=mask, backend="reference")
            out = attention(q, k, v, scheme=scheme, mask=mask, backend="chunked", block_size=64)
        assert len(seen) == math.ceil(1000 / 64)
        assert max(seen) == most
        assert (out - ref).abs().max() <= TOL
    assert common.typical_keys(LambdaMask(4, 37), 10**6, 64) == 4 + 36 + 64  # sizes the bias budget


def test_a_distance_rule_gets_the_strided_table_path(monkeypatch) -> None:
    """Declared in d = m - n, the dilated window's blocks take their bias and mask as strided views of one table;
    the same rule given as `visible` alone is built per block."""
    scheme, pos = make_scheme("alibi", n_heads=2, head_dim=8), torch.arange(300)
    with torch.no_grad():
        assert attention_path(scheme, DilatedWindowMask(9, 3), pos, pos) == "chunked/strided"
        assert attention_path(scheme, UndeclaredDilatedMask(), pos, pos) == "chunked/gathered"
    assert attention_path(make_scheme("t5"), DilatedWindowMask(9, 3), pos, pos) == "chunked/gathered"  # learned
    views: list[bool] = []
    toeplitz = chunked.toeplitz_bias

    def recording(*args, **kwargs) -> Tensor | None:
        table = toeplitz(*args, **kwargs)
        views.append(table is not None)
        return table

    monkeypatch.setattr(chunked, "toeplitz_bias", recording)
    q, k, v = qkv(scheme, 300, batch=1)
    with torch.no_grad():
        ref = attention(q, k, v, scheme=scheme, mask=DilatedWindowMask(9, 3), backend="reference")
        out = attention(q, k, v, scheme=scheme, mask=DilatedWindowMask(9, 3), backend="chunked")
    assert views and all(views)
    assert (out - ref).abs().max() <= TOL


@pytest.mark.parametrize(
    ("name", "mask", "grad", "lengths", "path"),
    [
        (None, "causal", True, (300, 300), "sdpa"),
        (None, "causal", False, (5, 300), "tiled"),
        ("rope", "causal", False, (5000, 5000), "tiled"),
        ("rope", "causal", True, (5000, 5000), "sdpa"),
        ("rope", "full", True, (300, 300), "sdpa"),
        ("rope", "window:37", False, (300, 300), "chunked"),
        ("alibi", "bca:32", False, (300, 300), "chunked/strided"),
        ("alibi", "full", True, (5, 300), "chunked/strided"),
        ("t5", "window:37", True, (300, 300), "chunked/gathered"),
        ("t5", "causal", False, (300, 300), "chunked/strided"),
        ("fire", "causal", False, (5000, 5000), "tiled"),
        ("fire", "bca:32", False, (5000, 5000), "chunked/gathered"),
        ("fire", "causal", True, (300, 300), "chunked/gathered"),
    ],
)
def test_built_in_masks_keep_their_paths(
    name: str | None, mask: str, grad: bool, lengths: tuple[int, int], path: str
) -> None:
    """The paths the built-in masks took when backends checked their types; a custom mask declared exactly
    causal takes the causal mask's path (fused, tiled) wherever the built-in one does."""
    scheme = make_scheme(name, n_heads=2, head_dim=8) if name else None
    lq, lk = lengths
    q_pos, k_pos = torch.arange(lk - lq, lk), torch.arange(lk)
    with torch.set_grad_enabled(grad):
        assert attention_path(scheme, build_mask(mask), q_pos, k_pos) == path
        if mask == "causal":
            assert attention_path(scheme, PlainCausalMask(), q_pos, k_pos) == path


def test_plain_causal_declared_outside_the_package_is_tiled_and_exact() -> None:
    scheme = make_scheme("rope", n_heads=2, head_dim=8)
    q, k, v = qkv(scheme, 37, key_length=300)
    pos = torch.arange(300)
    with torch.no_grad():
        assert tiled.tiles_apply(scheme, PlainCausalMask(), pos[-37:], pos, "cpu")
        ref = attention(q, k, v, scheme=scheme, q_pos=pos[-37:], backend="reference")
        fast = attention(q, k, v, scheme=scheme, mask=PlainCausalMask(), q_pos=pos[-37:], backend="chunked")
    assert (fast - ref).abs().max() <= TOL


@pytest.mark.parametrize("spec", BUILT_IN + list(CUSTOM))
def test_declarations_agree_with_the_rule(spec: str) -> None:
    """What a mask declares (distance rule, key spans, blocks, facts) holds for its `visible` rule."""
    mask = _mask(spec)
    pos = torch.arange(120)
    allowed = mask.allowed(pos, pos)
    assert torch.equal(allowed, mask.visible(pos[:, None], pos[None, :]))
    by_distance = mask.allowed_distance(pos[:, None] - pos[None, :])
    if by_distance is not None:
        assert torch.equal(by_distance, allowed)
    assert not mask.causal or not allowed.triu(1).any()
    assert not mask.exactly_causal or torch.equal(allowed, pos[None, :] <= pos[:, None])
    assert not mask.hides_nothing or bool(allowed.all())
    for block in (7, 16):
        for first in range(0, 120, block):
            last = min(first + block, 120) - 1
            spans = mask.key_spans(first, last)
            assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))  # sorted and disjoint
            inside = torch.zeros(120, dtype=torch.bool)
            for lo, hi in spans:
                inside |= (pos >= lo) & (pos <= hi)
            rows = allowed[first : last + 1]
            assert not (rows & ~inside).any(), (first, last)  # no visible key outside the spans
            keys = pos[inside]
            local = mask.within(first, last).allowed(pos[first : last + 1], keys)
            assert torch.equal(local, rows[:, inside])
    counts = mask.visible_keys(torch.arange(3, 41), 3, 40)
    assert torch.equal(counts, mask.allowed(torch.arange(3, 41), torch.arange(3, 41)).sum(-1).clamp(min=1))


@pytest.mark.parametrize("spec", BUILT_IN + list(CUSTOM))
def test_visible_serves_as_a_flex_attention_mask_mod(spec: str) -> None:
    mask = _mask(spec)
    dense = create_mask(lambda b, h, q_idx, kv_idx: mask.visible(q_idx, kv_idx), None, None, 50, 70, device="cpu")
    assert torch.equal(dense[0, 0], mask.allowed(torch.arange(50), torch.arange(70)))


def test_a_mask_that_declares_nothing_is_refused_clearly() -> None:
    with pytest.raises(TypeError, match="defines neither visible"):
        Mask().allowed(torch.arange(3), torch.arange(3))


def test_bias_into_is_the_scheme_interface_with_a_fresh_default(monkeypatch) -> None:
    """Without autograd the chunked path asks every biased scheme for `bias_into`; the default is `bias`, fresh."""
    scheme = make_scheme("alibi", n_heads=2, head_dim=8)
    assert type(scheme).bias_into is PositionScheme.bias_into
    q_pos, k_pos = torch.arange(5, 9), torch.arange(9)
    first = scheme.bias_into(q_pos, k_pos, {})
    assert torch.equal(first, scheme.bias(q_pos, k_pos)) and bool((first != 0).any())
    first.zero_()
    assert torch.equal(scheme.bias_into(q_pos, k_pos, {}), scheme.bias(q_pos, k_pos))
    calls: list[int] = []
    default = scheme.bias_into

    def counting(qp: Tensor, kp: Tensor, workspace: dict[str, Tensor]) -> Tensor:
        calls.append(qp.numel())
        return default(qp, kp, workspace)

    monkeypatch.setattr(scheme, "bias_into", counting)
    q, k, v = qkv(scheme, 200, batch=1)
    with torch.no_grad():
        ref = attention(q, k, v, scheme=scheme, mask=LambdaMask(4, 37), backend="reference")
        out = attention(q, k, v, scheme=scheme, mask=LambdaMask(4, 37), backend="chunked", block_size=64)
    assert calls == [64, 64, 64, 8]
    assert (out - ref).abs().max() <= TOL
