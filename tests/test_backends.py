"""Every backend agrees with the dense reference for every scheme and mask, outputs and gradients."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ALL_SCHEMES, make_scheme, qkv

import lextra.attention.backends as backends
import lextra.attention.flex as flex
from lextra.attention import attention, build_mask
from lextra.attention.backends import auto_backend, sdpa, tiled
from lextra.attention.backends.common import blockwise, mask_in_place, query_blocks
from lextra.attention.backends.sdpa import sdpa_applies
from lextra.errors import ConfigError
from lextra.positions import SCHEMES

MASKS = ["causal", "window:37", "bca:32"]
TOL = 1e-5


def _run(scheme, q, k, v, mask, backend, **kwargs):
    """Output and gradients (inputs and scheme parameters) under a fixed, non-trivial upstream gradient."""
    out = attention(q, k, v, scheme=scheme, mask=mask, backend=backend, **kwargs)
    weights = torch.cos(torch.arange(out.numel(), dtype=out.dtype)).view_as(out)
    params = [p for p in scheme.parameters() if p.requires_grad]
    grads = torch.autograd.grad((out * weights).sum(), [q, k, v, *params], allow_unused=True)
    return out.detach(), [g for g in grads if g is not None]


def _assert_backends_agree(
    name: str, mask: str, length: int, backends=("chunked", "auto"), scheme_options=None, **kwargs
) -> None:
    scheme = make_scheme(name, n_heads=2, head_dim=8, **(scheme_options or {}))
    q, k, v = qkv(scheme, length, batch=1, grad=True)
    ref_out, ref_grads = _run(scheme, q, k, v, mask, "reference", **kwargs)
    pos = torch.arange(length)
    if "auto" in backends and not sdpa_applies(scheme, build_mask(mask), pos, pos):
        backends = tuple(b for b in backends if b != "auto") + ("chunked",) * ("chunked" not in backends)
    for backend in backends:
        out, grads = _run(scheme, q, k, v, mask, backend, **kwargs)
        assert (out - ref_out).abs().max() <= TOL, (backend, "output")
        assert len(grads) == len(ref_grads)
        for g, r in zip(grads, ref_grads, strict=True):
            # 1e-5 absolute for gradients of size <= 1; larger gradients (CoCA's keys reach ~10, a scheme
            # parameter sums L x L terms) carry fp32 rounding of ~1e-6 relative even in the dense reference
            assert (g - r).abs().max() <= TOL * max(1.0, float(r.abs().max())), (backend, "gradient")


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("name", ALL_SCHEMES)
@pytest.mark.parametrize("length", [1, 2, 63, 257, 1000])
def test_fast_backends_match_reference(name: str, mask: str, length: int) -> None:
    _assert_backends_agree(name, mask, length, block_size=None)


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL_SCHEMES)
def test_fast_backends_match_reference_at_4096(name: str) -> None:
    """Long and not a multiple of any block size the backends use (FIRE with a narrower MLP, for time)."""
    _assert_backends_agree(name, "causal", 4096 - 3, scheme_options={"hidden": 8} if name == "fire" else None)


@pytest.mark.parametrize("name", ["alibi", "xpos", "fire", "t5"])
@pytest.mark.parametrize("block", [1, 7, 100])
def test_chunked_with_awkward_block_sizes(name: str, block: int) -> None:
    _assert_backends_agree(name, "bca:16", 131, backends=("chunked",), block_size=block)


@pytest.mark.parametrize("name", ["rope", "alibi", "coca", "kerple_power"])
def test_temperature_acts_identically_in_every_backend(name: str) -> None:
    per_head = torch.tensor([0.5, 1.7])
    _assert_backends_agree(name, "causal", 200, temperature=per_head, backends=("chunked", "auto"))
    per_query = torch.linspace(0.6, 1.4, 200).repeat(2, 1)
    _assert_backends_agree(name, "window:50", 200, temperature=per_query, backends=("chunked",))


@torch.no_grad()
def test_a_scalar_temperature_is_that_temperature_for_every_head() -> None:
    """temperature=0.5 gives what 0.5 per head gives: on the chunked path, and on a grouped-query decoding step
    whose query heads are folded into rows."""
    alibi = make_scheme("alibi", n_heads=2)
    q, k, v = qkv(alibi, 40)
    for backend in ("reference", "chunked"):
        want = attention(q, k, v, scheme=alibi, temperature=torch.tensor([0.5, 0.5]), backend=backend)
        assert torch.equal(attention(q, k, v, scheme=alibi, temperature=0.5, backend=backend), want)
    rope = make_scheme("rope", n_heads=4)
    q, k, v = torch.randn(1, 4, 1, 16), torch.randn(1, 2, 40, 16), torch.randn(1, 2, 40, 16)
    wide = (k.repeat_interleave(2, 1), v.repeat_interleave(2, 1))
    want = attention(q, *wide, scheme=rope, temperature=torch.full((4,), 0.5), backend="reference")
    assert (attention(q, k, v, scheme=rope, temperature=0.5) - want).abs().max() < 1e-6


@pytest.mark.parametrize("name", ["rope", "alibi", "xpos", "t5"])
def test_queries_offset_from_keys_as_in_cached_decoding(name: str) -> None:
    """Last 5 queries against 300 keys equal the last 5 rows of the full computation."""
    scheme = make_scheme(name, n_heads=2, head_dim=8)
    q, k, v = qkv(scheme, 300, batch=1)
    full = attention(q, k, v, scheme=scheme, backend="reference")
    pos = torch.arange(300)
    for backend in ("reference", "chunked", "auto"):
        tail = attention(q[..., -5:, :], k, v, scheme=scheme, q_pos=pos[-5:], k_pos=pos, backend=backend)
        torch.testing.assert_close(tail, full[..., -5:, :], atol=TOL, rtol=0)


def test_auto_picks_the_fused_kernel_only_where_it_is_exact() -> None:
    pos = torch.arange(100)
    causal, window = build_mask("causal"), build_mask("window:10")
    assert sdpa_applies(make_scheme("rope"), causal, pos, pos)
    assert sdpa_applies(make_scheme("coca"), causal, pos, pos)
    assert sdpa_applies(None, causal, pos, pos)
    assert not sdpa_applies(make_scheme("alibi"), causal, pos, pos)
    assert not sdpa_applies(make_scheme("rope"), window, pos, pos)
    assert not sdpa_applies(make_scheme("rope"), causal, pos[-3:], pos)
    xpos = make_scheme("xpos")
    assert sdpa_applies(xpos, causal, pos, pos)
    long = torch.arange(xpos.rotate_span + 1)
    assert not sdpa_applies(xpos, causal, long, long)


def test_sdpa_backend_refuses_biases_with_a_clear_error() -> None:
    scheme = make_scheme("alibi")
    q, k, v = qkv(scheme, 10)
    with pytest.raises(ConfigError, match="cannot apply score biases"):
        attention(q, k, v, scheme=scheme, backend="sdpa")
    with pytest.raises(ConfigError, match="unknown attention backend 'flash'"):
        attention(q, k, v, scheme=scheme, backend="flash")


def test_window_and_bca_patterns_are_exact() -> None:
    pos = torch.arange(6)
    window = build_mask("window:3").allowed(pos, pos).int().tolist()
    assert window == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [0, 1, 1, 1, 0, 0],
        [0, 0, 1, 1, 1, 0],
        [0, 0, 0, 1, 1, 1],
    ]
    bca = build_mask("bca:2").allowed(pos, pos).int().tolist()
    assert bca == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [0, 0, 1, 1, 1, 0],
        [0, 0, 1, 1, 1, 1],
    ]
    assert build_mask("bca", train_len=64).block == 32
    assert build_mask("window", train_len=64).width == 64
    with pytest.raises(ConfigError, match="window: width must be >= 1"):
        build_mask("window:0")


# Peak resident memory since a reset (Linux): `ru_maxrss` cannot serve, a child started by a large pytest process
# inherits the parent's peak through exec, so growth measured with it reads 0.
_PEAK = """
import re
def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
def peak_mib():
    with open("/proc/self/status") as f:
        return int(re.search(r"VmHWM:\\s+(\\d+)", f.read()).group(1)) / 1024
"""

_MEMORY_PROBE = (
    _PEAK
    + """
import json, sys, torch
from lextra.attention import attention
from lextra.positions import HeadDims, build_scheme
torch.set_num_threads(1)
name, mask, backend, D = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
L, H = 16384, 8
scheme = build_scheme(name, HeadDims(H, D, H * D, 128))
q, k, v = (torch.randn(1, H, L, D) for _ in range(3))
with torch.no_grad():
    attention(q[..., :1024, :], k[..., :1024, :], v[..., :1024, :], scheme=scheme, mask=mask, backend=backend)
    reset_peak()
    before = peak_mib()
    out = attention(q, k, v, scheme=scheme, mask=mask, backend=backend)
print(json.dumps({
    "extra_mib": peak_mib() - before, "out_mib": out.numel() * 4 / 2**20, "finite": bool(torch.isfinite(out).all())
}))
"""
)


def _extra_memory(name: str, mask: str = "causal", backend: str = "auto", head_dim: int = 64) -> dict:
    """Peak memory growth of one attention call at 16k tokens, 8 heads, measured in a fresh process."""
    result = subprocess.run(
        [sys.executable, "-c", _MEMORY_PROBE, name, mask, backend, str(head_dim)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return json.loads(result.stdout)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "mask"), [("alibi", "causal"), ("fire", "window:512")])
def test_chunked_memory_grows_linearly_not_quadratically(name: str, mask: str) -> None:
    """At 16k tokens an H x L x L fp32 bias would take 8 GiB; the chunked path stays far below."""
    probe = _extra_memory(name, mask, head_dim=16)
    assert probe["finite"]
    assert probe["extra_mib"] < 400, probe


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("name", ALL_SCHEMES)
def test_inference_paths_match_reference(name: str, mask: str) -> None:
    """Without autograd the fast paths differ: distance-only biases become strided views of one table (the
    Toeplitz path), causal attention without a bias is tiled, rotary schemes rotate block by block."""
    scheme = make_scheme(name, n_heads=2, head_dim=8, **({"threshold": 64.0} if name == "fire" else {}))
    tau = torch.tensor([0.7, 1.3])
    for length in (1, 63, 1000):
        q, k, v = qkv(scheme, length, batch=2)
        with torch.no_grad():
            ref = attention(q, k, v, scheme=scheme, mask=mask, backend="reference", temperature=tau)
            fast = attention(q, k, v, scheme=scheme, mask=mask, backend="chunked", temperature=tau)
        assert (fast - ref).abs().max() <= TOL


NO_BIAS_SCHEMES = [n for n in ALL_SCHEMES if not SCHEMES.get(n).has_bias and not SCHEMES.get(n).content_dependent]


@pytest.mark.parametrize("name", NO_BIAS_SCHEMES)
@pytest.mark.parametrize(("length", "queries", "tile"), [(300, 300, 64), (300, 37, 64), (257, 257, 5), (129, 129, 7)])
def test_tiled_path_equals_reference(name: str, length: int, queries: int, tile: int) -> None:
    """Query blocks x key chunks merged by log-sum-exp equal dense attention, with per-query temperatures and
    queries offset from the keys (cached decoding), at tile sizes that split the diagonal unevenly."""
    scheme = make_scheme(name, n_heads=2, head_dim=8)
    q, k, v = qkv(scheme, queries, key_length=length)
    pos = torch.arange(length)
    tau = torch.linspace(0.6, 1.4, queries).repeat(2, 1)
    with torch.no_grad():
        assert tiled.tiles_apply(scheme, build_mask("causal"), pos[-queries:], pos, q.device)
        ref = attention(q, k, v, scheme=scheme, q_pos=pos[-queries:], backend="reference", temperature=tau)
        ctx = backends.AttentionContext.build(
            q, k, scheme=scheme, q_pos=pos[-queries:], k_pos=pos, scale=8**-0.5, temperature=tau, block_size=tile
        )
        fast = tiled.tiled_causal_attention(q, k, v, ctx)
        via_chunked = attention(q, k, v, scheme=scheme, backend="chunked", block_size=tile, temperature=tau)
    assert (fast - ref).abs().max() <= TOL
    assert torch.equal(via_chunked, fast)


def test_tiled_path_keeps_bfloat16_inputs_accurate() -> None:
    scheme = make_scheme("rope", n_heads=2, head_dim=16)
    q, k, v = (x.bfloat16() for x in qkv(scheme, 300))
    with torch.no_grad():
        ref = attention(q.float(), k.float(), v.float(), scheme=scheme, backend="reference")
        fast = attention(q, k, v, scheme=scheme, backend="chunked", block_size=64)
    assert fast.dtype == torch.bfloat16
    assert (fast.float() - ref).abs().max() <= 0.02  # bf16 output rounding (8 bits of mantissa)


def test_auto_tiles_rotary_schemes_only_at_long_lengths_without_autograd(monkeypatch) -> None:
    causal, pos = build_mask("causal"), torch.arange(100)
    rope, alibi = make_scheme("rope"), make_scheme("alibi")
    monkeypatch.setattr(sdpa, "TILED_MIN_PAIRS", 100 * 100)
    with torch.no_grad():
        assert auto_backend(rope, causal, pos, pos) == "chunked"
        assert auto_backend(rope, causal, pos[:99], pos[:99]) == "sdpa"  # below the pair threshold
        assert auto_backend(None, causal, pos, pos) == "sdpa"  # nothing to rotate: the fused call is lean
        assert auto_backend(alibi, causal, pos, pos) == "chunked"
    assert auto_backend(rope, causal, pos, pos) == "sdpa"  # under autograd: the fused kernel's backward
    assert not tiled.tiles_apply(rope, build_mask("window:10"), pos, pos, "cpu")
    assert not tiled.tiles_apply(alibi, causal, pos, pos, "cpu")


def test_only_partially_visible_columns_are_masked() -> None:
    bias = torch.zeros(2, 3, 6)
    allowed = build_mask("causal").allowed(torch.arange(3, 6), torch.arange(6))
    mask_in_place(bias, allowed)
    assert torch.equal(torch.isfinite(bias), allowed.expand(2, -1, -1))
    untouched = torch.zeros(2, 3, 6)
    mask_in_place(untouched, torch.ones(3, 6, dtype=torch.bool))
    assert torch.equal(untouched, torch.zeros(2, 3, 6))


def test_query_blocks_never_straddle_a_period_and_join_in_order() -> None:
    """The one query-block walk: blocks of at most `block` queries, cut where sorted positions (contiguous or not)
    cross a multiple of the period; their outputs land in order under either grad mode."""
    assert query_blocks(range(5, 20), 4, 8) == [(0, 3), (3, 7), (7, 11), (11, 15)]
    assert query_blocks([0, 3, 7, 9, 15, 17], 10, 8) == [(0, 3), (3, 5), (5, 6)]
    assert query_blocks(range(7), 3) == [(0, 3), (3, 6), (6, 7)]
    q, v = torch.randn(1, 2, 10, 4), torch.randn(1, 2, 10, 3)
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            out = blockwise(q, v, [(0, 3), (3, 10)], lambda start, stop: q[..., start:stop, :3] * 2)
        assert torch.equal(out, q[..., :3] * 2)


@pytest.mark.slow
def test_tiled_rotary_attention_holds_no_rotated_copies_of_q_and_k() -> None:
    """The fused call holds rotated q and k besides its output (about 3x the output at 16k, a little less where the
    allocator reuses the warm-up's pages); the tiled path holds the output and O(tile) buffers (the issue's bound:
    2x plain SDPA, whose extra memory is its output)."""
    fused, tiled = _extra_memory("rope", backend="sdpa"), _extra_memory("rope")
    assert fused["extra_mib"] > 2.5 * fused["out_mib"], fused
    assert tiled["extra_mib"] < 2 * tiled["out_mib"], tiled


@pytest.mark.slow
def test_tiled_fire_builds_its_per_pair_bias_one_tile_at_a_time() -> None:
    """FIRE's bias past its threshold is (H, L, L): 8 GiB at 16k; tile by tile it stays under the output's size."""
    probe = _extra_memory("fire")
    assert probe["extra_mib"] < 2 * probe["out_mib"], probe


# ------------------------------------------------------------------------------------------------------------
# the typed seam: contexts, backends' reasons, auto's order, registration
# ------------------------------------------------------------------------------------------------------------


def _context(scheme, mask="causal", length=100, offset=0, device="cpu", head_dim=None, **kwargs):
    pos = torch.arange(length)
    return backends.AttentionContext(
        scheme, build_mask(mask), pos[offset:], pos, 0.25, device=torch.device(device), head_dim=head_dim, **kwargs
    )


def test_the_context_is_frozen_and_built_with_attention_s_defaults() -> None:
    scheme = make_scheme("rope", n_heads=2, head_dim=8)
    q, k, _ = qkv(scheme, 10, key_length=12)
    ctx = backends.AttentionContext.build(q, k, scheme=scheme, mask="window:4", temperature=torch.tensor([1.0, 2.0]))
    assert torch.equal(ctx.k_pos, torch.arange(12)) and torch.equal(ctx.q_pos, torch.arange(2, 12))
    assert ctx.scale == 1.0 / math.sqrt(8) and ctx.head_dim == 8 and ctx.device == torch.device("cpu")
    assert repr(ctx.mask) == repr(build_mask("window:4")) and ctx.tau.tolist() == [[1.0], [2.0]]
    with pytest.raises(AttributeError):
        ctx.scale = 1.0  # type: ignore[misc]
    with pytest.raises(ConfigError, match="positions do not match lengths"):
        backends.AttentionContext.build(q, k, q_pos=torch.arange(3))


def test_each_backend_says_why_it_does_not_apply() -> None:
    sdpa, flex_backend, chunked, reference = (backends.REGISTERED[n] for n in ("sdpa", "flex", "chunked", "reference"))
    rope, alibi, xpos = make_scheme("rope"), make_scheme("alibi"), make_scheme("xpos")
    for backend in (reference, chunked):
        assert backend.applies(_context(alibi, "window:7", offset=3)) is None
    assert sdpa.applies(_context(rope)) is None
    assert sdpa.applies(_context(None, "full", offset=5)) is None
    assert "cannot apply score biases (alibi's)" in sdpa.applies(_context(alibi))
    assert "cannot apply the mask" in sdpa.applies(_context(rope, "window:7"))
    assert "contiguous positions" in sdpa.applies(_context(rope, offset=5))
    assert "at least one query" in sdpa.applies(_context(rope, length=0))
    long = xpos.rotate_span + 1
    assert f"exact within {xpos.rotate_span} positions, not {long}" in sdpa.applies(_context(xpos, length=long))
    assert "xpos is exact within" in flex_backend.applies(_context(xpos, length=long))
    assert flex_backend.applies(_context(alibi, "window:7")) is None
    wide_fire = make_scheme("fire", hidden=65, threshold=8.0)
    assert "up to 64 hidden units, not 65" in flex_backend.applies(_context(wide_fire))
    # FlexAttention's CUDA kernels need head_dim >= 16: decided from the context alone, no CUDA tensor involved
    assert "head dimension of at least 16, not 8" in flex_backend.applies(_context(alibi, device="cuda", head_dim=8))
    assert flex_backend.applies(_context(alibi, device="cuda", head_dim=16)) is None
    assert flex_backend.applies(_context(alibi, device="cpu", head_dim=8)) is None


def test_a_per_query_bias_without_a_score_modifier_keeps_flex_out() -> None:
    class QueryAlibi(type(make_scheme("alibi"))):
        name = "query_alibi"
        bias_per_query = True

    scheme = QueryAlibi(make_scheme("alibi").dims)
    assert "no score modifier for query_alibi's per-query bias" in backends.REGISTERED["flex"].applies(_context(scheme))
    assert backends.choose_backend(_context(scheme, device="cuda", head_dim=16)).name == "chunked"
    assert "FIRE" not in vars(flex) and "lextra.positions.bias" not in Path(flex.__file__).read_text()


def test_auto_asks_the_backends_in_each_device_s_order() -> None:
    assert backends.AUTO_ORDER["cpu"] == ["sdpa", "chunked"]
    assert backends.AUTO_ORDER["cuda"] == ["sdpa", "flex", "chunked"]
    rope, alibi = make_scheme("rope"), make_scheme("alibi")
    assert backends.choose_backend(_context(rope)).name == "sdpa"
    assert backends.choose_backend(_context(alibi)).name == "chunked"
    assert backends.choose_backend(_context(alibi, device="cuda", head_dim=16)).name == "flex"
    assert backends.choose_backend(_context(alibi, device="cuda", head_dim=8)).name == "chunked"
    assert backends.choose_backend(_context(rope, device="cuda", head_dim=8)).name == "sdpa"
    long = _context(rope, length=4096)
    with torch.no_grad():
        assert "tiled path" in backends.REGISTERED["sdpa"].declines(long)
        assert backends.choose_backend(long).name == "chunked"
    assert backends.REGISTERED["sdpa"].declines(long) is None  # under autograd the fused kernel's backward


class _WindowsOnly(backends.AttentionBackend):
    """A test backend for window masks: the reference's numbers, counting its calls."""

    name = "windows_only"

    def __init__(self) -> None:
        self.calls = 0

    def applies(self, ctx: backends.AttentionContext) -> str | None:
        return None if ctx.mask.band(0, 0) is not None and not ctx.mask.exactly_causal else "only window masks"

    def run(self, q, k, v, ctx):
        self.calls += 1
        return backends.reference_attention(q, k, v, ctx)


@pytest.fixture
def windows_only():
    backend = backends.register_backend(_WindowsOnly(), auto={"cpu": 0})
    try:
        yield backend
    finally:
        backends.unregister_backend(backend.name)
    assert backend.name not in backends.REGISTERED and backends.AUTO_ORDER["cpu"] == ["sdpa", "chunked"]


def test_a_registered_backend_is_chosen_by_auto_where_it_applies_first(windows_only) -> None:
    assert backends.AUTO_ORDER["cpu"] == ["windows_only", "sdpa", "chunked"]
    scheme = make_scheme("alibi", n_heads=2, head_dim=8)
    q, k, v = qkv(scheme, 40)
    out = attention(q, k, v, scheme=scheme, mask="window:9")
    assert windows_only.calls == 1
    assert torch.equal(out, attention(q, k, v, scheme=scheme, mask="window:9", backend="reference"))
    attention(q, k, v, scheme=scheme, mask="causal")  # it does not apply: auto goes on to chunked
    assert windows_only.calls == 1
    with pytest.raises(ConfigError, match="only window masks"):
        attention(q, k, v, scheme=scheme, mask="causal", backend="windows_only")


def test_an_explicit_backend_that_does_not_apply_or_is_unknown_is_refused() -> None:
    scheme = make_scheme("rope", n_heads=2, head_dim=8)
    q, k, v = qkv(scheme, 10)
    with pytest.raises(ConfigError, match="cannot apply the mask"):
        attention(q, k, v, scheme=scheme, mask="window:3", backend="sdpa")
    with pytest.raises(ConfigError, match="unknown attention backend 'fast'; choose one of auto, reference, sdpa"):
        attention(q, k, v, scheme=scheme, backend="fast")
    with pytest.raises(ConfigError, match="other than 'auto'"):
        backends.register_backend(type("Auto", (_WindowsOnly,), {"name": "auto"})())


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_causal_decoding_step_runs_sdpa_and_biased_or_windowed_steps_run_chunked(device: str) -> None:
    """One query at or after every key sees them all: one SDPA call without a mask (decided from the context,
    no CUDA tensor); with a bias, a window or BCA flex declines a single query and `chunked` runs it."""
    rope, alibi, fire = make_scheme("rope"), make_scheme("alibi"), make_scheme("fire")
    last = _context(rope, length=100, offset=99, device=device, head_dim=16)
    assert backends.choose_backend(last).name == "sdpa"
    evicted = backends.AttentionContext(
        rope, build_mask("causal"), torch.tensor([99]), torch.cat((torch.arange(4), torch.arange(70, 100))), 0.25,
        device=torch.device(device), head_dim=16,
    )  # fmt: skip
    assert backends.choose_backend(evicted).name == "sdpa"  # a sinks cache: positions need not be contiguous
    before = backends.AttentionContext(
        rope, build_mask("causal"), torch.tensor([50]), torch.arange(100), 0.25, device=torch.device(device)
    )
    assert "or one query after every key" in backends.REGISTERED["sdpa"].applies(before)
    for scheme, mask in ((alibi, "causal"), (fire, "causal"), (rope, "window:37"), (rope, "bca:64")):
        step = _context(scheme, mask, length=100, offset=99, device=device, head_dim=16)
        assert backends.REGISTERED["flex"].applies(step) is None
        assert "a single query (a decoding step)" in backends.REGISTERED["flex"].declines(step)
        assert backends.choose_backend(step).name == "chunked"
    assert backends.choose_backend(_context(alibi, length=100, offset=98, device=device, head_dim=16)).name == (
        "flex" if device == "cuda" else "chunked"
    )


#: (queries, mask, folded): grouped-query calls at the end of 41 keys
GROUPED_CASES = [(1, "causal", True), (1, "window:64", True), (3, "causal", False), (1, "window:16", False)]


@pytest.mark.parametrize("backend", ["auto", "reference", "chunked", "sdpa", "flex"])
@torch.no_grad()
def test_grouped_query_keys_fold_a_step_that_sees_every_key_and_expand_elsewhere(backend: str, monkeypatch) -> None:
    """Keys and values with fewer heads than q (6 query heads over 2): a step that sees every key runs with each
    key/value head's query heads folded into its rows (a temperature per head and query and sinks per head carried
    per row), any other call expands k and v; each equals the reference on expanded heads. A number of key/value
    heads that does not divide the query heads is refused."""
    import lextra.attention.backends.dispatch as dispatch

    folded: list[int] = []
    real = dispatch.folded_attention
    monkeypatch.setattr(dispatch, "folded_attention", lambda *a: folded.append(a[0].shape[2]) or real(*a))
    rope, gen = make_scheme("rope", n_heads=6), torch.Generator().manual_seed(0)
    k, v = torch.randn(2, 2, 41, 16, generator=gen), torch.randn(2, 2, 41, 16, generator=gen)
    for n_q, mask, folds in GROUPED_CASES:
        if backend == "sdpa" and (mask != "causal" or n_q > 1):
            continue  # one fused call takes neither a window nor offset queries
        q = torch.randn(2, 6, n_q, 16, generator=gen)
        tau = torch.rand(6, n_q, generator=gen) + 0.5
        options = {"scheme": rope, "mask": mask, "temperature": tau, "sinks": torch.linspace(-1.0, 1.0, 6)}
        folded.clear()
        got = attention(q, k, v, backend=backend, **options)
        want = attention(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), backend="reference", **options)
        assert (got - want).abs().max() < TOL and folded == ([n_q] if folds else []), (n_q, mask)
    with pytest.raises(ConfigError, match="dividing the queries' 6, got 4"):
        attention(torch.randn(1, 6, 1, 16), torch.randn(1, 4, 5, 16), torch.randn(1, 4, 5, 16), backend=backend)


@pytest.mark.parametrize("name", ["rope", "xpos", "coca", "nope"])
def test_decoding_steps_through_sdpa_equal_the_reference(name: str) -> None:
    scheme = make_scheme(name)
    q, k, v = qkv(scheme, 1, key_length=100)
    for k_pos in (torch.arange(100), torch.cat((torch.arange(4), torch.arange(200, 296)))):
        q_pos = k_pos[-1:] + torch.tensor([0 if k_pos[-1] == 99 else 3])  # at the last key, and after it
        with torch.no_grad():
            fused = attention(q, k, v, scheme=scheme, q_pos=q_pos, k_pos=k_pos, backend="sdpa")
            ref = attention(q, k, v, scheme=scheme, q_pos=q_pos, k_pos=k_pos, backend="reference")
        assert (fused - ref).abs().max() < 1e-5


#: what reads a tensor's values on the host (a device-to-host sync for a CUDA tensor)
_HOST_READS = {
    torch.Tensor.item,
    torch.Tensor.__bool__,
    torch.Tensor.__int__,
    torch.Tensor.__float__,
    torch.Tensor.__index__,
    torch.Tensor.tolist,
}


class _CountHostReads(torch.overrides.TorchFunctionMode):
    """Counts reads of tensor values on the host (`_HOST_READS`) made while the mode is active."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.count += func in _HOST_READS
        return func(*args, **(kwargs or {}))


def _host_reads(name: str, mask: str, layout: backends.PositionLayout | None) -> tuple[str, int]:
    """Host reads of one call as `auto` runs it on CUDA (the context's device says cuda; the tensors stay on the
    CPU, and the compiled flex kernel is replaced by zeros: only lextra's own decisions are counted)."""
    scheme = make_scheme(name)
    q, k, v = qkv(scheme, 300)
    pos = torch.arange(300)
    with torch.no_grad(), _CountHostReads() as reads:
        ctx = backends.AttentionContext.build(q, k, scheme=scheme, mask=mask, q_pos=pos, k_pos=pos, layout=layout)
        ctx = dataclasses.replace(ctx, device=torch.device("cuda"))
        chosen = backends.choose_backend(ctx)
        chosen.run(q, k, v, ctx)
    return chosen.name, reads.count


def test_choosing_a_backend_and_finding_a_block_mask_read_positions_at_most_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before host-side layouts: 6 reads (rope + causal), 12 (alibi + window), 15 (fire + causal) per call.
    Now: none when the caller states the layout, one (`PositionLayout.of`) when it does not; FIRE's choice of
    bias form reads its threshold parameter against the positions (3 more)."""
    monkeypatch.setattr(flex, "_run_compiled", lambda q, k, v, **kw: q.new_zeros(*q.shape[:-1], v.shape[-1]))
    known = backends.PositionLayout.ranges(0, 300, 0, 300)
    for name, mask, path, extra in (
        ("rope", "causal", "sdpa", 0),
        ("alibi", "window:64", "flex", 0),
        ("fire", "causal", "flex", 3),
    ):
        _host_reads(name, mask, known)  # builds and caches the BlockMask
        assert _host_reads(name, mask, known) == (path, extra)
        assert _host_reads(name, mask, None) == (path, 1 + extra)


def test_position_layouts_from_tensors_and_from_ranges_agree() -> None:
    for q_first, n_q, k_first, n_k in ((0, 300, 0, 300), (299, 1, 0, 300), (5, 10, 0, 20), (0, 0, 0, 0)):
        q_pos, k_pos = torch.arange(q_first, q_first + n_q), torch.arange(k_first, k_first + n_k)
        if n_q == 0:
            assert backends.PositionLayout.of(q_pos, k_pos).same
            continue
        assert backends.PositionLayout.of(q_pos, k_pos) == backends.PositionLayout.ranges(q_first, n_q, k_first, n_k)
    gaps = backends.PositionLayout.of(torch.tensor([9]), torch.tensor([0, 1, 5, 9]))
    assert (gaps.k_contiguous, gaps.q_contiguous, gaps.same, gaps.k_max, gaps.span, gaps.seq_len) == (
        False, True, False, 9, 10, 10,
    )  # fmt: skip


def test_the_backend_choice_travels_in_the_context() -> None:
    """The context carries the backend a call asks for; one dispatch resolves it (or refuses with the reason)."""
    scheme = make_scheme("alibi", n_heads=2, head_dim=8)
    q, k, v = qkv(scheme, 40)
    ctx = backends.AttentionContext.build(q, k, scheme=scheme, mask="window:9", backend="reference")
    assert ctx.backend == "reference" and backends.resolve_backend(ctx).name == "reference"
    with torch.no_grad():
        ref = attention(q, k, v, scheme=scheme, mask="window:9", backend="reference")
        assert torch.equal(backends.run_attention(q, k, v, ctx), ref)
    with pytest.raises(ConfigError, match="cannot apply score biases"):
        backends.resolve_backend(backends.AttentionContext.build(q, k, scheme=scheme, backend="sdpa"))


def test_s2_attn_runs_as_a_wrapper_through_the_dispatch() -> None:
    """S2-Attn is an `AttentionExtension`: any backend name computes its dense pass, equal to the function; what it
    cannot apply (sinks, a window its group does not divide) is refused in one line."""
    from lextra.attention import S2Attention, shifted_sparse_attention

    scheme = make_scheme("rope", n_heads=2, head_dim=8)
    q, k, v = qkv(scheme, 16)
    pos = torch.arange(16)
    want = shifted_sparse_attention(q, k, v, 4, scheme, pos, pos)
    for name in ("auto", "chunked"):
        got = attention(q, k, v, scheme=scheme, extension=S2Attention(4), backend=name)
        assert torch.equal(got, want)
    with pytest.raises(ConfigError, match="S2-Attn does not apply learned sinks"):
        attention(q, k, v, scheme=scheme, extension=S2Attention(4), sinks=torch.zeros(2))
    with pytest.raises(ConfigError, match=r"the group \(5\) divides"):
        attention(q, k, v, scheme=scheme, extension=S2Attention(5))


@pytest.mark.parametrize("mask", ["full", "causal", "window:37"])
def test_alibi_left_offset_is_the_same_in_every_backend(mask: str) -> None:
    """Ruoss et al.'s asymmetric encoder ALiBi (`left=0.5`) reaches the fast paths through its distance table."""
    _assert_backends_agree("alibi", mask, 131, scheme_options={"left": 0.5}, block_size=None)
