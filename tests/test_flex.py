"""The `flex` backend (FlexAttention, Dong et al. 2024, arXiv 2412.05496) against the dense reference.

On CPU FlexAttention runs forward only (eager and compiled): every scheme x mask in fp32 to 1e-5, at lengths
that are not multiples of its block, with offset queries and Lq = 1, temperatures per head and per query; the
bucket rule (no recompilation within a bucket); the BlockMask; the refusals. The compiled matrix shares two
length buckets, so it compiles about a dozen kernels once (slow). Tests marked `gpu` (deselected by `make test`,
run by `make test-gpu`) hold forward and backward to the reference on CUDA.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from conftest import ALL_SCHEMES, make_scheme, qkv
from torch._dynamo.utils import counters
from torch.nn.attention.flex_attention import create_block_mask

import lextra.attention.flex as flex
from lextra.attention import attention, build_mask
from lextra.attention.backends import AttentionContext, auto_backend, reference_attention
from lextra.errors import ConfigError
from lextra.positions import SCHEMES
from lextra.positions.bias import FLEX_MAX_HIDDEN

MASKS = ["causal", "window:37", "bca:64", "full"]
TOL = 1e-5
HEADS, HEAD_DIM = 2, 16
#: FIRE's threshold below the test lengths, so its bias is the per-query form (not a distance table)
FIRE_OPTIONS = {"threshold": 40.0}


def _scheme(name: str, **options):
    options = {**(FIRE_OPTIONS if name == "fire" else {}), **options}
    return make_scheme(name, n_heads=HEADS, head_dim=HEAD_DIM, train_len=64, **options).eval()


def _ctx(q, k, scheme, mask, q_pos, k_pos, scale, tau=None) -> AttentionContext:
    """The context `attention` builds for these arguments."""
    return AttentionContext.build(
        q, k, scheme=scheme, mask=mask, q_pos=q_pos, k_pos=k_pos, scale=scale, temperature=tau
    )


def _case(name: str, mask: str, n_keys: int, n_queries: int, tau: str | None):
    """A scheme, mask, inputs and positions (queries = the last Lq keys, as in cached decoding), temperature."""
    scheme = _scheme(name)
    q, k, v = qkv(scheme, n_queries, batch=2, key_length=n_keys)
    k_pos = torch.arange(n_keys)
    q_pos = k_pos[n_keys - n_queries :]
    if tau == "query":
        temperature = 0.5 + torch.rand(HEADS, n_queries)
    elif tau == "head":
        temperature = (0.5 + torch.rand(HEADS))[:, None]
    else:
        temperature = None
    return scheme, build_mask(mask), q, k, v, q_pos, k_pos, temperature


#: every scheme flex computes: a content-dependent one (CoPE) reads q and k in its scores, which a score_mod cannot
#: (the dispatch refuses flex for it: tests/test_cope.py)
FLEX_SCHEMES = [name for name in ALL_SCHEMES if not SCHEMES.get(name).content_dependent]


def _error(name: str, mask: str, n_keys: int, n_queries: int, tau: str | None, eager: bool) -> float:
    scheme, mask_, q, k, v, q_pos, k_pos, temperature = _case(name, mask, n_keys, n_queries, tau)
    scale = HEAD_DIM**-0.5
    with torch.no_grad():
        ref = reference_attention(q, k, v, _ctx(q, k, scheme, mask_, q_pos, k_pos, scale, temperature))
        out = flex.flex_attention_forward(
            q, k, v, _ctx(q, k, scheme, mask_, q_pos, k_pos, scale, temperature), eager=eager
        )
    assert out.shape == ref.shape
    return float((out - ref).abs().max())


def _graphs() -> int:
    return counters["stats"]["unique_graphs"]


# ------------------------------------------------------------------------------------------------------------
# buckets and block masks (no compiling)
# ------------------------------------------------------------------------------------------------------------


def test_buckets_are_few_multiples_of_the_block() -> None:
    assert [flex.bucket(n) for n in (1, 2, 128, 129, 200, 257, 333, 385, 1000, 1025, 4096, 4097)] == [
        1, 128, 128, 256, 256, 384, 384, 512, 1024, 1536, 4096, 6144,
    ]  # fmt: skip
    sizes = {flex.bucket(n) for n in range(2, 131073)}
    assert len(sizes) == 20 and all(size % flex.BLOCK == 0 for size in sizes)
    assert all(flex.bucket(n) <= 1.5 * n for n in range(257, 20000))
    assert flex.padded_lengths(1, 1) == (1, 128)


@pytest.mark.parametrize("mask", [*MASKS, "window:200", "bca:100"])
@pytest.mark.parametrize(("n_keys", "n_queries"), [(333, 333), (333, 300), (1000, 1), (600, 130)])
def test_block_mask_matches_torch_create_block_mask(mask: str, n_keys: int, n_queries: int) -> None:
    mask_ = build_mask(mask)
    k_pos = torch.arange(n_keys) + 5
    q_pos = k_pos[n_keys - n_queries :]
    ours = flex.flex_block_mask(mask_, q_pos, k_pos)
    pad_q, pad_k = flex.padded_lengths(n_queries, n_keys)
    theirs = create_block_mask(ours.mask_mod, None, None, pad_q, pad_k, device="cpu")
    assert ours.seq_lengths == theirs.seq_lengths == (pad_q, pad_k)
    assert torch.equal(ours.to_dense(), theirs.to_dense())
    assert torch.equal(ours.kv_num_blocks, theirs.kv_num_blocks)
    assert torch.equal(ours.full_kv_num_blocks, theirs.full_kv_num_blocks)
    assert flex.flex_block_mask(mask_, q_pos.clone(), k_pos.clone()) is ours  # cached


def test_block_mask_skips_what_the_mask_hides() -> None:
    pos = torch.arange(4096)
    window = flex.flex_block_mask(build_mask("window:128"), pos, pos)
    blocks = int(window.kv_num_blocks.sum() + window.full_kv_num_blocks.sum())
    assert blocks == 2 * 32 - 1  # each query block sees its own key block and the one before (not the first)
    causal = flex.flex_block_mask(build_mask("causal"), pos, pos)
    assert int(causal.kv_num_blocks.sum()) == 32 and int(causal.full_kv_num_blocks.sum()) == 32 * 31 // 2
    padded = flex.flex_block_mask(build_mask("full"), pos[:200], pos[:200])  # 256 x 256: padding hidden
    assert padded.to_dense().sum() == 4 and int(padded.full_kv_num_blocks.sum()) == 1


BANDS = [
    ((0, 63), (-flex.UNBOUNDED, flex.UNBOUNDED)),
    ((64, flex.UNBOUNDED), (0, 9)),
    ((0, flex.UNBOUNDED), (200, 399)),
]


@pytest.mark.parametrize(("distance", "keys"), BANDS)
@pytest.mark.parametrize(("n_keys", "n_queries", "gap"), [(333, 333, 0), (600, 130, 0), (1000, 1, 0), (500, 200, 7)])
def test_band_block_mask_is_the_band_blockwise(distance, keys, n_keys: int, n_queries: int, gap: int) -> None:
    """An extension pass's BlockMask (from each block's position bounds) equals the one torch builds from its
    mask_mod, which is the band's rule; `gap` leaves positions non-contiguous (an evicted cache)."""
    k_pos = torch.arange(n_keys) + 5 + gap * (torch.arange(n_keys) >= 50)
    q_pos = k_pos[n_keys - n_queries :]
    first = None if gap else (int(q_pos[0]), int(k_pos[0]))
    ours = flex.band_block_mask(q_pos, k_pos, distance, keys, first=first)
    pad_q, pad_k = flex.padded_lengths(n_queries, n_keys)
    theirs = create_block_mask(ours.mask_mod, None, None, pad_q, pad_k, device="cpu")
    assert ours.seq_lengths == theirs.seq_lengths == (pad_q, pad_k)
    assert torch.equal(ours.to_dense()[..., : theirs.to_dense().shape[-2], :], theirs.to_dense())
    assert torch.equal(ours.full_kv_num_blocks, theirs.full_kv_num_blocks)
    m, n = q_pos[:, None], k_pos[None, :]
    rule = (m - n >= distance[0]) & (m - n <= distance[1]) & (n >= keys[0]) & (n <= keys[1])
    q_idx, kv_idx = torch.arange(n_queries)[:, None], torch.arange(n_keys)[None, :]
    assert torch.equal(ours.mask_mod(0, 0, q_idx, kv_idx), rule)
    assert (flex.band_block_mask(q_pos, k_pos, distance, keys, first=first) is ours) == (first is not None)


# ------------------------------------------------------------------------------------------------------------
# eager: every scheme x mask, offsets, Lq = 1, both temperature shapes
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mask", ["causal", "bca:64"])
@pytest.mark.parametrize("name", ["nope", "alibi", "fire", "coca"])
def test_eager_flex_matches_reference_quick(name: str, mask: str) -> None:
    assert _error(name, mask, 200, 150, "query", eager=True) <= TOL


@pytest.mark.slow
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("name", FLEX_SCHEMES)
def test_eager_flex_matches_reference(name: str, mask: str) -> None:
    for n_keys, n_queries, tau in [(200, 200, "query"), (200, 150, "head"), (200, 1, None), (77, 77, None)]:
        assert _error(name, mask, n_keys, n_queries, tau, eager=True) <= TOL, (n_keys, n_queries, tau)


def test_fire_below_its_threshold_reads_its_distance_table() -> None:
    scheme = make_scheme("fire", n_heads=HEADS, head_dim=HEAD_DIM, train_len=64).eval()  # threshold 512
    q, k, v = qkv(scheme, 200, batch=1)
    pos = torch.arange(200)
    with torch.no_grad():
        ref = reference_attention(q, k, v, _ctx(q, k, scheme, build_mask("causal"), pos, pos, 0.25))
        out = flex.flex_attention_forward(q, k, v, _ctx(q, k, scheme, build_mask("causal"), pos, pos, 0.25), eager=True)
    assert scheme.distance_only(pos) and (out - ref).abs().max() <= TOL


def test_attention_dispatches_flex_with_temperature() -> None:
    scheme = _scheme("alibi")  # the compiled matrix's shapes and kind: one kernel for both
    q, k, v = qkv(scheme, 333)
    tau = 0.5 + torch.rand(HEADS, 333)
    with torch.no_grad():
        ref = attention(q, k, v, scheme=scheme, mask="window:37", backend="reference", temperature=tau)
        flex_out = attention(q, k, v, scheme=scheme, mask="window:37", backend="flex", temperature=tau)
    assert (flex_out - ref).abs().max() <= TOL


def test_empty_inputs_give_empty_outputs() -> None:
    scheme = _scheme("alibi")
    q, k, v = qkv(scheme, 0, batch=1, key_length=5)
    out = flex.flex_attention_forward(
        q, k, v, _ctx(q, k, scheme, build_mask("causal"), torch.arange(0), torch.arange(5), 0.25)
    )
    assert out.shape == (1, HEADS, 0, HEAD_DIM)


# ------------------------------------------------------------------------------------------------------------
# refusals and the CUDA choice of `auto` (decided without touching a GPU)
# ------------------------------------------------------------------------------------------------------------


def test_flex_refuses_autograd_on_cpu() -> None:
    scheme = _scheme("t5")  # a learned table: autograd reaches it even when q, k, v need no gradient
    q, k, v = qkv(scheme, 50, batch=1)
    with pytest.raises(ConfigError, match="no backward on CPU; use backend='chunked'") as err:
        attention(q, k, v, scheme=scheme, backend="flex")
    assert "\n" not in str(err.value)
    q.requires_grad_(True)
    with pytest.raises(ConfigError, match="no backward on CPU"):
        attention(q, k, v, scheme=_scheme("rope"), backend="flex")
    pos = torch.arange(50)
    with torch.no_grad():
        out = flex.flex_attention_forward(q, k, v, _ctx(q, k, scheme, build_mask("causal"), pos, pos, 0.25), eager=True)
    assert out.shape == (1, HEADS, 50, HEAD_DIM)


def test_flex_refuses_a_block_mask_that_does_not_match() -> None:
    scheme, mask, q, k, v, q_pos, k_pos, _ = _case("alibi", "causal", 200, 200, None)
    foreign = create_block_mask(lambda b, h, q_idx, kv_idx: kv_idx <= q_idx, None, None, 256, 256, device="cpu")
    with torch.no_grad(), pytest.raises(ConfigError, match=r"not built by lextra\.attention\.flex\.flex_block_mask"):
        flex.flex_attention_forward(
            q, k, v, _ctx(q, k, scheme, mask, q_pos, k_pos, 0.25), block_mask=foreign, eager=True
        )
    other = flex.flex_block_mask(mask, q_pos[:190], k_pos[:190])  # the same 256 bucket, other lengths
    with torch.no_grad(), pytest.raises(ConfigError, match="built for causal\\(\\) over 190 queries"):
        flex.flex_attention_forward(q, k, v, _ctx(q, k, scheme, mask, q_pos, k_pos, 0.25), block_mask=other, eager=True)
    window = flex.flex_block_mask(build_mask("window:8"), q_pos, k_pos)
    with torch.no_grad(), pytest.raises(ConfigError, match="window\\(width=8\\)"):
        flex.flex_attention_forward(
            q, k, v, _ctx(q, k, scheme, mask, q_pos, k_pos, 0.25), block_mask=window, eager=True
        )
    own = flex.flex_block_mask(mask, q_pos, k_pos)
    with torch.no_grad():
        out = flex.flex_attention_forward(
            q, k, v, _ctx(q, k, scheme, mask, q_pos, k_pos, 0.25), block_mask=own, eager=True
        )
        ref = reference_attention(q, k, v, _ctx(q, k, scheme, mask, q_pos, k_pos, 0.25))
    assert (out - ref).abs().max() <= TOL


def test_flex_refuses_what_it_cannot_compute_and_cuda_auto_avoids_it() -> None:
    xpos, wide_fire = _scheme("xpos"), _scheme("fire", hidden=FLEX_MAX_HIDDEN + 1)
    long = torch.arange(xpos.rotate_span + 1)
    short = torch.arange(300)
    causal = build_mask("causal")
    assert "xpos is exact within 8192 positions" in flex.flex_unsupported(xpos, long, long)
    assert flex.flex_unsupported(xpos, short, short) is None
    assert "65" in flex.flex_unsupported(wide_fire, short, short)
    assert auto_backend(xpos, causal, long, long, "cuda") == "chunked"
    assert auto_backend(wide_fire, causal, short, short, "cuda") == "chunked"
    q, k, v = qkv(wide_fire, 300, batch=1)
    with torch.no_grad(), pytest.raises(ConfigError, match="use backend='chunked'"):
        attention(q, k, v, scheme=wide_fire, backend="flex")


@pytest.mark.parametrize(
    ("name", "mask", "offset", "expected"),
    [
        ("rope", "causal", 0, "sdpa"),
        ("nope", "full", 0, "sdpa"),
        ("coca", "causal", 0, "sdpa"),
        ("rope", "causal", 10, "flex"),  # offset queries: not one is_causal call
        ("rope", "window:64", 0, "flex"),
        ("nope", "bca:64", 0, "flex"),
        ("alibi", "causal", 0, "flex"),
        ("t5", "full", 0, "flex"),
        ("fire", "causal", 0, "flex"),
        ("xpos", "causal", 0, "sdpa"),
    ],
)
def test_auto_on_cuda_picks_flash_or_flex(name: str, mask: str, offset: int, expected: str) -> None:
    k_pos = torch.arange(300)
    q_pos = k_pos[offset:]
    cuda = torch.device("cuda")
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            assert auto_backend(_scheme(name), build_mask(mask), q_pos, k_pos, cuda) == expected
    assert auto_backend(_scheme(name), build_mask(mask), q_pos, k_pos, "cuda:1") == expected
    if expected == "flex":  # on CPU the same call keeps today's paths
        assert auto_backend(_scheme(name), build_mask(mask), q_pos, k_pos, "cpu") == "chunked"


# ------------------------------------------------------------------------------------------------------------
# compiled: the whole matrix at one pair of buckets (384 x 384), Lq = 1 at another
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("name", FLEX_SCHEMES)
def test_compiled_flex_matches_reference(name: str, mask: str) -> None:
    assert _error(name, mask, 333, 333, "query", eager=False) <= TOL
    assert _error(name, mask, 333, 300, "query", eager=False) <= TOL  # offset queries, the same buckets


@pytest.mark.slow
@pytest.mark.parametrize("name", ["rope", "alibi", "fire"])
def test_compiled_flex_per_head_temperature_and_decoding(name: str) -> None:
    assert _error(name, "causal", 333, 333, "head", eager=False) <= TOL
    assert _error(name, "window:37", 333, 1, "query", eager=False) <= TOL  # a decoding step: Lq bucket 1


@pytest.mark.slow
@pytest.mark.parametrize("name", ["nope", "t5", "fire"])
def test_lengths_in_one_bucket_compile_once(name: str) -> None:
    assert _error(name, "bca:64", 333, 333, "query", eager=False) <= TOL  # compiles, unless done before
    before = _graphs()
    for n_keys, n_queries in [(260, 260), (384, 384), (300, 299), (333, 290)]:
        assert _error(name, "bca:64", n_keys, n_queries, "query", eager=False) <= TOL
    assert _graphs() == before
    assert _error(name, "bca:64", 400, 400, "query", eager=False) <= TOL  # the next bucket (512) compiles
    assert _graphs() == before + 1


# ------------------------------------------------------------------------------------------------------------
# CUDA: forward and backward against the reference (make test-gpu)
# ------------------------------------------------------------------------------------------------------------


def _gpu_run(scheme, q, k, v, mask, backend, temperature):
    out = attention(q, k, v, scheme=scheme, mask=mask, backend=backend, temperature=temperature)
    weights = torch.cos(torch.arange(out.numel(), device=out.device, dtype=torch.float32)).view_as(out)
    inputs = [q, k, v, *[p for p in scheme.parameters() if p.requires_grad]]
    if temperature is not None and temperature.requires_grad:
        inputs.append(temperature)
    grads = torch.autograd.grad((out.float() * weights).sum(), inputs, allow_unused=True)
    return out.detach().float(), list(grads)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("name", FLEX_SCHEMES)
def test_cuda_flex_forward_and_backward_match_reference(name: str, mask: str, dtype: torch.dtype) -> None:
    device = torch.device("cuda")
    tol = TOL if dtype == torch.float32 else 5e-2  # bf16: 8 mantissa bits in inputs, outputs and gradients
    # gradients of scheme parameters and of the temperature sum B x H x Lq x Lk terms, in flex by fp32 atomics
    # (the reference sums FIRE's in fp64): held relative to their size, at 1e-4 in fp32
    sum_tol = max(tol, 1e-4)
    for n_keys, n_queries in [(333, 333), (333, 300), (333, 1)]:
        scheme = _scheme(name).to(device).train()
        q, k, v = (x.to(device, dtype).requires_grad_(True) for x in qkv(scheme, n_queries, 2, n_keys))
        k_pos = torch.arange(n_keys, device=device)
        q_pos = k_pos[n_keys - n_queries :]
        tau = (0.5 + torch.rand(HEADS, n_queries, device=device)).requires_grad_(True)
        out, grads = _gpu_run(scheme, q, k, v, mask, "flex", tau)
        assert auto_backend(scheme, build_mask(mask), q_pos, k_pos, device) in ("sdpa", "flex")
        q32, k32, v32 = (x.detach().float().requires_grad_(True) for x in (q, k, v))
        ref, ref_grads = _gpu_run(scheme, q32, k32, v32, mask, "reference", tau)
        assert (out - ref).abs().max() <= tol, (n_queries, "output")
        assert [g is None for g in grads] == [r is None for r in ref_grads]
        assert all(g is not None for g in grads[:3] + grads[-1:])  # q, k, v and the temperature
        for i, (g, r) in enumerate(zip(grads, ref_grads, strict=True)):
            if r is not None:
                bound = (tol if i < 3 else sum_tol) * max(1.0, float(r.abs().max()))
                assert (g.float() - r).abs().max() <= bound, (n_queries, "gradient", i)


_BUDGET_SCRIPT = """
import torch
from torch._dynamo.utils import counters
from lextra.attention import attention, flex
from lextra.positions import HeadDims, build_scheme

flex.RECOMPILE_LIMIT = 1
scheme = build_scheme("alibi", HeadDims(2, 16, 32, 64))

def call(n):
    q, k, v = (torch.randn(1, 2, n, 16) for _ in range(3))
    return attention(q, k, v, scheme=scheme, backend="flex")

call(100)
first = counters["stats"]["unique_graphs"]
call(120)  # the same bucket (128): the compiled kernel is reused
print("graphs", first, counters["stats"]["unique_graphs"])
try:
    call(300)  # bucket 384: a second kernel, past the budget
except flex.CompileBudgetError as err:
    print("refused", err)
else:
    print("ran past the budget")
"""


@pytest.mark.slow
def test_a_call_past_the_compile_budget_is_refused_not_run_uncompiled() -> None:
    """Dynamo's own counter: one graph per bucket, reused within it; the call that would need a kernel past
    RECOMPILE_LIMIT raises instead of falling back to eager FlexAttention (the full L x L scores)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", _BUDGET_SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "graphs 1 1"
    assert lines[1].startswith("refused FlexAttention has compiled lextra.attention.flex.RECOMPILE_LIMIT = 1 kernels")
    assert "raise RECOMPILE_LIMIT" in lines[1]


@pytest.mark.parametrize("mask", ["full", "causal"])
def test_flex_takes_alibi_left_offset(mask: str) -> None:
    scheme = make_scheme("alibi", n_heads=HEADS, head_dim=HEAD_DIM, left=0.5)
    q, k, v = qkv(scheme, 150)
    with torch.no_grad():
        ref = attention(q, k, v, scheme=scheme, mask=mask, backend="reference")
        out = attention(q, k, v, scheme=scheme, mask=mask, backend="flex")
    assert (out - ref).abs().max() <= TOL
