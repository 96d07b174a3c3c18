"""Training-free extension methods (`lextra.extend`): their formulas, the fast path against the dense reference,
cached decoding against the full forward, and refusals."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

from lextra.attention import attention, build_mask
from lextra.attention.backends import AttentionContext, get_backend, passes_path
from lextra.errors import ConfigError, LengthError
from lextra.extend import (
    EXTENSIONS,
    ExtensionMethod,
    InferenceSetup,
    build_extension,
    check_scheme,
)
from lextra.model import GPT, GPTConfig
from lextra.positions import HeadDims, PositionScheme, build_scheme

L = 64
#: every method at L = 64 (Self-Extend's group wide enough for 777 tokens, LM-Infinite with 3 global tokens)
SPECS = {
    "self_extend": "self_extend:group=16",
    "rerope": "rerope",
    "leaky_rerope": "leaky_rerope",
    "dca": "dca",
    "lm_infinite": "lm_infinite:n_global=3",
    "sinks": "sinks",
    "string": "string",
}
#: docs/extending.md's example method (tests/plugins/lextra_toy.py), tested when `LEXTRA_PLUGINS` loads it; a
#: plugin's own method adds its entry here the same way
PLUGIN_SPECS = {"clip": "clip,cap=8"}
SPECS.update({name: spec for name, spec in PLUGIN_SPECS.items() if name in EXTENSIONS})


def _inputs(scheme_name: str, n: int, seed: int = 0):
    """A scheme at L and random q, k, v (B 1, H 2, D 16) of n positions."""
    options = {"scale_base": 64.0} if scheme_name == "xpos" else {}
    scheme = build_scheme(scheme_name, HeadDims(2, 16, 32, L), **options)
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 2, n, 16, generator=gen)
    k = torch.randn(1, 2, n, scheme.key_dim(), generator=gen)
    v = torch.randn(1, 2, n, 16, generator=gen)
    if scheme_name == "coca":  # CoCA's logits grow with |q|^2: keep them in a trained model's range
        q = q * 0.5
    return scheme, q, k, v


def extended(
    backend: str, q: Tensor, k: Tensor, v: Tensor, scheme: PositionScheme, method: ExtensionMethod, **options: Any
) -> Tensor:
    """`attention` of q, k, v under `method` with `scheme` on `backend` ("reference", "tiled" or "flex")."""
    return attention(q, k, v, scheme=scheme, extension=method, backend=backend, **options)


def test_every_registered_method_is_tested() -> None:
    assert set(SPECS) == set(EXTENSIONS.names())


@pytest.mark.parametrize("name", list(SPECS))
def test_fast_path_equals_the_reference_with_rope(name: str) -> None:
    scheme, q, k, v = _inputs("rope", 777)
    method = build_extension(SPECS[name], L)
    with torch.no_grad():
        ref = extended("reference", q, k, v, scheme, method)
        for block in (100, None):
            assert (extended("tiled", q, k, v, scheme, method, block_size=block) - ref).abs().max() < 1e-5
        last = extended("tiled", q[..., -5:, :], k, v, scheme, method, block_size=3)  # offset queries, as cached
        assert (last - ref[..., -5:, :]).abs().max() < 1e-5
        one = extended("tiled", q[..., -1:, :], k, v, scheme, method)
        assert (one - ref[..., -1:, :]).abs().max() < 1e-5


@pytest.mark.parametrize("name", list(SPECS))
def test_flex_passes_equal_the_reference(name: str) -> None:
    """backend='flex': one FlexAttention call per pass (eager on CPU), merged by log-sum-exp; at 777 tokens and
    L = 64 every method's passes are non-trivial (DCA: 18 chunks, so three passes per block)."""
    scheme, q, k, v = _inputs("rope", 777)
    method = build_extension(SPECS[name], L)
    tau = torch.tensor([0.8, 1.3])
    with torch.no_grad():
        ref = extended("reference", q, k, v, scheme, method, temperature=tau)
        out = attention(q, k, v, scheme=scheme, extension=method, backend="flex", temperature=tau)
        assert (out - ref).abs().max() < 1e-5
        last = attention(q[..., -5:, :], k, v, scheme=scheme, extension=method, backend="flex", temperature=tau)
        assert (last - ref[..., -5:, :]).abs().max() < 1e-5
        one = attention(q[..., -1:, :], k, v, scheme=scheme, extension=method, backend="flex", temperature=tau)
        assert (one - ref[..., -1:, :]).abs().max() < 1e-5
        kept = torch.cat((torch.arange(3), torch.arange(700, 777)))  # an evicted cache: positions not contiguous
        evicted = (q[..., -1:, :], k[..., kept, :], v[..., kept, :], scheme, method)
        sparse = extended("flex", *evicted, q_pos=torch.tensor([776]), k_pos=kept)
        expected = extended("reference", *evicted, q_pos=torch.tensor([776]), k_pos=kept)
        assert (sparse - expected).abs().max() < 1e-5


def test_auto_runs_the_passes_through_flex_on_cuda_and_tiled_on_cpu() -> None:
    """The choice is made from the context alone (no CUDA tensor): flex where it applies on CUDA."""

    def ctx(scheme_name: str, device: str, head_dim: int, n: int = 300) -> AttentionContext:
        scheme = _inputs(scheme_name, 1)[0]
        at = torch.arange(n)
        return AttentionContext(
            scheme, build_mask("causal"), at, at, 0.25, device=torch.device(device), head_dim=head_dim
        )

    assert passes_path(ctx("rope", "cuda", 16)) == "flex"
    assert passes_path(ctx("rope", "cpu", 16)) == "tiled"
    assert passes_path(ctx("rope", "cuda", 8)) == "tiled"  # flex's CUDA kernels need head_dim >= 16
    assert "head dimension of at least 16, not 8" in get_backend("flex").applies(ctx("rope", "cuda", 8))
    xpos = _inputs("xpos", 1)[0]
    long = xpos.rotate_span + 1
    assert passes_path(ctx("xpos", "cuda", 16, long)) == "tiled"  # flex rotates in one call: xPos is exact within
    assert passes_path(ctx("xpos", "cuda", 16, 300)) == "flex"


def test_flex_passes_refuse_autograd_on_cpu_and_xpos_past_its_span() -> None:
    scheme, q, k, v = _inputs("rope", 50)
    method = build_extension("rerope", L)
    with pytest.raises(ConfigError, match="cannot train on CPU"):
        attention(q.requires_grad_(True), k, v, scheme=scheme, extension=method, backend="flex")
    xpos, q, k, v = _inputs("xpos", xpos_span() + 1)
    with torch.no_grad(), pytest.raises(ConfigError, match="xpos is exact within"):
        attention(q, k, v, scheme=xpos, extension=method, backend="flex")


def xpos_span() -> int:
    span = _inputs("xpos", 1)[0].rotate_span
    assert span is not None
    return span


@pytest.mark.parametrize("name", list(SPECS))
def test_under_autograd_the_exact_fallback_agrees_and_has_finite_gradients(name: str) -> None:
    """Without the flash kernel (autograd here; other devices too) each tile is computed explicitly in fp32."""
    scheme, q, k, v = _inputs("rope", 230)
    method = build_extension(SPECS[name], L)
    q.requires_grad_(True)
    ref = extended("reference", q, k, v, scheme, method)
    (ref_grad,) = torch.autograd.grad(ref.sum(), q)
    out = extended("tiled", q, k, v, scheme, method, block_size=64)
    (grad,) = torch.autograd.grad(out.sum(), q)
    assert (out.detach() - ref.detach()).abs().max() < 1e-5
    assert bool(torch.isfinite(grad).all())
    assert (grad - ref_grad).abs().max() < 1e-4


@pytest.mark.parametrize("scheme_name", ["xpos", "coca"])
@pytest.mark.parametrize("name", list(SPECS))
def test_fast_path_equals_the_reference_with_xpos_and_coca(scheme_name: str, name: str) -> None:
    scheme, q, k, v = _inputs(scheme_name, 301, seed=1)
    method = build_extension(SPECS[name], L)
    with torch.no_grad():
        ref = extended("reference", q, k, v, scheme, method)
        fast = extended("tiled", q, k, v, scheme, method, block_size=70)
        last = extended("tiled", q[..., -3:, :], k, v, scheme, method)
    assert (fast - ref).abs().max() < 1e-5
    assert (last - ref[..., -3:, :]).abs().max() < 1e-5


REMAPS = [
    # (spec at L = 64, m, n, d' or None when hidden)
    ("self_extend:group=4,window=8", 50, 3, 50 // 4 + 8 - 2 - 0),
    ("self_extend:group=4,window=8", 50, 45, 5),
    ("self_extend:group=4,window=8", 50, 42, 12 + 6 - 10),
    ("self_extend:group=4,window=8", 50, 43, 7),
    ("rerope:window=8", 50, 3, 8),
    ("rerope:window=8", 50, 45, 5),
    ("leaky_rerope:window=8,factor=4", 50, 3, 8 + 39 / 4),
    ("leaky_rerope:window=8,factor=4", 50, 44, 6),
    ("dca", 100, 3, 48 - 3),  # s = 48, w = 4, c = 44: older chunk, query at min(2c - 1, s)
    ("dca", 50, 40, 48 - 40),  # previous chunk: min(50 mod 44 + 44, 48)
    ("dca", 50, 45, 5),  # same chunk
    ("dca", 89, 50, 1 + 44 - 6),  # previous chunk, below s: 89 mod 44 + 44
    ("lm_infinite:n_global=2", 100, 1, 64),
    ("lm_infinite:n_global=2", 100, 50, 50),
    ("lm_infinite:n_global=2", 100, 20, None),
    ("sinks:sinks=2", 100, 1, 63 - 1),  # the query's slot is S + R - 1 = 63
    ("sinks:sinks=2", 100, 39, 61),
    ("sinks:sinks=2", 100, 20, None),
    ("sinks:sinks=2", 40, 1, 39),
    ("string", 50, 3, 47 - 21 + 10),  # S = int(0.33 x 64) = 21, W = 10
    ("string", 50, 29, 10),
    ("string", 50, 30, 20),
    ("rerope", 3, 5, None),
]


@pytest.mark.parametrize(("spec", "m", "n", "expected"), REMAPS)
def test_remaps_match_hand_computed_pairs(spec: str, m: int, n: int, expected: float | None) -> None:
    method = build_extension(spec, L)
    remapped, visible = method.remap(torch.tensor(m), torch.tensor(n))
    assert bool(visible) == (expected is not None)
    if expected is not None:
        assert float(remapped) == pytest.approx(expected, abs=1e-12)
        passes = [p for p in method.passes(m, m) if bool(p.visible(torch.tensor(m), torch.tensor(n)))]
        assert len(passes) == 1
        p = passes[0]
        rotated = float(p.q_at(torch.tensor([m]))[0]) - float(p.k_at(torch.tensor([n]))[0])
        assert rotated == pytest.approx(expected, abs=1e-12)


def test_self_extend_rotates_at_grouped_positions() -> None:
    method = build_extension("self_extend:group=4,window=8", L)
    group = method.passes(50, 50)[1]
    assert float(group.q_at(torch.tensor([50]))[0]) == 50 // 4 + 8 - 8 / 4
    assert float(group.k_at(torch.tensor([3]))[0]) == 0


@pytest.mark.parametrize("name", list(SPECS))
def test_passes_partition_the_visible_pairs_at_the_remapped_distances(name: str) -> None:
    method = build_extension(SPECS[name], L)
    n = torch.arange(300)
    period = method.period or 16
    for first in range(0, 300, period):
        m = torch.arange(first, min(first + period, 300))
        remapped, visible = method.remap(m[:, None], n[None, :])
        passes = method.passes(int(m[0]), int(m[-1]))
        shown = torch.stack([p.visible(m[:, None], n[None, :]) for p in passes])
        assert bool((shown.sum(0) == visible.long()).all())  # disjoint, and together the visible set
        assert bool(shown[0][torch.arange(m.numel()), m].all())  # the first pass holds d = 0
        for p, part in zip(passes, shown, strict=True):
            rotated = p.q_at(m).double()[:, None] - p.k_at(n).double()[None, :]
            assert torch.allclose(rotated[part], remapped.expand_as(rotated)[part], atol=1e-9)


@pytest.mark.parametrize("spec", ["rerope:log_scale=false", "leaky_rerope:log_scale=false", "string"])
def test_distance_remaps_are_translation_invariant(spec: str) -> None:
    scheme, q, k, v = _inputs("rope", 200)
    method = build_extension(spec, L)
    pos = torch.arange(200)
    with torch.no_grad():
        here = extended("tiled", q, k, v, scheme, method, q_pos=pos, k_pos=pos)
        there = extended("tiled", q, k, v, scheme, method, q_pos=pos + 301, k_pos=pos + 301)
    assert (here - there).abs().max() < 1e-5


def test_the_log_scale_acts_only_past_the_training_length() -> None:
    scheme, q, k, v = _inputs("rope", 150)
    with torch.no_grad():
        on = extended("tiled", q, k, v, scheme, build_extension("rerope", L))
        off = extended("tiled", q, k, v, scheme, build_extension("rerope:log_scale=false", L))
    assert (on[..., :L, :] - off[..., :L, :]).abs().max() < 1e-6
    assert (on[..., L:, :] - off[..., L:, :]).abs().max() > 1e-3


def test_self_extend_refuses_inputs_past_its_maximum_with_the_number() -> None:
    method = build_extension("self_extend", L)  # G = 8, W = L/4 = 16: (64 - 16) x 8 + 16 = 400
    assert method.max_length() == 400
    scheme, q, k, v = _inputs("rope", 401)
    with torch.no_grad():
        extended("tiled", q[..., :400, :], k[..., :400, :], v[..., :400, :], scheme, method)
        with pytest.raises(LengthError, match=r"valid up to 400 tokens, got 401.*group >= 9"):
            extended("tiled", q, k, v, scheme, method)
    assert build_extension("rerope", L).max_length() is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("self_extend:group=0", "group"),
        ("self_extend:window=64", "window"),
        ("rerope:window=64", "below L = 64"),
        ("leaky_rerope:factor=0.5", "factor"),
        ("dca:local=48", "local window"),
        ("dca:chunk=65", "chunk"),
        ("lm_infinite:local=65", "local"),
        ("lm_infinite:n_global=-1", "n_global"),
        ("sinks:recent=61", "sinks \\+ recent"),
        ("string:local=21", "below the offset"),
        ("string:offset=64", "offset"),
        ("string:attention_factor=0", "attention_factor"),
        ("yarn_extend", "unknown extension method"),
        ("rerope:width=3", "has no option 'width'"),
        ("rerope:window=abc", "takes an integer"),
        ("rerope:window", "key=value"),
        ("rerope:log_scale=maybe", "true or false"),
    ],
)
def test_bad_options_are_refused_with_the_fix(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_extension(spec, L)


def test_specs_parse_typed_options() -> None:
    method = build_extension("leaky_rerope:window=8,factor=4,log_scale=false", L)
    assert method.options == {"window": 8, "factor": 4.0, "log_scale": False}
    assert build_extension("self_extend", 4096).options == {"group": 8, "window": 1024, "log_scale": False}
    assert build_extension("dca", 4096).options == {"chunk": 3072, "local": 256}
    assert build_extension("sinks", 4096).options == {"sinks": 4, "recent": 4092}
    assert build_extension("string", 4096).offset == 1351
    assert [o.name for o in EXTENSIONS.options("lm_infinite")] == ["n_global", "local", "limit"]


@pytest.mark.parametrize(
    "scheme_name", ["nope", "sinusoidal", "learned", "alibi", "t5", "kerple_log", "kerple_power", "sandwich", "fire"]
)
def test_absolute_and_bias_schemes_are_refused(scheme_name: str) -> None:
    scheme = build_scheme(scheme_name, HeadDims(2, 16, 32, L))
    with pytest.raises(ConfigError, match=f"scheme '{scheme_name}'.*rope, xpos or coca"):
        check_scheme(scheme, build_extension("rerope", L))
    model = GPT(GPTConfig(vocab_size=16, n_layer=1, n_head=2, d_model=32, train_len=L, layer_plan=scheme_name))
    with pytest.raises(ConfigError, match="rope, xpos or coca"):
        InferenceSetup(extension="rerope").apply(model)


def test_a_mask_other_than_causal_is_refused() -> None:
    scheme, q, k, v = _inputs("rope", 20)
    with pytest.raises(ConfigError, match="mask='causal'"):
        attention(q, k, v, scheme=scheme, extension=build_extension("rerope", L), mask="window:8")


def _tiny_model(seed: int = 0) -> GPT:
    """2 layers, width 32, L = 32, with q and k projections scaled up so that attention depends on position."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=50, n_layer=2, n_head=2, d_model=32, train_len=32, layer_plan="rope")).eval()
    with torch.no_grad():
        for block in model.blocks:
            block.attn.q_proj.weight.mul_(15.0)
            block.attn.k_proj.weight.mul_(15.0)
    return model


@pytest.mark.parametrize("name", list(SPECS))
def test_cached_decoding_equals_the_full_forward_past_the_training_length(name: str) -> None:
    model = _tiny_model()
    tokens = torch.randint(0, 50, (1, 120), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        plain = model(tokens)
        method = build_extension(name, model.config.train_len)
        InferenceSetup(extension=method).apply(model)
        full = model(tokens)
        reference = model(tokens, backend="reference")
        through_flex = model(tokens, backend="flex")
        cache = model.new_cache()
        steps = [model(tokens[:, :7], cache=cache)]
        steps += [model(tokens[:, i : i + 1], cache=cache) for i in range(7, 120)]
    decoded = torch.cat(steps, dim=1)
    assert (full - reference).abs().max() < 1e-5
    assert (through_flex - reference).abs().max() < 1e-5
    assert (decoded - full).abs().max() < 1e-5
    assert (full[:, 32:] - plain[:, 32:]).abs().max() > 1e-3  # the method is active past L
    if name in ("sinks", "lm_infinite"):  # bounded methods evict what no later query sees
        kept = int(method.retains(torch.arange(120), 120).sum())
        assert all(keys.shape[-2] == kept < 120 for keys in cache.keys)
    else:
        assert all(keys.shape[-2] == 120 for keys in cache.keys)
    InferenceSetup(extension=None).apply(model)
    with torch.no_grad():
        assert (model(tokens) - plain).abs().max() == 0


def test_sinks_on_an_evicting_cache_are_streaming_llms_cache_slots() -> None:
    """StreamingLLM's own rule (keys re-rotated at their cache slots, the query at the last slot, plain softmax
    over the evicted cache) equals the sinks method at true positions, and the full forward's row."""
    scheme, q, k, v = _inputs("rope", 100)
    method = build_extension("sinks:sinks=4,recent=28", 32)
    with torch.no_grad():
        full = extended("tiled", q, k, v, scheme, method)
        for m in (40, 77, 99):
            kept = torch.cat((torch.arange(4), torch.arange(m - 27, m + 1)))
            kc, vc, qm = k[..., kept, :], v[..., kept, :], q[..., m : m + 1, :]
            slots = torch.arange(kept.numel())
            streaming = attention(qm, kc, vc, scheme=scheme, q_pos=slots[-1:], k_pos=slots)
            ours = extended("tiled", qm, kc, vc, scheme, method, q_pos=torch.tensor([m]), k_pos=kept)
            assert (streaming - ours).abs().max() < 1e-5
            assert (ours - full[..., m : m + 1, :]).abs().max() < 1e-5


def test_batches_and_heads_are_independent() -> None:
    scheme, q, k, v = _inputs("rope", 150)
    q2, k2, v2 = (torch.cat((x, x.flip(-2)), dim=0) for x in (q, k, v))
    method = build_extension("dca", L)
    with torch.no_grad():
        both = extended("tiled", q2, k2, v2, scheme, method, block_size=40)
        ref = extended("reference", q2, k2, v2, scheme, method)
        first = extended("tiled", q, k, v, scheme, method, block_size=40)
    assert (both - ref).abs().max() < 1e-5
    assert (both[:1] - first).abs().max() < 1e-6


def test_the_fast_path_computes_only_the_tiles_a_method_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Attention sinks at L = 64 over 2000 tokens see 64 keys per query: the tiles computed hold a few times
    that many pairs, not the 2000 x 2000 / 2 of causal attention."""
    import lextra.attention.backends.tiled as tiles  # each tile's call (`tile_attention`)

    computed = []
    real = tiles.attention_with_lse

    def counting(q, k, v, scale, **kwargs):
        computed.append(q.shape[-2] * k.shape[-2])
        return real(q, k, v, scale, **kwargs)

    monkeypatch.setattr(tiles, "attention_with_lse", counting)
    scheme, q, k, v = _inputs("rope", 2000)
    with torch.no_grad():
        extended("tiled", q, k, v, scheme, build_extension("sinks", L), block_size=64)
    assert sum(computed) < 4 * 2000 * 64


@pytest.mark.parametrize("spec", ["bca:64", "bca:100", "window:50", "window:300", "causal"])
@pytest.mark.parametrize("block", [None, 48, 100])
def test_masked_attention_equals_the_reference_for_masks_that_state_bands(spec: str, block: int | None) -> None:
    """Masks declare their rule per query block as a key range and a distance band (`Mask.band`); the tiled path
    built on it (used by the Hugging Face attention for window and BCA masks) is exact, offsets included."""
    from lextra.attention.backends.tiled import bands_apply
    from lextra.attention.masks import build_mask

    def masked_attention(q, k, v, mask, **options):  # the tiling engine over the mask's bands
        return attention(q, k, v, mask=mask, backend="tiled", **options)

    _, q, k, v = _inputs("rope", 333, seed=2)
    mask = build_mask(spec)
    with torch.no_grad():
        assert bands_apply(mask, q.device, q.dtype) == (spec != "causal")
        ref = attention(q, k, v, mask=mask, backend="reference")
        assert (masked_attention(q, k, v, mask, block_size=block) - ref).abs().max() < 1e-5
        tau = torch.tensor([0.7, 1.3])
        scaled = attention(q, k, v, mask=mask, backend="reference", temperature=tau)
        assert (masked_attention(q, k, v, mask, temperature=tau, block_size=block) - scaled).abs().max() < 1e-5
        tail = masked_attention(q[..., -9:, :], k, v, mask, block_size=block)  # offset queries, as when cached
        assert (tail - ref[..., -9:, :]).abs().max() < 1e-5
    assert not bands_apply(mask, q.requires_grad_(True).device, q.dtype)


def test_mask_bands_agree_with_the_masks_rule() -> None:
    from lextra.attention.masks import UNBOUNDED, build_mask

    for spec in ("bca:16", "window:7", "causal", "full"):
        mask = build_mask(spec)
        for first in range(0, 80, 16):
            m = torch.arange(first, first + 16)[:, None]
            n = torch.arange(0, 100)[None, :]
            (k_lo, k_hi), (d_lo, d_hi) = mask.band(first, first + 15)
            rule = (n >= k_lo) & (n <= k_hi) & (m - n >= d_lo) & (m - n <= d_hi)
            assert bool((rule == mask.visible(m, n)).all())
    assert build_mask("bca:16").band(10, 20) is None  # a run of queries across a block boundary has no one band
    assert build_mask("window:7").band(0, 5)[1] == (0, 6) and build_mask("causal").band(3, 4)[1] == (0, UNBOUNDED)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(SPECS))
def test_cuda_flex_passes_forward_and_backward_match_the_reference(name: str) -> None:
    """On CUDA `auto` runs the passes through compiled FlexAttention: forward and q/k/v gradients against the
    dense reference (fp32; gradients relative to their size, summed by FlexAttention in a different order)."""
    device = torch.device("cuda")
    scheme, q, k, v = _inputs("rope", 777)
    scheme = scheme.to(device)
    method = build_extension(SPECS[name], L)
    q, k, v = (x.to(device).requires_grad_(True) for x in (q, k, v))
    weights = torch.cos(torch.arange(q.numel(), device=device, dtype=torch.float32)).view_as(q)
    results = []
    for backend in ("auto", "reference"):
        out = attention(q, k, v, scheme=scheme, extension=method, backend=backend)
        results.append((out.detach(), torch.autograd.grad((out * weights).sum(), (q, k, v))))
    assert passes_path(AttentionContext.build(q, k, scheme=scheme, extension=method)) == "flex"
    (out, grads), (ref, ref_grads) = results
    assert (out - ref).abs().max() < 1e-5
    for grad, expected in zip(grads, ref_grads, strict=True):
        assert (grad - expected).abs().max() <= 1e-4 * max(1.0, float(expected.abs().max()))
