"""RoPE frequency scalings for length extrapolation: PI, NTK-aware, dynamic NTK, YaRN, Llama 3, LongRoPE.

A registry in the style of Hugging Face's `modeling_rope_utils.py` (`ROPE_INIT_FUNCTIONS`): each type is one small
`ScalingType` class in `SCALING_TYPES` that declares the `RopeScaling` fields it reads, checks them, maps
`(scaling, head_dim, base, seq_len)` to the scaled inverse frequencies (D/2,) in fp32 and the factor by which cos
and sin are multiplied (HF's `attention_scaling`; the attention logits therefore carry its square), and reads and
writes Hugging Face's `rope_scaling` dicts. `RopeScaling` is the value every caller builds and saves; it dispatches
to its type's class. The rope, xpos and coca schemes share it.

Every variant repeats Hugging Face's fp32 arithmetic operation for operation (transformers 5.24), so the
frequencies are bit-identical to `ROPE_INIT_FUNCTIONS[type](config, seq_len=...)`; `tests/test_scaling.py` checks
this. Where the papers and HF disagree, HF is followed and the difference is named in the variant's docstring.

Types (lextra name -> Hugging Face `rope_type`):
- "none": plain RoPE, theta_k = base^(-2k/D) ("default").
- "linear" (alias "pi"): position interpolation (Chen et al. 2023, arXiv 2306.15595), theta_k / factor ("linear").
- "ntk": NTK-aware static scaling (bloc97 2023, a Reddit post; no paper), base' = base * factor^(D/(D-2)).
  HF has no such type.
- "dynamic": dynamic NTK (emozilla 2023, a Reddit post; no paper), base' recomputed from the current length
  ("dynamic").
- "yarn": YaRN (Peng et al. 2023, arXiv 2309.00071), per-dimension ramp between extrapolation and interpolation
  ("yarn").
- "llama3": Llama 3.1's wavelength-banded interpolation ("llama3").
- "longrope": LongRoPE (Ding et al. 2024, arXiv 2402.13753) per-dimension rescale factors, short and long sets
  ("longrope").

Specs: `yarn:4` (the positional is the factor), `yarn:4,beta_fast=16`, `linear,factor=2`, or a JSON object of
`RopeScaling` fields.
"""

from __future__ import annotations

import math
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeAlias

import torch
from torch import Tensor

from lextra.errors import ConfigError
from lextra.registry import Option, Registry

#: the largest extension ratio accepted: far past any published extension, and the NTK bases stay finite below it
MAX_FACTOR = 1e6
#: a scaling type's class (`RopeScaling.kind`; inside RopeScaling, `type` is the field)
ScalingKind: TypeAlias = "type[ScalingType]"


@dataclass(frozen=True)
class RopeScaling:
    """A RoPE frequency scaling and its parameters, with the papers' / Hugging Face defaults.

    Attributes:
        type: a name in `SCALING_TYPES` ("none", "linear" (or "pi"), "ntk", "dynamic", "yarn", "llama3", "longrope").
        factor: the extension ratio s = L_ex / L_tr (>= 1); for "dynamic" the slope of its growth past L_tr.
        original_max_position_embeddings: the training length L_tr; required by dynamic, yarn, llama3, longrope.
        attention_factor: yarn / longrope: the cos/sin multiplier; None uses the method's default formula.
        beta_fast, beta_slow: yarn: ramp boundaries in rotations over L_tr (Peng 2023: 32 and 1).
        mscale, mscale_all_dim: yarn (DeepSeek style): if both are non-zero and `attention_factor` is None, the
            attention factor is `mscale(s, mscale) / mscale(s, mscale_all_dim)` with
            `mscale(s, m) = 0.1 m ln s + 1` (HF's rule; one of them alone is ignored, as in HF).
        truncate: yarn: round the ramp bounds outwards to integers (floor / ceil), HF's default True.
        low_freq_factor, high_freq_factor: llama3 wavelength bands (Llama 3.1: 1 and 4).
        short_factor, long_factor: longrope per-dimension rescale factors, D/2 each (stored as tuples).

    Fields a type does not read (its class's `uses`) must keep their defaults, so that a misplaced parameter fails
    loudly. The type's class (`kind`) holds the checks, the frequencies and the Hugging Face mapping.
    """

    type: str = "none"
    factor: float = 1.0
    original_max_position_embeddings: int | None = None
    attention_factor: float | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    short_factor: tuple[float, ...] | None = None
    long_factor: tuple[float, ...] | None = None
    #: the parameters the type declares beyond these fields (`ScalingType.params`), as sorted (name, value) pairs;
    #: read as attributes (`scaling.alpha`); `RopeScaling.of` builds them from a flat dict
    params: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.type, str) or self.type not in SCALING_TYPES:
            raise ConfigError(
                f"unknown RoPE scaling type {self.type!r}; known types: {', '.join(SCALING_TYPES.names())} "
                "(Hugging Face's 'default' is lextra's 'none')"
            )
        object.__setattr__(self, "type", SCALING_TYPES.canonical(self.type))
        where = f"RoPE scaling {self.type!r}"
        self._fill_params(where)
        self._normalise_numbers(where)
        self._check_unused(where)
        kind = self.kind
        if self.type == "none" and not kind.uses:
            return
        if self.factor < 1.0:
            raise ConfigError(
                f"{where}: factor must be >= 1 (the extension ratio L_ex / L_tr), got {self.factor:g}; "
                "use type 'none' for no scaling"
            )
        if self.factor > MAX_FACTOR:
            raise ConfigError(f"{where}: factor must be <= {MAX_FACTOR:g} (the extension ratio), got {self.factor:g}")
        if kind.needs_train_length and self.original_max_position_embeddings is None:
            raise ConfigError(
                f"{where} needs original_max_position_embeddings, the training length L_tr "
                "(Hugging Face: rope_scaling['original_max_position_embeddings'], or max_position_embeddings)"
            )
        if self.attention_factor is not None and not self.attention_factor > 0:
            raise ConfigError(f"{where}: attention_factor must be positive, got {self.attention_factor:g}")
        kind.check(self, where)

    @property
    def kind(self) -> ScalingKind:
        """The class of this scaling's type (its checks, frequencies and Hugging Face mapping)."""
        return SCALING_TYPES.get(self.type)

    def _normalise_numbers(self, where: str) -> None:
        """Coerce numbers to float / int and factor lists to tuples (hashable, comparable after a round trip)."""

        def number(name: str, value: Any) -> float:
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ConfigError(f"{where}: {name} must be a finite number, got {value!r}")
            return float(value)

        for name in ("factor", "beta_fast", "beta_slow", "low_freq_factor", "high_freq_factor"):
            object.__setattr__(self, name, number(name, getattr(self, name)))
        for name in ("attention_factor", "mscale", "mscale_all_dim"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, number(name, getattr(self, name)))
        length = self.original_max_position_embeddings
        if length is not None:
            integral = isinstance(length, int | float) and math.isfinite(length) and length == int(length)
            if isinstance(length, bool) or not integral or length < 1:
                raise ConfigError(
                    f"{where}: original_max_position_embeddings must be a positive integer, got {length!r}"
                )
            object.__setattr__(self, "original_max_position_embeddings", int(length))
        if not isinstance(self.truncate, bool):
            raise ConfigError(f"{where}: truncate must be True or False, got {self.truncate!r}")
        for name in ("short_factor", "long_factor"):
            values = getattr(self, name)
            if values is not None:
                if isinstance(values, Tensor):
                    values = values.tolist()
                if isinstance(values, str | bytes) or not isinstance(values, Sequence):
                    raise ConfigError(f"{where}: {name} must be a list of numbers, got {values!r}")
                object.__setattr__(self, name, tuple(number(name, v) for v in values))

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> RopeScaling:
        """A RopeScaling from a flat dict (a saved `scaling` option, a parsed spec, JSON): RopeScaling's fields, and
        the parameters the type declares (`ScalingType.params`) gathered into `params`; any other key is refused,
        naming what the type reads."""
        values = dict(values)
        params = dict(values.pop("params", None) or ())
        extra = {key: values.pop(key) for key in list(values) if key not in _FIELDS}
        if extra and params:
            raise ConfigError(f"RoPE scaling {values.get('type')!r}: give its parameters flat or in params, not both")
        return cls(**values, params=tuple((params or extra).items()))

    def __getattr__(self, name: str) -> Any:
        """A declared parameter of the type (`ScalingType.params`) by name."""
        if not name.startswith("__"):
            for key, value in object.__getattribute__(self, "params"):
                if key == name:
                    return value
        raise AttributeError(f"RoPE scaling has no parameter {name!r}")

    def as_dict(self) -> dict[str, Any]:
        """The flat dict `RopeScaling.of` reads back: the type, its fields that differ from the defaults, and its
        declared parameters."""
        out: dict[str, Any] = {"type": self.type}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name not in ("type", "params") and value != f.default:
                out[f.name] = list(value) if isinstance(value, tuple) else value
        out.update(self.params)
        return out

    def _fill_params(self, where: str) -> None:
        """`params` as the type declares them: defaults filled in, sorted by name; an undeclared one is refused."""
        declared = {option.name: option for option in self.kind.params}
        given = dict(self.params) if isinstance(self.params, tuple | list) else dict(self.params or {})
        unknown = sorted(set(given) - set(declared))
        if unknown:
            reads = ", ".join(sorted(self.kind.uses | set(declared))) or "no parameters"
            raise ConfigError(f"{where} has no parameter {', '.join(unknown)}; it reads {reads}")
        for name, option in declared.items():
            value = given.get(name, option.default)
            if value is Option.REQUIRED:
                raise ConfigError(f"{where} needs {name} ({option.annotation})")
            given[name] = value
        object.__setattr__(self, "params", tuple(sorted(given.items())))

    def _check_unused(self, where: str) -> None:
        """Reject non-default values in fields this type never reads (a typo or a parameter on the wrong type)."""
        used = self.kind.uses
        stray = [
            f.name
            for f in fields(self)
            if f.name not in used | {"type", "params"} and getattr(self, f.name) != f.default
        ]
        if stray:
            reads = ", ".join(sorted(used)) or "no parameters"
            raise ConfigError(f"{where} does not use {', '.join(stray)}; it reads {reads}")


_FIELDS = {f.name: f for f in fields(RopeScaling) if f.name != "params"}
#: keys every Hugging Face rope dict may hold whatever its type
_HF_COMMON = frozenset({"rope_type", "type", "rope_theta", "partial_rotary_factor"})
#: how `ScalingType.from_hf` asks for a key Hugging Face requires (ConfigError naming it when missing)
Need = Callable[[str], Any]


class ScalingType(ABC):
    """Base class of the `SCALING_TYPES` registry: one RoPE scaling type, never instantiated.

    A type declares the `RopeScaling` fields it reads (`uses`; these are its spec options), whether it needs the
    training length and changes with the sequence length, its Hugging Face `rope_type` (`hf_type`, None when HF
    has none), and defines `frequencies`; `check`, `check_head_dim`, `from_hf` and `to_hf` have defaults that fit
    a type whose parameters map one to one onto Hugging Face keys.
    """

    name: ClassVar[str] = "scaling"
    summary: ClassVar[str] = ""
    #: the RopeScaling fields this type reads (every other field must keep its default)
    uses: ClassVar[frozenset[str]] = frozenset()
    #: the type's own parameters that RopeScaling has no field for (name, default, annotation): spec options,
    #: validated by `check`, read as `scaling.NAME`, saved flat beside the fields
    params: ClassVar[tuple[Option, ...]] = ()
    #: a study's `[stretch]` section (`lextra.methods.stretch`) tries the type with the factor `stretch_factor` gives
    stretch: ClassVar[bool] = False
    #: a bare `TYPE:VALUE` spec sets this field
    positional: ClassVar[str | None] = "factor"
    #: the type needs original_max_position_embeddings (L_tr); a scheme fills it with its training length
    needs_train_length: ClassVar[bool] = False
    #: the frequencies change with the sequence length: caches of rotated keys must be re-rotated
    length_dependent: ClassVar[bool] = False
    #: Hugging Face's rope_type for this type, or None when HF has none
    hf_type: ClassVar[str | None] = None
    #: further Hugging Face rope_types `from_hf` reads as this type
    hf_reads: ClassVar[tuple[str, ...]] = ()
    #: the head dimension the type needs at least
    min_head_dim: ClassVar[int] = 2
    #: how `lextra list` describes options derived from the model
    derived_defaults: ClassVar[dict[str, str]] = {"original_max_position_embeddings": "L_tr"}

    @classmethod
    def spec_options(cls) -> list[Option]:
        """The fields of `uses`, in RopeScaling's order, with their annotations and defaults, then the type's own
        `params` (the spec options)."""
        out = []
        for name, f in _FIELDS.items():
            if name in cls.uses:
                annotation = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
                out.append(Option(name, f.default, annotation))
        return [*out, *cls.params]

    @classmethod
    def stretch_factor(cls, ratio: float) -> float:
        """The factor a study's `[stretch]` section sets for inputs `ratio` times L_tr (the ratio itself here)."""
        return ratio

    @classmethod
    def check(cls, scaling: RopeScaling, where: str) -> None:
        """Checks of this type's own fields beyond the common ones (factor, L_tr, attention_factor); none here."""
        return

    @classmethod
    def check_head_dim(cls, scaling: RopeScaling, head_dim: int) -> None:
        """Checks that need the head dimension (beyond it being even and >= `min_head_dim`); none here."""
        return

    @classmethod
    @abstractmethod
    def frequencies(cls, scaling: RopeScaling, head_dim: int, base: float, seq_len: int | None) -> tuple[Tensor, float]:
        """The scaled inverse frequencies (D/2,) fp32 and the cos/sin multiplier."""

    @classmethod
    def hf_keys(cls, hf_type: str) -> frozenset[str]:
        """The keys of a Hugging Face dict of `hf_type` this type reads (others are ignored with a warning)."""
        return cls.uses

    @classmethod
    def from_hf(cls, params: Mapping[str, Any], need: Need, hf_type: str, max_position_embeddings: int) -> RopeScaling:
        """The RopeScaling a Hugging Face dict of this type describes (default: every used key, L_tr defaulting
        to max_position_embeddings)."""
        values = {key: params[key] for key in cls.uses if params.get(key) is not None}
        if "factor" in cls.uses:
            values["factor"] = need("factor")
        if cls.needs_train_length:
            values["original_max_position_embeddings"] = hf_train_length(params, max_position_embeddings)
        return RopeScaling(cls.name, **values)

    @classmethod
    def to_hf(cls, scaling: RopeScaling) -> dict[str, Any]:
        """The Hugging Face keys of this scaling besides rope_type and rope_theta (default: every used field
        not None)."""
        return {key: getattr(scaling, key) for key in _FIELDS if key in cls.uses and getattr(scaling, key) is not None}


def hf_train_length(params: Mapping[str, Any], max_position_embeddings: int) -> int:
    """L_tr of a Hugging Face rope dict: its original_max_position_embeddings, else the config's length."""
    return params.get("original_max_position_embeddings") or max_position_embeddings


def hf_factor(params: Mapping[str, Any], train_len: int, max_position_embeddings: int) -> float:
    """The dict's factor, else the extension ratio the config states (max_position_embeddings / L_tr)."""
    factor = params.get("factor")
    return max_position_embeddings / train_len if factor is None else factor


SCALING_TYPES: Registry[ScalingType] = Registry("RoPE scaling")

register_scaling = SCALING_TYPES.register


# ---------------------------------------------------------------- helpers


def rope_inv_freq(head_dim: int, base: float = 10000.0, device: torch.device | None = None) -> Tensor:
    """theta_k = base^(-2k/D), k = 0..D/2-1, in fp32 (the same arithmetic as Hugging Face's default RoPE)."""
    exponent = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim
    return 1.0 / (base**exponent)


def _base_powers(head_dim: int, base: float) -> Tensor:
    """base^(2k/D) in fp32, the same arithmetic as HF (so `1.0 / _base_powers(D, b)` == `rope_inv_freq(D, b)`)."""
    return base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim)


def ntk_base(factor: float, head_dim: int, base: float) -> float:
    """NTK-aware base b' = b * s^(D/(D-2)) (bloc97 2023): the lowest frequency is divided by s, the highest kept.

    Also the exact Hugging Face equivalent of lextra's "ntk": rope_type "default" with `rope_theta = ntk_base(...)`.
    """
    return base * factor ** (head_dim / (head_dim - 2))


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's cos/sin multiplier `0.1 * mscale * ln(s) + 1` (1 for s <= 1); logits carry its square (Peng 2023)."""
    if factor <= 1:
        return 1.0
    return 0.1 * mscale * math.log(factor) + 1.0


def check_head_dim(scaling: RopeScaling, head_dim: int) -> None:
    """Checks that need the head dimension: even, at least the type's `min_head_dim` (4 for the NTK family),
    and the type's own (D/2 longrope factors)."""
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 2 or head_dim % 2:
        raise ConfigError(f"RoPE scaling needs an even positive head dimension, got {head_dim!r}")
    kind = scaling.kind
    if head_dim < kind.min_head_dim:
        raise ConfigError(
            f"RoPE scaling {scaling.type!r} uses the exponent D/(D-2) and needs head_dim >= {kind.min_head_dim}"
        )
    kind.check_head_dim(scaling, head_dim)


# ---------------------------------------------------------------- the types


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
    uses = frozenset({"factor"})
    stretch = True
    hf_type = "linear"
    hf_reads = ("proportional",)

    @classmethod
    def frequencies(cls, scaling: RopeScaling, head_dim: int, base: float, seq_len: int | None) -> tuple[Tensor, float]:
        return rope_inv_freq(head_dim, base) / scaling.factor, 1.0

    @classmethod
    def from_hf(cls, params: Mapping[str, Any], need: Need, hf_type: str, max_position_embeddings: int) -> RopeScaling:
        if hf_type == "proportional":  # with the whole head rotated it is theta / factor, HF's "linear"
            factor = params.get("factor", 1.0)
            return RopeScaling() if factor == 1 else RopeScaling("linear", factor=factor)
        return RopeScaling("linear", factor=need("factor"))


@register_scaling("ntk")
class NtkScaling(ScalingType):
    """NTK-aware static scaling (bloc97 2023): base' = base * s^(D/(D-2)), positions unchanged, no attention factor.

    Hugging Face has no such type; its exact equivalent is rope_type "default" with `rope_theta = ntk_base(...)`.
    """

    summary = "NTK-aware static scaling (bloc97 2023): base * s^(D/(D-2)); no Hugging Face type"
    uses = frozenset({"factor"})
    min_head_dim = 4
    stretch = True

    @classmethod
    def frequencies(cls, scaling: RopeScaling, head_dim: int, base: float, seq_len: int | None) -> tuple[Tensor, float]:
        return rope_inv_freq(head_dim, ntk_base(scaling.factor, head_dim, base)), 1.0

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

    For the current length l = max(seq_len, L_tr) (L_tr when seq_len is None):
    base' = base * (s * l / L_tr - (s - 1))^(D/(D-2)), i.e. the static NTK base for the effective ratio
    s_eff = 1 + s (l / L_tr - 1): plain RoPE up to L_tr, then growing s times faster than l / L_tr
    (s_eff reaches s at l = (2 - 1/s) L_tr, not at s L_tr). The YaRN paper's "Dynamic NTK" uses
    s_eff = max(1, l / L_tr) instead (no `factor`); the two agree only for factor 1. We follow HF, which reads L_tr
    from the model's `max_position_embeddings`. The base is computed in Python float64 from an integer seq_len,
    as HF's init path; HF's forward passes seq_len as a tensor and forms the base in fp32, which differs from this
    by about 2e-7 relative.
    """

    summary = "dynamic NTK (emozilla 2023): the NTK base recomputed from the current length"
    uses = frozenset({"factor", "original_max_position_embeddings"})
    needs_train_length = True
    length_dependent = True
    hf_type = "dynamic"
    min_head_dim = 4
    stretch = True

    @classmethod
    def stretch_factor(cls, ratio: float) -> float:
        """1: the base grows with the current length itself, at its unscaled slope."""
        return 1.0

    @classmethod
    def frequencies(cls, scaling: RopeScaling, head_dim: int, base: float, seq_len: int | None) -> tuple[Tensor, float]:
        train_len = scaling.original_max_position_embeddings
        assert train_len is not None  # RopeScaling requires it of this type
        length = train_len if seq_len is None else max(seq_len, train_len)
        factor = scaling.factor
        dynamic_base = base * ((factor * length / train_len) - (factor - 1)) ** (head_dim / (head_dim - 2))
        return rope_inv_freq(head_dim, dynamic_base), 1.0

    @classmethod
    def from_hf(cls, params: Mapping[str, Any], need: Need, hf_type: str, max_position_embeddings: int) -> RopeScaling:
        given = params.get("original_max_position_embeddings")
        if given is not None and given != max_position_embeddings:
            warnings.warn(
                f"Hugging Face rope_scaling (rope_type {hf_type!r}): Hugging Face's dynamic NTK uses "
                f"max_position_embeddings={max_position_embeddings} as the training length and ignores "
                f"original_max_position_embeddings={given}; so does lextra",
                stacklevel=3,
            )
        return RopeScaling("dynamic", factor=need("factor"), original_max_position_embeddings=max_position_embeddings)

    @classmethod
    def to_hf(cls, scaling: RopeScaling) -> dict[str, Any]:
        return {"factor": scaling.factor}  # HF reads L_tr from the model's max_position_embeddings


@register_scaling("yarn")
class YarnScaling(ScalingType):
    """YaRN (Peng 2023), as Hugging Face's `_compute_yarn_parameters`.

    The ramp runs over the pair index k between the dimensions where a wavelength fits beta_fast and beta_slow
    times into L_tr: `dim(beta) = D ln(L_tr / (2 pi beta)) / (2 ln b)`, low = dim(beta_fast), high = dim(beta_slow),
    rounded outwards when `truncate` and clamped to [0, D-1] (HF and the YaRN authors' released code clamp to D-1, not
    D/2-1). `ramp_k = clamp((k - low) / (high - low), 0, 1)` (high += 0.001 when equal);
    `inv_freq_k = theta_k / s * ramp_k + theta_k * (1 - ramp_k)`: k <= low (high frequencies) keep theta_k,
    k >= high are divided by s. The interpolated frequency is computed as 1 / (s * b^(2k/D)), as HF does.
    Attention factor: `attention_factor`, else the mscale ratio (see RopeScaling), else 0.1 ln s + 1; logits get
    its square, the paper's sqrt(1/t) = 0.1 ln s + 1 applied to both q and k.
    """

    summary = "YaRN (Peng 2023): per-dimension ramp between extrapolation and interpolation, attention factor"
    stretch = True
    uses = frozenset(
        {
            "factor",
            "original_max_position_embeddings",
            "attention_factor",
            "beta_fast",
            "beta_slow",
            "mscale",
            "mscale_all_dim",
            "truncate",
        }
    )
    needs_train_length = True
    hf_type = "yarn"

    @classmethod
    def check(cls, scaling: RopeScaling, where: str) -> None:
        if not 0 < scaling.beta_slow <= scaling.beta_fast:
            raise ConfigError(
                f"{where}: need 0 < beta_slow <= beta_fast (defaults 1 and 32), "
                f"got beta_slow={scaling.beta_slow:g}, beta_fast={scaling.beta_fast:g}"
            )

    @classmethod
    def frequencies(cls, scaling: RopeScaling, head_dim: int, base: float, seq_len: int | None) -> tuple[Tensor, float]:
        factor = scaling.factor
        train_len = scaling.original_max_position_embeddings
        assert train_len is not None  # RopeScaling requires it of this type
        attention = scaling.attention_factor
        if attention is None:
            if scaling.mscale and scaling.mscale_all_dim:
                attention = float(yarn_mscale(factor, scaling.mscale) / yarn_mscale(factor, scaling.mscale_all_dim))
            else:
                attention = yarn_mscale(factor)

        def correction_dim(rotations: float) -> float:
            # the pair index whose wavelength fits `rotations` times into L_tr (same operation order as HF)
            return (head_dim * math.log(train_len / (rotations * 2 * math.pi))) / (2 * math.log(base))

        low, high = correction_dim(scaling.beta_fast), correction_dim(scaling.beta_slow)
        if scaling.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, head_dim - 1)
        if low == high:
            high += 0.001  # avoid 0 / 0 (HF)
        ramp = torch.clamp((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        keep = 1 - ramp  # weight of the original (extrapolated) frequency

        powers = _base_powers(head_dim, base)
        extrapolated = 1.0 / powers
        interpolated = 1.0 / (factor * powers)
        return interpolated * (1 - keep) + extrapolated * keep, attention

    @classmethod
    def from_hf(cls, params: Mapping[str, Any], need: Need, hf_type: str, max_position_embeddings: int) -> RopeScaling:
        train_len = hf_train_length(params, max_position_embeddings)
        return RopeScaling(
            "yarn",
            factor=hf_factor(params, train_len, max_position_embeddings),
            original_max_position_embeddings=train_len,
            attention_factor=params.get("attention_factor"),
            beta_fast=params.get("beta_fast") or 32.0,
            beta_slow=params.get("beta_slow") or 1.0,
            mscale=params.get("mscale"),
            mscale_all_dim=params.get("mscale_all_dim"),
            truncate=params.get("truncate", True),
        )


@register_scaling("llama3")
class Llama3Scaling(ScalingType):
    """Llama 3.1 (Meta 2024; HF `_compute_llama3_parameters`), banded by wavelength lambda_k = 2 pi / theta_k.

    lambda_k < L_tr / high_freq_factor: keep theta_k; lambda_k > L_tr / low_freq_factor: theta_k / s; in between
    blend `(1 - sigma) theta_k / s + sigma theta_k` with `sigma = (L_tr / lambda_k - low) / (high - low)`.
    No attention factor.
    """

    summary = "Llama 3.1: wavelength-banded interpolation (low / high frequency factors)"
    uses = frozenset({"factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"})
    needs_train_length = True
    hf_type = "llama3"

    @classmethod
    def check(cls, scaling: RopeScaling, where: str) -> None:
        if not 0 < scaling.low_freq_factor < scaling.high_freq_factor:
            raise ConfigError(
                f"{where}: need 0 < low_freq_factor < high_freq_factor (Llama 3.1: 1 and 4), "
                f"got {scaling.low_freq_factor:g} and {scaling.high_freq_factor:g}"
            )

    @classmethod
    def frequencies(cls, scaling: RopeScaling, head_dim: int, base: float, seq_len: int | None) -> tuple[Tensor, float]:
        factor, low, high = scaling.factor, scaling.low_freq_factor, scaling.high_freq_factor
        train_len = scaling.original_max_position_embeddings
        assert train_len is not None  # RopeScaling requires it of this type
        inv_freq = rope_inv_freq(head_dim, base)
        wavelength = 2 * math.pi / inv_freq
        long_wave, short_wave = train_len / low, train_len / high
        scaled = torch.where(wavelength > long_wave, inv_freq / factor, inv_freq)
        sigma = (train_len / wavelength - low) / (high - low)
        blended = (1 - sigma) * scaled / factor + sigma * scaled
        middle = (wavelength >= short_wave) & (wavelength <= long_wave)
        return torch.where(middle, blended, scaled), 1.0

    @classmethod
    def from_hf(cls, params: Mapping[str, Any], need: Need, hf_type: str, max_position_embeddings: int) -> RopeScaling:
        return RopeScaling(
            "llama3",
            factor=need("factor"),
            original_max_position_embeddings=hf_train_length(params, max_position_embeddings),
            low_freq_factor=need("low_freq_factor"),
            high_freq_factor=need("high_freq_factor"),
        )


@register_scaling("longrope")
class LongRopeScaling(ScalingType):
    """LongRoPE (Ding 2024; HF `_compute_longrope_parameters`, Phi-3): inv_freq_k = 1 / (ext_k * b^(2k/D)).

    ext = long_factor when seq_len > L_tr, else short_factor (also when seq_len is None), so caches must be
    re-rotated when a sequence crosses L_tr. Attention factor: `attention_factor`, else
    sqrt(1 + ln s / ln L_tr) for s > 1 (1 otherwise), applied at every length, as HF and Phi-3 do. It multiplies
    cos and sin, so the logits carry its square, 1 + ln s / ln L_tr (a "logits scaled by sqrt(...)" reading is off).
    A missing factor is max_position_embeddings / L_tr in HF (`from_hf` does the same).
    """

    summary = "LongRoPE (Ding 2024): per-dimension short / long rescale factors"
    uses = frozenset({"factor", "original_max_position_embeddings", "attention_factor", "short_factor", "long_factor"})
    needs_train_length = True
    length_dependent = True
    hf_type = "longrope"

    @classmethod
    def check(cls, scaling: RopeScaling, where: str) -> None:
        too_short = (scaling.original_max_position_embeddings or 0) < 2
        if scaling.attention_factor is None and scaling.factor > 1 and too_short:
            raise ConfigError(
                f"{where}: the default attention factor divides by ln L_tr, so "
                "original_max_position_embeddings must be >= 2 (or give attention_factor)"
            )
        for name in ("short_factor", "long_factor"):
            values = getattr(scaling, name)
            if not values:
                raise ConfigError(f"{where} needs {name}, a list of D/2 positive rescale factors")
            if not all(v > 0 for v in values):
                raise ConfigError(f"{where}: every {name} entry must be positive and finite")

    @classmethod
    def check_head_dim(cls, scaling: RopeScaling, head_dim: int) -> None:
        for name in ("short_factor", "long_factor"):
            got = len(getattr(scaling, name) or ())
            if got != head_dim // 2:
                raise ConfigError(
                    f"RoPE scaling 'longrope': {name} has {got} entries but head_dim {head_dim} needs "
                    f"{head_dim // 2} (one per rotated pair, D/2)"
                )

    @classmethod
    def frequencies(cls, scaling: RopeScaling, head_dim: int, base: float, seq_len: int | None) -> tuple[Tensor, float]:
        train_len = scaling.original_max_position_embeddings
        assert train_len is not None  # RopeScaling requires it of this type
        attention = scaling.attention_factor
        if attention is None:
            factor = scaling.factor
            attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(train_len))
        chosen = scaling.long_factor if seq_len and seq_len > train_len else scaling.short_factor
        ext = torch.tensor(chosen, dtype=torch.float32)
        return 1.0 / (ext * _base_powers(head_dim, base)), attention

    @classmethod
    def from_hf(cls, params: Mapping[str, Any], need: Need, hf_type: str, max_position_embeddings: int) -> RopeScaling:
        train_len = hf_train_length(params, max_position_embeddings)
        return RopeScaling(
            "longrope",
            factor=hf_factor(params, train_len, max_position_embeddings),
            original_max_position_embeddings=train_len,
            attention_factor=params.get("attention_factor"),
            short_factor=need("short_factor"),
            long_factor=need("long_factor"),
        )


#: the built-in types, in listing order (`SCALING_TYPES.names()` also holds types registered later)
KNOWN_TYPES: tuple[str, ...] = tuple(SCALING_TYPES.names())


def frequencies(
    scaling: RopeScaling, head_dim: int, base: float = 10000.0, seq_len: int | None = None
) -> tuple[Tensor, float]:
    """The scaled inverse frequencies (D/2,) fp32 and the cos/sin multiplier for a sequence of `seq_len` tokens.

    `seq_len` (the number of positions in use, max position + 1) matters only for `depends_on_length` types;
    None means "at most L_tr". The result equals Hugging Face's `ROPE_INIT_FUNCTIONS[rope_type]` bit for bit.
    """
    if not isinstance(scaling, RopeScaling):
        raise ConfigError(f"expected a RopeScaling, got {type(scaling).__name__}")
    check_head_dim(scaling, head_dim)
    if not base > 1:
        raise ConfigError(f"RoPE base must be > 1, got {base!r}")
    if seq_len is not None:
        seq_len = int(seq_len)
        if seq_len < 0:
            raise ConfigError(f"seq_len must be >= 0, got {seq_len}")
    inv_freq, attention = scaling.kind.frequencies(scaling, head_dim, float(base), seq_len)
    return inv_freq, float(attention)


def depends_on_length(scaling: RopeScaling) -> bool:
    """True when the frequencies change with the sequence length (dynamic, longrope): caches of rotated keys
    must be re-rotated (or kept unrotated) when the length crosses L_tr / grows."""
    return scaling.kind.length_dependent


# ---------------------------------------------------------------- Hugging Face rope_scaling dicts


def _hf_readers() -> dict[str, type[ScalingType]]:
    """Hugging Face rope_type -> the type that reads it: each type's `hf_type` first, then its `hf_reads`."""
    classes = [SCALING_TYPES.get(name) for name in SCALING_TYPES.names()]
    readers = {cls.hf_type: cls for cls in classes if cls.hf_type}
    for cls in classes:
        readers.update({t: cls for t in cls.hf_reads if t not in readers})
    return readers


def from_hf(
    rope_scaling: Mapping[str, Any] | None, *, head_dim: int, base: float, max_position_embeddings: int
) -> RopeScaling:
    """Read a Hugging Face `rope_scaling` / `rope_parameters` dict (transformers 4.x or 5.x) as HF 5.24 would.

    - the type comes from `rope_type`, else the legacy `type`; "default" (or None / {}) is "none";
      "proportional" with `partial_rotary_factor` 1 is read as "linear" (same frequencies), "none" for factor 1.
    - `original_max_position_embeddings` defaults to `max_position_embeddings` (yarn, llama3, longrope), and a
      missing yarn / longrope `factor` to `max_position_embeddings / original_max_position_embeddings`, as HF.
    - dynamic: HF takes L_tr from the model's `max_position_embeddings` and ignores any
      `original_max_position_embeddings` in the dict; so do we (with a warning if they differ).
    - yarn: `beta_fast` / `beta_slow` that are missing or 0 become 32 / 1 (HF's `or`), `truncate` defaults to True.
    - keys the type does not use are ignored with a warning, as HF does; `partial_rotary_factor` != 1 and
      `mrope_section` are refused (lextra rotates the whole head), as is a `rope_theta` different from `base`.
    A model-level `original_max_position_embeddings` attribute (Phi-3) is outside the dict: put it in first.
    Each type's class reads its own keys (`ScalingType.from_hf`).
    """
    params = dict(rope_scaling or {})
    hf_type = params.get("rope_type", params.get("type", "default"))
    readers = _hf_readers()
    if hf_type not in readers:
        raise ConfigError(
            f"Hugging Face rope_type {hf_type!r} is not supported; lextra reads {', '.join(readers)}"
            + (" (lextra's 'ntk' has no HF type)" if hf_type == "ntk" else "")
        )
    kind = readers[hf_type]
    where = f"Hugging Face rope_scaling (rope_type {hf_type!r})"
    partial = params.get("partial_rotary_factor")
    if partial is not None and partial != 1:
        raise ConfigError(f"{where}: partial_rotary_factor={partial} is not supported; lextra rotates the whole head")
    if params.get("mrope_section") is not None:
        raise ConfigError(f"{where}: multimodal RoPE (mrope_section) is not supported")
    theta = params.get("rope_theta")
    if theta is not None and float(theta) != float(base):
        raise ConfigError(f"{where}: rope_theta={theta} differs from base={base}; pass base={theta}")
    ignored = sorted(set(params) - kind.hf_keys(hf_type) - _HF_COMMON - {"mrope_section"})
    if ignored:
        warnings.warn(f"{where}: ignoring keys it does not use: {', '.join(ignored)}", stacklevel=2)

    def need(key: str) -> Any:
        if params.get(key) is None:
            raise ConfigError(f"{where} needs {key!r} (Hugging Face requires it too)")
        return params[key]

    scaling = kind.from_hf(params, need, hf_type, max_position_embeddings)
    check_head_dim(scaling, head_dim)
    return scaling


def to_hf(scaling: RopeScaling, *, base: float | None = None) -> dict[str, Any]:
    """A Hugging Face `rope_parameters` dict (5.x; also a valid 4.x `rope_scaling`) for this scaling.

    Optional fields left at None are omitted (HF then applies the same defaults); `base` adds `rope_theta`.
    For "dynamic", HF reads L_tr from the model config's `max_position_embeddings`, not from this dict: set it to
    `scaling.original_max_position_embeddings`. "ntk" has no HF type and raises; its exact HF equivalent is
    rope_type "default" with `rope_theta = ntk_base(factor, head_dim, base)`.
    """
    kind = scaling.kind
    keys = kind.to_hf(scaling)  # raises for a type Hugging Face lacks (ntk)
    if kind.hf_type is None:
        raise ConfigError(f"RoPE scaling {scaling.type!r} has no Hugging Face rope_type")
    out: dict[str, Any] = {"rope_type": kind.hf_type}
    if base is not None:
        out["rope_theta"] = float(base)
    out.update({key: list(value) if isinstance(value, tuple) else value for key, value in keys.items()})
    return out


def parse_rope_scaling(spec: str) -> dict[str, Any]:
    """A scaling spec as RopeScaling fields: `yarn:4` -> {"type": "yarn", "factor": 4.0}, `yarn:4,beta_fast=16`,
    `linear,factor=2`, `pi:2` (= linear), `none` -> {"type": "none"}; a JSON object is taken as it is."""
    import json

    if spec.lstrip().startswith("{"):
        try:
            return dict(json.loads(spec))
        except (json.JSONDecodeError, TypeError, ValueError):
            raise ConfigError(f"rope scaling {spec!r} is not a JSON object") from None
    name, options = SCALING_TYPES.parse(spec)
    if "factor" in SCALING_TYPES.get(name).uses:
        factor = options.setdefault("factor", 1.0)
        if not factor > 0:
            raise ConfigError(f"rope scaling {spec!r}: the factor must be a finite number > 0")
    return {"type": name, **options}


__all__ = [
    "KNOWN_TYPES",
    "SCALING_TYPES",
    "RopeScaling",
    "ScalingType",
    "check_head_dim",
    "depends_on_length",
    "frequencies",
    "from_hf",
    "ntk_base",
    "parse_rope_scaling",
    "register_scaling",
    "to_hf",
    "yarn_mscale",
]
