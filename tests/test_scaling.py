"""RoPE frequency scalings checked against Hugging Face (transformers 5.24) bit for bit, and against their formulas."""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable
from typing import Any

import pytest
import torch

from lextra.errors import ConfigError
from lextra.positions.rotary import rope_inv_freq
from lextra.positions.scaling import RopeScaling, depends_on_length, frequencies
from lextra.positions.scaling_hf import from_hf, to_hf
from lextra.positions.scaling_types import KNOWN_TYPES, ntk_base

HEAD_DIMS = (32, 64, 128)
BASES = (10000.0, 500000.0)
FACTORS = (2.0, 4.0, 8.0, 16.0)
L_TR = 2048
SEQ_LENS = (None, 1, L_TR // 2, L_TR, L_TR + 1, 3 * L_TR, 20 * L_TR)


def hf_config(rope_parameters: dict[str, Any], head_dim: int, max_position_embeddings: int):
    """A tiny LlamaConfig: HF 5.x reads everything from `config.rope_parameters` (rope_type, rope_theta, ...),
    `config.head_dim` and, for dynamic and for missing yarn/longrope lengths, `config.max_position_embeddings`."""
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=2 * head_dim,
        num_attention_heads=2,
        head_dim=head_dim,
        max_position_embeddings=max_position_embeddings,
        num_hidden_layers=1,
        intermediate_size=8,
        vocab_size=8,
        rope_parameters=copy.deepcopy(rope_parameters),  # HF writes defaults into the dict it is given
    )


def hf_frequencies(
    rope_parameters: dict[str, Any], head_dim: int, max_position_embeddings: int, seq_len: Any = None
) -> tuple[torch.Tensor, float]:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = hf_config(rope_parameters, head_dim, max_position_embeddings)
    rope_type = config.rope_parameters["rope_type"]
    if rope_type == "default":
        return LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    return ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len=seq_len)


def longrope_lists(head_dim: int, factor: float) -> tuple[list[float], list[float]]:
    """Deterministic Phi-3-like factors: short close to 1, long growing with the dimension up to about `factor`."""
    g = torch.Generator().manual_seed(head_dim)
    short = (1.0 + 0.05 * torch.rand(head_dim // 2, generator=g, dtype=torch.float64)).tolist()
    long = (
        torch.linspace(1.0, factor, head_dim // 2, dtype=torch.float64) + 0.1 * torch.rand(head_dim // 2, generator=g)
    ).tolist()
    return short, long


# Each case: (lextra scaling, the HF dict written by hand (no rope_theta), model max_position_embeddings).
Case = tuple[RopeScaling, dict[str, Any], int]


def _yarn_cases(f: float, D: int) -> dict[str, Case]:
    L, big = L_TR, int(f * L_TR)
    yarn = {"rope_type": "yarn", "factor": f, "original_max_position_embeddings": L}
    return {
        "yarn": (RopeScaling("yarn", factor=f, original_max_position_embeddings=L), yarn, big),
        "yarn-no-truncate": (
            RopeScaling("yarn", factor=f, original_max_position_embeddings=L, truncate=False),
            {**yarn, "truncate": False},
            big,
        ),
        "yarn-betas": (
            RopeScaling("yarn", factor=f, original_max_position_embeddings=L, beta_fast=16, beta_slow=2),
            {**yarn, "beta_fast": 16.0, "beta_slow": 2.0},
            big,
        ),
        "yarn-attention-factor": (
            RopeScaling("yarn", factor=f, original_max_position_embeddings=L, attention_factor=0.9),
            {**yarn, "attention_factor": 0.9},
            big,
        ),
        "yarn-mscale": (  # DeepSeek style
            RopeScaling("yarn", factor=f, original_max_position_embeddings=L, mscale=0.707, mscale_all_dim=1.0),
            {**yarn, "mscale": 0.707, "mscale_all_dim": 1.0},
            big,
        ),
        "yarn-mscale-alone-ignored": (
            RopeScaling("yarn", factor=f, original_max_position_embeddings=L, mscale=0.5),
            {**yarn, "mscale": 0.5},
            big,
        ),
        "yarn-factor-from-lengths": (  # HF: factor None -> max_position_embeddings / original
            RopeScaling("yarn", factor=big / L, original_max_position_embeddings=L),
            {**yarn, "factor": None},
            big,
        ),
    }


def make_cases(f: float, D: int) -> dict[str, Case]:
    L, big = L_TR, int(f * L_TR)
    short, long = longrope_lists(D, f)
    longrope = {"rope_type": "longrope", "original_max_position_embeddings": L, "short_factor": short}
    longrope["long_factor"] = long
    llama3 = {"rope_type": "llama3", "factor": f, "original_max_position_embeddings": L}
    return {
        "none": (RopeScaling(), {"rope_type": "default"}, L),
        "linear": (RopeScaling("linear", factor=f), {"rope_type": "linear", "factor": f}, L),
        "dynamic": (
            RopeScaling("dynamic", factor=f, original_max_position_embeddings=L),
            {"rope_type": "dynamic", "factor": f},
            L,  # HF's dynamic L_tr is the model's max_position_embeddings
        ),
        **_yarn_cases(f, D),
        "llama3": (
            RopeScaling("llama3", factor=f, original_max_position_embeddings=L),
            {**llama3, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
            big,
        ),
        "llama3-bands": (
            RopeScaling("llama3", factor=f, original_max_position_embeddings=L, low_freq_factor=2, high_freq_factor=32),
            {**llama3, "low_freq_factor": 2.0, "high_freq_factor": 32.0},
            big,
        ),
        "longrope": (
            RopeScaling("longrope", factor=f, original_max_position_embeddings=L, short_factor=short, long_factor=long),
            {**longrope, "factor": f},
            big,
        ),
        "longrope-factor-from-lengths": (
            RopeScaling(
                "longrope", factor=big / L, original_max_position_embeddings=L, short_factor=short, long_factor=long
            ),
            longrope,
            big,
        ),
        "longrope-attention-factor": (
            RopeScaling(
                "longrope",
                factor=f,
                original_max_position_embeddings=L,
                attention_factor=1.25,
                short_factor=short,
                long_factor=long,
            ),
            {**longrope, "factor": f, "attention_factor": 1.25},
            big,
        ),
    }


CASE_NAMES = tuple(make_cases(2.0, 32))


# ---------------------------------------------------------------- equality with Hugging Face
@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("name", CASE_NAMES)
def test_equals_hugging_face(name: str, head_dim: int, base: float) -> None:
    for factor in (*FACTORS, 1.5, 3.7):
        scaling, hf_dict, max_pos = make_cases(factor, head_dim)[name]
        hf_dict = {**hf_dict, "rope_theta": base}
        assert from_hf(hf_dict, head_dim=head_dim, base=base, max_position_embeddings=max_pos) == scaling
        seq_lens = SEQ_LENS if depends_on_length(scaling) else (None, 3 * L_TR)
        for seq_len in seq_lens:
            ours, our_attention = frequencies(scaling, head_dim, base, seq_len)
            for hf_params in (hf_dict, to_hf(scaling, base=base)):  # written by hand, and written by to_hf
                theirs, their_attention = hf_frequencies(hf_params, head_dim, max_pos, seq_len)
                assert ours.dtype == theirs.dtype == torch.float32
                assert ours.shape == (head_dim // 2,)
                assert torch.equal(ours, theirs), (name, factor, seq_len, (ours / theirs - 1).abs().max())
                assert isinstance(our_attention, float)
                assert our_attention == their_attention


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_dynamic_matches_hugging_face_forward_path(head_dim: int) -> None:
    """HF's forward passes seq_len as a tensor and forms the dynamic base in fp32: within 1e-6 of ours."""
    for base in BASES:
        for factor in FACTORS:
            scaling = RopeScaling("dynamic", factor=factor, original_max_position_embeddings=L_TR)
            for seq_len in (1, L_TR, L_TR + 1, 3 * L_TR, 12345, 20 * L_TR):
                ours, _ = frequencies(scaling, head_dim, base, seq_len)
                hf_dict = {"rope_type": "dynamic", "factor": factor, "rope_theta": base}
                theirs, _ = hf_frequencies(hf_dict, head_dim, L_TR, torch.tensor(seq_len))
                torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=0)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_proportional_with_full_rotation_is_linear(head_dim: int) -> None:
    for base in BASES:
        for factor in (1.0, *FACTORS):
            hf_dict = {"rope_type": "proportional", "factor": factor, "rope_theta": base, "partial_rotary_factor": 1.0}
            scaling = from_hf(hf_dict, head_dim=head_dim, base=base, max_position_embeddings=L_TR)
            assert scaling == (RopeScaling() if factor == 1 else RopeScaling("linear", factor=factor))
            ours, attention = frequencies(scaling, head_dim, base)
            theirs, their_attention = hf_frequencies(hf_dict, head_dim, L_TR)
            assert torch.equal(ours, theirs) and attention == their_attention


def test_ntk_equals_hugging_face_default_with_the_ntk_base() -> None:
    """HF has no static NTK type; rope_type 'default' with rope_theta = ntk_base(...) is its exact equivalent."""
    for head_dim in HEAD_DIMS:
        for base in BASES:
            for factor in FACTORS:
                ours, _ = frequencies(RopeScaling("ntk", factor=factor), head_dim, base)
                hf_dict = {"rope_type": "default", "rope_theta": ntk_base(factor, head_dim, base)}
                theirs, _ = hf_frequencies(hf_dict, head_dim, L_TR)
                assert torch.equal(ours, theirs)


# ---------------------------------------------------------------- each method against its formula
def all_grid() -> list[tuple[int, float, float]]:
    return [(D, b, f) for D in HEAD_DIMS for b in BASES for f in FACTORS]


def theta64(head_dim: int, base: float) -> torch.Tensor:
    return base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)


def test_none_is_plain_rope() -> None:
    for D, b, _ in all_grid():
        for seq_len in SEQ_LENS:
            inv_freq, attention = frequencies(RopeScaling(), D, b, seq_len)
            assert torch.equal(inv_freq, rope_inv_freq(D, b)) and attention == 1.0


def test_linear_is_theta_over_s_exactly() -> None:
    for D, b, f in all_grid():
        inv_freq, attention = frequencies(RopeScaling("linear", factor=f), D, b)
        assert torch.equal(inv_freq, rope_inv_freq(D, b) / f) and attention == 1.0


def test_ntk_closed_form() -> None:
    for D, b, f in all_grid():
        inv_freq, attention = frequencies(RopeScaling("ntk", factor=f), D, b)
        assert attention == 1.0
        assert torch.equal(inv_freq, rope_inv_freq(D, b * f ** (D / (D - 2))))
        expected = (b * f ** (D / (D - 2))) ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
        torch.testing.assert_close(inv_freq.double(), expected, rtol=1e-6, atol=0)
        # NTK-aware keeps the highest frequency and divides the lowest one by exactly s
        assert inv_freq[0] == 1.0
        torch.testing.assert_close(inv_freq[-1].double(), theta64(D, b)[-1] / f, rtol=1e-6, atol=0)


def test_dynamic_is_plain_rope_up_to_the_training_length_then_ntk() -> None:
    for D, b, f in all_grid():
        scaling = RopeScaling("dynamic", factor=f, original_max_position_embeddings=L_TR)
        for seq_len in (None, 0, 1, L_TR // 2, L_TR):
            inv_freq, attention = frequencies(scaling, D, b, seq_len)
            assert torch.equal(inv_freq, rope_inv_freq(D, b)) and attention == 1.0
        previous = rope_inv_freq(D, b)
        for seq_len in (L_TR + 1, 2 * L_TR, 8 * L_TR, 64 * L_TR):
            inv_freq, _ = frequencies(scaling, D, b, seq_len)
            s_eff = 1 + f * (seq_len / L_TR - 1)  # HF: factor * l / L_tr - (factor - 1)
            ntk, _ = frequencies(RopeScaling("ntk", factor=s_eff), D, b)
            torch.testing.assert_close(inv_freq, ntk, rtol=1e-6, atol=0)
            assert torch.all(inv_freq[1:] < previous[1:]) and inv_freq[0] == 1.0  # longer -> slower
            previous = inv_freq


def yarn_bounds(D: int, b: float, L: int, beta_fast: float = 32, beta_slow: float = 1) -> tuple[int, int]:
    """YaRN's ramp bounds (Peng et al. 2023, arXiv 2309.00071): low = floor(D ln(L / (2 pi beta_fast)) / (2 ln b)),
    high = ceil(same with beta_slow)."""
    low = math.floor(D * math.log(L / (2 * math.pi * beta_fast)) / (2 * math.log(b)))
    high = math.ceil(D * math.log(L / (2 * math.pi * beta_slow)) / (2 * math.log(b)))
    return max(low, 0), min(high, D - 1)


def test_yarn_keeps_high_frequencies_and_divides_low_ones() -> None:
    for D, b, f in all_grid():
        inv_freq, attention = frequencies(RopeScaling("yarn", factor=f, original_max_position_embeddings=L_TR), D, b)
        theta = rope_inv_freq(D, b)
        low, high = yarn_bounds(D, b, L_TR)
        assert 0 < low < high < D // 2  # the ramp lies inside for these settings
        assert torch.equal(inv_freq[:low], theta[:low])  # k <= low: extrapolated, unchanged
        torch.testing.assert_close(inv_freq[high:], theta[high:] / f, rtol=1e-6, atol=0)  # k >= high: theta / s
        ratio = (inv_freq / theta).double()
        assert torch.all(ratio[1:] <= ratio[:-1] + 1e-7) and torch.all((ratio >= 1 / f - 1e-7) & (ratio <= 1 + 1e-7))
        ramp = ((torch.arange(D // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        torch.testing.assert_close(ratio, ramp / f + (1 - ramp), rtol=1e-6, atol=0)
        assert attention == pytest.approx(0.1 * math.log(f) + 1, rel=1e-15)


def test_yarn_attention_factor_rules() -> None:
    f = 40.0
    common = {"factor": f, "original_max_position_embeddings": 4096}
    assert frequencies(RopeScaling("yarn", **common, attention_factor=1.5), 64)[1] == 1.5
    deepseek = RopeScaling("yarn", **common, mscale=0.707, mscale_all_dim=0.707)
    assert frequencies(deepseek, 64)[1] == 1.0  # the ratio of two equal mscales
    ratio = (0.1 * 1.0 * math.log(f) + 1) / (0.1 * 0.5 * math.log(f) + 1)
    assert frequencies(RopeScaling("yarn", **common, mscale=1.0, mscale_all_dim=0.5), 64)[1] == pytest.approx(ratio)


def test_llama3_keeps_high_frequencies_and_divides_low_ones() -> None:
    grid = [(*g, L, lo, hi) for g in all_grid() for L, lo, hi in ((8192, 1.0, 4.0), (L_TR, 2.0, 32.0))]
    for D, b, f, L, lo, hi in grid:
        scaling = RopeScaling(
            "llama3", factor=f, original_max_position_embeddings=L, low_freq_factor=lo, high_freq_factor=hi
        )
        inv_freq, attention = frequencies(scaling, D, b)
        theta = rope_inv_freq(D, b)
        wavelength = 2 * math.pi / theta.double()
        short, long = wavelength < L / hi, wavelength > L / lo
        assert attention == 1.0
        assert torch.equal(inv_freq[short], theta[short])
        assert torch.equal(inv_freq[long], theta[long] / f)
        middle = ~short & ~long
        sigma = (L / wavelength[middle] - lo) / (hi - lo)
        expected = (1 - sigma) * theta[middle].double() / f + sigma * theta[middle].double()
        torch.testing.assert_close(inv_freq[middle].double(), expected, rtol=1e-6, atol=0)
    # Llama 3.1 (D 128, base 500000, factor 8, L 8192): all three bands are populated
    scaling = RopeScaling("llama3", factor=8, original_max_position_embeddings=8192)
    wavelength = 2 * math.pi / rope_inv_freq(128, 500000.0)
    assert (wavelength < 2048).sum() > 0 and (wavelength > 8192).sum() > 0
    ratio = frequencies(scaling, 128, 500000.0)[0] / rope_inv_freq(128, 500000.0)
    assert ratio[0] == 1 and ratio[-1] == pytest.approx(1 / 8) and ((ratio > 1 / 8 + 1e-6) & (ratio < 1 - 1e-6)).any()


def test_longrope_switches_lists_after_the_training_length() -> None:
    for D, b, f in all_grid():
        short, long = longrope_lists(D, f)
        scaling = RopeScaling(
            "longrope", factor=f, original_max_position_embeddings=L_TR, short_factor=short, long_factor=long
        )
        powers = b ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D)
        expected_attention = math.sqrt(1 + math.log(f) / math.log(L_TR))
        for seq_len, chosen in ((None, short), (0, short), (L_TR, short), (L_TR + 1, long), (10 * L_TR, long)):
            inv_freq, attention = frequencies(scaling, D, b, seq_len)
            assert torch.equal(inv_freq, 1.0 / (torch.tensor(chosen, dtype=torch.float32) * powers))
            assert attention == pytest.approx(expected_attention, rel=1e-15)


def test_depends_on_length() -> None:
    scalings = {scaling.rope_type: scaling for scaling, _, _ in make_cases(4.0, 64).values()}
    scalings["ntk"] = RopeScaling("ntk", factor=4)
    assert set(scalings) == set(KNOWN_TYPES)
    assert {t for t, s in scalings.items() if depends_on_length(s)} == {"dynamic", "longrope"}


# ---------------------------------------------------------------- Hugging Face dicts
@pytest.mark.parametrize("name", CASE_NAMES)
def test_round_trip(name: str) -> None:
    for D in HEAD_DIMS:
        for f in FACTORS:
            scaling, _, max_pos = make_cases(f, D)[name]
            written = to_hf(scaling)
            read = from_hf(written, head_dim=D, base=10000.0, max_position_embeddings=max_pos)
            assert read == scaling and to_hf(read) == written
            assert to_hf(scaling, base=500000.0) == {**written, "rope_theta": 500000.0}
            assert hash(read) == hash(scaling)


def test_from_hf_legacy_and_defaults() -> None:
    kwargs = {"head_dim": 64, "base": 10000.0, "max_position_embeddings": 8192}
    assert (
        from_hf(None, **kwargs) == from_hf({}, **kwargs) == from_hf({"rope_type": "default"}, **kwargs) == RopeScaling()
    )
    assert from_hf({"type": "linear", "factor": 2}, **kwargs) == RopeScaling("linear", factor=2.0)
    # transformers 4.x Qwen-style yarn: no original length (-> max_position_embeddings), betas 0 / None -> 32 / 1
    legacy = {"type": "yarn", "factor": 4.0, "beta_fast": 0, "beta_slow": None, "rope_theta": 10000.0}
    assert from_hf(legacy, **kwargs) == RopeScaling("yarn", factor=4.0, original_max_position_embeddings=8192)
    llama31 = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    assert to_hf(from_hf(llama31, **kwargs)) == llama31
    assert to_hf(RopeScaling("dynamic", factor=2, original_max_position_embeddings=4096)) == {
        "rope_type": "dynamic",
        "factor": 2.0,
    }
    with pytest.warns(UserWarning, match="ignores original_max_position_embeddings=4096"):
        dynamic = from_hf({"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 4096}, **kwargs)
    assert dynamic["original_max_position_embeddings"] == 8192  # as HF: the model's max_position_embeddings
    with pytest.warns(UserWarning, match="ignoring keys it does not use: beta_fast"):
        assert from_hf({"rope_type": "linear", "factor": 2.0, "beta_fast": 8}, **kwargs).rope_type == "linear"


def test_inputs_are_not_mutated_and_lists_become_tuples() -> None:
    short, long = [1.0] * 32, [2.0] * 32
    hf_dict = {"rope_type": "longrope", "factor": 4.0, "short_factor": short, "long_factor": long}
    before = copy.deepcopy(hf_dict)
    scaling = from_hf(hf_dict, head_dim=64, base=10000.0, max_position_embeddings=4096)
    assert hf_dict == before and scaling["short_factor"] == tuple(short) and isinstance(scaling["long_factor"], tuple)
    assert to_hf(scaling)["short_factor"] == short


# ---------------------------------------------------------------- errors
L = {"original_max_position_embeddings": L_TR}
HF_KW = {"head_dim": 64, "base": 10000.0, "max_position_embeddings": 4096}
BAD: dict[str, tuple[Callable[[], object], str]] = {
    "unknown type": (
        lambda: RopeScaling("ntk-aware"),
        "known types: none, linear, ntk, dynamic, yarn, llama3, longrope",
    ),
    "two types": (
        lambda: RopeScaling(rope_type="yarn", type="linear"),
        "rope_type given twice, as 'yarn' and 'linear'",
    ),
    "factor below 1": (lambda: RopeScaling("linear", factor=0.5), "factor must be >= 1"),
    "factor nan": (lambda: RopeScaling("linear", factor=float("nan")), "factor must be a finite number"),
    "factor on none": (lambda: RopeScaling("none", factor=2), "'none' does not use factor"),
    "missing length": (lambda: RopeScaling("yarn", factor=4), "needs original_max_position_embeddings"),
    "bad length": (lambda: RopeScaling("dynamic", factor=2, original_max_position_embeddings=0), "positive integer"),
    "misplaced field": (lambda: RopeScaling("linear", factor=2, beta_fast=16), "'linear' does not use beta_fast"),
    "longrope lists missing": (lambda: RopeScaling("longrope", factor=4, **L), "needs short_factor"),
    "longrope negative": (
        lambda: RopeScaling("longrope", factor=4, **L, short_factor=[-1.0], long_factor=[1.0]),
        "every short_factor entry must be positive",
    ),
    "longrope length": (
        lambda: frequencies(RopeScaling("longrope", factor=4, **L, short_factor=[1.0] * 3, long_factor=[1.0] * 32), 64),
        "short_factor has 3 entries but head_dim 64 needs 32",
    ),
    "llama3 bands": (
        lambda: RopeScaling("llama3", factor=8, **L, low_freq_factor=4, high_freq_factor=1),
        "need 0 < low_freq_factor < high_freq_factor",
    ),
    "yarn betas": (lambda: RopeScaling("yarn", factor=4, **L, beta_fast=1, beta_slow=32), "beta_slow <= beta_fast"),
    "attention factor": (
        lambda: RopeScaling("yarn", factor=4, **L, attention_factor=-1.0),
        "attention_factor must be positive",
    ),
    "odd head dim": (lambda: frequencies(RopeScaling(), 63), "even positive head dimension, got 63"),
    "tiny ntk head": (lambda: frequencies(RopeScaling("ntk", factor=2), 2), "needs head_dim >= 4"),
    "negative seq_len": (lambda: frequencies(RopeScaling("dynamic", factor=2, **L), 64, seq_len=-1), "seq_len must be"),
    "not a scaling": (lambda: frequencies({"rope_type": "linear"}, 64), "expected a RopeScaling"),
    "hf unknown type": (lambda: from_hf({"rope_type": "su"}, **HF_KW), "lextra reads default, linear, dynamic, yarn"),
    "hf ntk": (lambda: from_hf({"rope_type": "ntk"}, **HF_KW), "'ntk' has no HF type"),
    "hf missing factor": (lambda: from_hf({"rope_type": "linear"}, **HF_KW), "needs 'factor'"),
    "hf llama3 bands": (lambda: from_hf({"rope_type": "llama3", "factor": 8.0}, **HF_KW), "needs 'low_freq_factor'"),
    "hf longrope length": (
        lambda: from_hf({"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [1.0] * 4}, **HF_KW),
        "short_factor has 4 entries but head_dim 64 needs 32",
    ),
    "hf partial": (
        lambda: from_hf({"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5}, **HF_KW),
        "partial_rotary_factor=0.5 is not supported",
    ),
    "hf theta": (lambda: from_hf({"rope_type": "default", "rope_theta": 5e5}, **HF_KW), "pass base=500000.0"),
    "hf mrope": (lambda: from_hf({"rope_type": "default", "mrope_section": [8, 12, 12]}, **HF_KW), "mrope_section"),
    "to_hf ntk": (lambda: to_hf(RopeScaling("ntk", factor=4)), "no static NTK-aware rope_type"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_configs_raise_helpful_config_errors(case: str) -> None:
    build, message = BAD[case]
    with pytest.raises(ConfigError, match=re.escape(message)):
        build()
