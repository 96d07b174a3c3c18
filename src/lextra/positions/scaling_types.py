"""The built-in RoPE scaling types, one `ScalingType` entry each (lextra name -> Hugging Face `rope_type`):

- "none": plain RoPE (Su et al. 2021, arXiv 2104.09864), theta_k = base^(-2k/D) ("default").
- "linear" (alias "pi"): position interpolation (Chen et al. 2023, arXiv 2306.15595), theta_k / s ("linear").
- "ntk": NTK-aware static scaling (bloc97 2023, a Reddit post; no paper), base' = base * s^(D/(D-2)); HF has none.
- "dynamic": dynamic NTK (emozilla 2023, a Reddit post; no paper), the base recomputed from the current length.
- "yarn": YaRN (Peng et al. 2023, arXiv 2309.00071), a per-dimension ramp between extrapolation and interpolation.
- "llama3": Llama 3.1's wavelength-banded interpolation (Grattafiori et al. 2024, arXiv 2407.21783).
- "longrope": LongRoPE (Ding et al. 2024, arXiv 2402.13753), per-dimension short and long rescale factors.

Every type repeats Hugging Face's fp32 arithmetic (transformers 5.24), so the frequencies are bit-identical to
`ROPE_INIT_FUNCTIONS[rope_type]`; where the papers and HF disagree, HF is followed."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor

from lextra.errors import ConfigError
from lextra.positions.scaling import (
    SCALING_TYPES,
    TRAIN_LENGTH,
    RopeScaling,
    ScalingType,
    register_scaling,
    rope_inv_freq,
)
from lextra.registry import Option

#: the extension ratio s = L_ex / L_tr (>= 1); for "dynamic" the slope of its growth past L_tr
FACTOR = Option("factor", 1.0, "float")
#: the training length L_tr; a scheme fills it with its own when it is not given
TRAINED = Option(TRAIN_LENGTH, Option.REQUIRED, "int")
#: the cos/sin multiplier; None uses the method's default formula
ATTENTION = Option("attention_factor", None, "float | None")


def base_powers(head_dim: int, base: float) -> Tensor:
    """base^(2k/D) in fp32, the same arithmetic as HF (so `1.0 / base_powers(D, b)` == `rope_inv_freq(D, b)`)."""
    return base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim)


def ntk_base(factor: float, head_dim: int, base: float) -> float:
    """NTK-aware base b' = b * s^(D/(D-2)) (bloc97 2023); HF's equivalent of "ntk" is rope_type "default" with
    `rope_theta = ntk_base(...)`."""
    return base * factor ** (head_dim / (head_dim - 2))


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's cos/sin multiplier `0.1 * mscale * ln(s) + 1` (1 for s <= 1); logits carry its square (Peng 2023)."""
    if factor <= 1:
        return 1.0
    return 0.1 * mscale * math.log(factor) + 1.0


def factor_from_lengths(values: dict[str, Any], max_position_embeddings: int) -> dict[str, Any]:
    """HF's yarn / longrope rule for a missing factor: the extension ratio max_position_embeddings / L_tr."""
    if "factor" not in values:
        values["factor"] = max_position_embeddings / values[TRAIN_LENGTH]
    return values


@register_scaling("none")
class NoScaling(ScalingType):
    """Plain RoPE (Su 2021): theta_k = base^(-2k/D)."""

    summary = "plain RoPE, theta_k = base^(-2k/D) (Hugging Face 'default')"
    positional = None
    hf_type = "default"
    derived_defaults: ClassVar[dict[str, str]] = {}

    @classmethod
    def frequencies(cls, scaling: RopeScaling, head_dim: int, base: float, seq_len: int | None) -> tuple[Tensor, float]:
        return rope_inv_freq(head_dim, base), 1.0


@register_scaling("linear", aliases=("pi",))
class LinearScaling(ScalingType):
    """Position interpolation (Chen 2023): positions / s, i.e. theta_k / s (HF divides the fp32 theta by s)."""

    summary = "position interpolation (Chen 2023, alias pi): theta_k / s"
    params = (FACTOR,)
    stretch = True
    hf_type = "linear"
    hf_reads = ("proportional",)
    hf_required = ("factor",)

    @classmethod
    def frequencies(cls, scaling: RopeScaling, head_dim: int, base: float, seq_len: int | None) -> tuple[Tensor, float]:
        return rope_inv_freq(head_dim, base) / scaling["factor"], 1.0

    @classmethod
    def from_hf(cls, params: Mapping[str, Any], hf_type: str, max_position_embeddings: int) -> dict[str, Any]:
        if hf_type == "proportional":  # with the whole head rotated it is theta / factor, HF's "linear"
            factor = params.get("factor", 1.0)
            return {"rope_type": "none"} if factor == 1 else {"rope_type": "linear", "factor": factor}
        return super().from_hf(params, hf_type, max_position_embeddings)


@register_scaling("ntk")
class NtkScaling(ScalingType):
    """NTK-aware static scaling (bloc97 2023): base' = base * s^(D/(D-2)), positions unchanged, no attention factor."""

    summary = "NTK-aware static scaling (bloc97 2023): base * s^(D/(D-2)); no Hugging Face type"
    params = (FACTOR,)
    min_head_dim = 4
    stretch = True

    @classmethod
    def frequencies(cls, scaling: RopeScaling, head_dim: int, base: float, seq_len: int | None) -> tuple[Tensor, float]:
        return rope_inv_freq(head_dim, ntk_base(scaling["factor"], head_dim, base)), 1.0

    @classmethod
    def to_hf(cls, scaling: RopeScaling) -> dict[str, Any]:
        raise ConfigError(
            "Hugging Face has no static NTK-aware rope_type; the exact equivalent is "
            "{'rope_type': 'default', 'rope_theta': ntk_base(factor, head_dim, base)} "
            "(base * factor^(D/(D-2))); 'dynamic' is a different method"
        )


@register_scaling("dynamic")
class DynamicScaling(ScalingType):
    """Dynamic NTK, Hugging Face's `_compute_dynamic_ntk_parameters` (emozilla 2023).

    For l = max(seq_len, L_tr): base' = base * (s * l / L_tr - (s - 1))^(D/(D-2)), the static NTK base for
    s_eff = 1 + s (l / L_tr - 1) (the YaRN paper's s_eff = max(1, l / L_tr) agrees only for factor 1). L_tr is the
    model's `max_position_embeddings` in HF, so `to_hf` leaves it out; the base is formed in float64 from an integer
    seq_len, as HF's init path."""

    summary = "dynamic NTK (emozilla 2023): the NTK base recomputed from the current length"
    params = (FACTOR, TRAINED)
    length_dependent = True
    hf_type = "dynamic"
    hf_required = ("factor",)
    min_head_dim = 4
    stretch = True

    @classmethod
    def stretch_factor(cls, ratio: float) -> float:
        """1: the base grows with the current length itself, at its unscaled slope."""
        return 1.0

    @classmethod
    def frequencies(cls, scaling: RopeScaling, head_dim: int, base: float, seq_len: int | None) -> tuple[Tensor, float]:
        factor, train_len = scaling["factor"], scaling[TRAIN_LENGTH]
        length = train_len if seq_len is None else max(seq_len, train_len)
        dynamic_base = base * ((factor * length / train_len) - (factor - 1)) ** (head_dim / (head_dim - 2))
        return rope_inv_freq(head_dim, dynamic_base), 1.0

    @classmethod
    def from_hf(cls, params: Mapping[str, Any], hf_type: str, max_position_embeddings: int) -> dict[str, Any]:
        given = params.get(TRAIN_LENGTH)
        if given is not None and given != max_position_embeddings:
            warnings.warn(
                f"Hugging Face rope_scaling (rope_type {hf_type!r}): Hugging Face's dynamic NTK uses "
                f"max_position_embeddings={max_position_embeddings} as the training length and ignores "
                f"original_max_position_embeddings={given}; so does lextra",
                stacklevel=3,
            )
        return {**super().from_hf(params, hf_type, max_position_embeddings), TRAIN_LENGTH: max_position_embeddings}

    @classmethod
    def to_hf(cls, scaling: RopeScaling) -> dict[str, Any]:
        return {"factor": scaling["factor"]}  # HF reads L_tr from the model's max_position_embeddings


@register_scaling("yarn")
class YarnScaling(ScalingType):
    """YaRN (Peng 2023), as Hugging Face's `_compute_yarn_parameters`.

    The ramp runs over the pair index k between `dim(beta) = D ln(L_tr / (2 pi beta)) / (2 ln b)` for beta_fast
    (low) and beta_slow (high), rounded outwards when `truncate` and clamped to [0, D-1];
    `inv_freq_k = theta_k / s * ramp_k + theta_k * (1 - ramp_k)`, `ramp_k = clamp((k - low) / (high - low), 0, 1)`.
    Attention factor: `attention_factor`, else `yarn_mscale(s, mscale) / yarn_mscale(s, mscale_all_dim)` when both
    are non-zero (DeepSeek), else 0.1 ln s + 1. A missing factor is max_position_embeddings / L_tr, and
    `beta_fast` / `beta_slow` of 0 are 32 / 1, as in HF."""

    summary = "YaRN (Peng 2023): per-dimension ramp between extrapolation and interpolation, attention factor"
    params = (
        FACTOR,
        TRAINED,
        ATTENTION,
        Option("beta_fast", 32.0, "float"),
        Option("beta_slow", 1.0, "float"),
        Option("mscale", None, "float | None"),
        Option("mscale_all_dim", None, "float | None"),
        Option("truncate", True, "bool"),
    )
    stretch = True
    hf_type = "yarn"

    @classmethod
    def check(cls, scaling: RopeScaling, where: str) -> None:
        if not 0 < scaling["beta_slow"] <= scaling["beta_fast"]:
            raise ConfigError(
                f"{where}: need 0 < beta_slow <= beta_fast (defaults 1 and 32), "
                f"got beta_slow={scaling['beta_slow']:g}, beta_fast={scaling['beta_fast']:g}"
            )

    @classmethod
    def frequencies(cls, scaling: RopeScaling, head_dim: int, base: float, seq_len: int | None) -> tuple[Tensor, float]:
        factor, train_len = scaling["factor"], scaling[TRAIN_LENGTH]
        attention = scaling["attention_factor"]
        if attention is None:
            mscale, mscale_all_dim = scaling["mscale"], scaling["mscale_all_dim"]
            if mscale and mscale_all_dim:
                attention = float(yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim))
            else:
                attention = yarn_mscale(factor)

        def correction_dim(rotations: float) -> float:
            # the pair index whose wavelength fits `rotations` times into L_tr (same operation order as HF)
            return (head_dim * math.log(train_len / (rotations * 2 * math.pi))) / (2 * math.log(base))

        low, high = correction_dim(scaling["beta_fast"]), correction_dim(scaling["beta_slow"])
        if scaling["truncate"]:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, head_dim - 1)
        if low == high:
            high += 0.001  # avoid 0 / 0 (HF)
        ramp = torch.clamp((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        keep = 1 - ramp  # weight of the original (extrapolated) frequency
        powers = base_powers(head_dim, base)
        extrapolated = 1.0 / powers
        interpolated = 1.0 / (factor * powers)
        return interpolated * (1 - keep) + extrapolated * keep, attention

    @classmethod
    def from_hf(cls, params: Mapping[str, Any], hf_type: str, max_position_embeddings: int) -> dict[str, Any]:
        values = super().from_hf(params, hf_type, max_position_embeddings)
        for key in ("beta_fast", "beta_slow"):
            if not values.get(key, True):
                del values[key]
        return factor_from_lengths(values, max_position_embeddings)


@register_scaling("llama3")
class Llama3Scaling(ScalingType):
    """Llama 3.1 (Meta 2024; HF `_compute_llama3_parameters`), banded by wavelength lambda_k = 2 pi / theta_k:
    below L_tr / high_freq_factor keep theta_k, above L_tr / low_freq_factor theta_k / s, between a linear blend."""

    summary = "Llama 3.1: wavelength-banded interpolation (low / high frequency factors)"
    params = (FACTOR, TRAINED, Option("low_freq_factor", 1.0, "float"), Option("high_freq_factor", 4.0, "float"))
    hf_type = "llama3"
    hf_required = ("factor", "low_freq_factor", "high_freq_factor")

    @classmethod
    def check(cls, scaling: RopeScaling, where: str) -> None:
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        if not 0 < low < high:
            raise ConfigError(
                f"{where}: need 0 < low_freq_factor < high_freq_factor (Llama 3.1: 1 and 4), got {low:g} and {high:g}"
            )

    @classmethod
    def frequencies(cls, scaling: RopeScaling, head_dim: int, base: float, seq_len: int | None) -> tuple[Tensor, float]:
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        train_len = scaling[TRAIN_LENGTH]
        inv_freq = rope_inv_freq(head_dim, base)
        wavelength = 2 * math.pi / inv_freq
        long_wave, short_wave = train_len / low, train_len / high
        scaled = torch.where(wavelength > long_wave, inv_freq / factor, inv_freq)
        sigma = (train_len / wavelength - low) / (high - low)
        blended = (1 - sigma) * scaled / factor + sigma * scaled
        middle = (wavelength >= short_wave) & (wavelength <= long_wave)
        return torch.where(middle, blended, scaled), 1.0


@register_scaling("longrope")
class LongRopeScaling(ScalingType):
    """LongRoPE (Ding 2024; HF `_compute_longrope_parameters`, Phi-3): inv_freq_k = 1 / (ext_k * b^(2k/D)).

    ext = long_factor when seq_len > L_tr, else short_factor (caches re-rotate when a sequence crosses L_tr).
    Attention factor: `attention_factor`, else sqrt(1 + ln s / ln L_tr) for s > 1, at every length, as HF; a missing
    factor is max_position_embeddings / L_tr."""

    summary = "LongRoPE (Ding 2024): per-dimension short / long rescale factors"
    params = (
        FACTOR,
        TRAINED,
        ATTENTION,
        Option("short_factor", Option.REQUIRED, "tuple[float, ...]"),
        Option("long_factor", Option.REQUIRED, "tuple[float, ...]"),
    )
    length_dependent = True
    hf_type = "longrope"
    hf_required = ("short_factor", "long_factor")

    @classmethod
    def check(cls, scaling: RopeScaling, where: str) -> None:
        if scaling["attention_factor"] is None and scaling["factor"] > 1 and scaling[TRAIN_LENGTH] < 2:
            raise ConfigError(
                f"{where}: the default attention factor divides by ln L_tr, so "
                "original_max_position_embeddings must be >= 2 (or give attention_factor)"
            )
        for name in ("short_factor", "long_factor"):
            if not scaling[name]:
                raise ConfigError(f"{where} needs {name}, a list of D/2 positive rescale factors")
            if not all(v > 0 for v in scaling[name]):
                raise ConfigError(f"{where}: every {name} entry must be positive and finite")

    @classmethod
    def check_head_dim(cls, scaling: RopeScaling, head_dim: int) -> None:
        for name in ("short_factor", "long_factor"):
            got = len(scaling[name])
            if got != head_dim // 2:
                raise ConfigError(
                    f"RoPE scaling 'longrope': {name} has {got} entries but head_dim {head_dim} needs "
                    f"{head_dim // 2} (one per rotated pair, D/2)"
                )

    @classmethod
    def frequencies(cls, scaling: RopeScaling, head_dim: int, base: float, seq_len: int | None) -> tuple[Tensor, float]:
        factor, train_len = scaling["factor"], scaling[TRAIN_LENGTH]
        attention = scaling["attention_factor"]
        if attention is None:
            attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(train_len))
        chosen = scaling["long_factor"] if seq_len and seq_len > train_len else scaling["short_factor"]
        ext = torch.tensor(chosen, dtype=torch.float32)
        return 1.0 / (ext * base_powers(head_dim, base)), attention

    @classmethod
    def from_hf(cls, params: Mapping[str, Any], hf_type: str, max_position_embeddings: int) -> dict[str, Any]:
        return factor_from_lengths(super().from_hf(params, hf_type, max_position_embeddings), max_position_embeddings)


#: the built-in types, in listing order (`SCALING_TYPES.names()` also holds the types plugins register later)
KNOWN_TYPES: tuple[str, ...] = tuple(SCALING_TYPES.names())
