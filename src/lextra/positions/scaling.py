"""RoPE frequency scalings: a `RopeScaling` is Hugging Face's `rope_parameters` checked and complete; each
type is one `ScalingType` entry of `SCALING_TYPES` (as HF's `ROPE_INIT_FUNCTIONS`) mapping it to inverse
frequencies (D/2,) fp32 and the cos/sin factor. Specs: `yarn:4`, `yarn:4,beta_fast=16`, `linear,factor=2`, or a
JSON object of `rope_parameters`."""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor

from lextra.errors import ConfigError
from lextra.registry import Option, Registry

#: the largest extension ratio accepted: far past any published extension, and the NTK bases stay finite below it
MAX_FACTOR = 1e6
#: the key of the training length L_tr, which a scheme fills with its own when the type declares it
TRAIN_LENGTH = "original_max_position_embeddings"


class ScalingType(ABC):
    """Base class of the `SCALING_TYPES` registry: one RoPE scaling type, never instantiated. It declares its
    parameters (`params`), whether it depends on the length, its HF `rope_type` (`hf_type`), and `frequencies`."""

    name: ClassVar[str] = "scaling"
    summary: ClassVar[str] = ""
    #: the type's parameters with their defaults, in listing order (its spec options; every other key is refused)
    params: ClassVar[tuple[Option, ...]] = ()
    #: a bare `TYPE:VALUE` spec sets this parameter
    positional: ClassVar[str | None] = "factor"
    #: the frequencies change with the sequence length: caches of rotated keys must be re-rotated
    length_dependent: ClassVar[bool] = False
    #: Hugging Face's rope_type for this type, or None when HF has none
    hf_type: ClassVar[str | None] = None
    #: further Hugging Face rope_types `from_hf` reads as this type
    hf_reads: ClassVar[tuple[str, ...]] = ()
    #: the keys a Hugging Face dict of this type must hold (HF requires them too)
    hf_required: ClassVar[tuple[str, ...]] = ()
    #: the head dimension the type needs at least
    min_head_dim: ClassVar[int] = 2
    #: the inference-time methods (`lextra.methods.stretch`: a study's `[stretch]` section) try this type
    stretch: ClassVar[bool] = False
    #: how `lextra list` describes options derived from the model
    derived_defaults: ClassVar[dict[str, str]] = {TRAIN_LENGTH: "L_tr"}

    @classmethod
    def spec_options(cls) -> list[Option]:
        """The declared parameters: the spec options `SCALING_TYPES.parse` types and checks."""
        return list(cls.params)

    @classmethod
    def declares(cls, key: str) -> bool:
        """Whether `key` is one of this type's parameters."""
        return any(option.name == key for option in cls.params)

    @classmethod
    def stretch_factor(cls, ratio: float) -> float:
        """The factor the inference-time methods set for inputs `ratio` times L_tr (the ratio itself here)."""
        return ratio

    @classmethod
    def check(cls, scaling: RopeScaling, where: str) -> None:
        """Checks of this type's own parameters beyond their types and the shared ones (factor, attention_factor)."""
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
    def from_hf(cls, params: Mapping[str, Any], hf_type: str, max_position_embeddings: int) -> dict[str, Any]:
        """The lextra parameters a Hugging Face dict of `hf_type` states: its declared keys as they are (None: the
        default), and the training length HF takes from `max_position_embeddings` when the dict lacks it."""
        for key in cls.hf_required:
            if params.get(key) is None:
                raise ConfigError(
                    f"Hugging Face rope_scaling (rope_type {hf_type!r}) needs {key!r} (Hugging Face requires it too)"
                )
        values: dict[str, Any] = {"rope_type": cls.name}
        values.update({o.name: params[o.name] for o in cls.params if params.get(o.name) is not None})
        if cls.declares(TRAIN_LENGTH):
            values.setdefault(TRAIN_LENGTH, max_position_embeddings)
        return values

    @classmethod
    def to_hf(cls, scaling: RopeScaling) -> dict[str, Any]:
        """The Hugging Face keys of this scaling besides rope_type and rope_theta: its parameters but None."""
        return {key: value for key, value in scaling.items() if key != "rope_type" and value is not None}


SCALING_TYPES: Registry[ScalingType] = Registry("RoPE scaling", modules=("lextra.positions.scaling_types",))


def register_scaling(name: str, *, aliases: tuple[str, ...] = ()) -> Callable[[type[ScalingType]], type[ScalingType]]:
    """Class decorator: register a scaling type in `SCALING_TYPES` after the built-in ones (so they list first)."""
    SCALING_TYPES.fill()
    return SCALING_TYPES.register(name, aliases=aliases)


class RopeScaling(Mapping[str, Any]):
    """A RoPE scaling: Hugging Face `rope_parameters` (`rope_type` and its type's parameters), checked and complete.

    `RopeScaling("yarn", factor=4, original_max_position_embeddings=2048)` or `RopeScaling(**rope_parameters)`;
    defaults are filled in, unknown keys refused, lists become tuples, so equal scalings compare and hash equal."""

    __slots__ = ("_values",)
    _values: dict[str, Any]

    def __init__(self, rope_type: str | None = None, /, **params: Any) -> None:
        named = [t for t in (rope_type, params.pop("rope_type", None), params.pop("type", None)) if t is not None]
        if (
            len({SCALING_TYPES.canonical(t) if isinstance(t, str) and t in SCALING_TYPES else repr(t) for t in named})
            > 1
        ):
            raise ConfigError(f"RoPE scaling: rope_type given twice, as {' and '.join(map(repr, named))}")
        name = named[0] if named else "none"
        if not isinstance(name, str) or name not in SCALING_TYPES:
            raise ConfigError(
                f"unknown RoPE scaling type {name!r}; known types: {', '.join(SCALING_TYPES.names())} "
                "(Hugging Face's 'default' is lextra's 'none')"
            )
        kind = SCALING_TYPES.get(name)
        where = f"RoPE scaling {kind.name!r}"
        object.__setattr__(self, "_values", {"rope_type": kind.name, **_typed(kind, params, where)})
        _check_shared(self, where)
        kind.check(self, where)

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RopeScaling) and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(self._values.items()))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("RopeScaling is immutable; build a new one")

    def __getstate__(self) -> dict[str, Any]:
        return self._values

    def __setstate__(self, state: dict[str, Any]) -> None:  # copy and pickle: the values were checked when built
        object.__setattr__(self, "_values", dict(state))

    def __repr__(self) -> str:
        return f"RopeScaling({self._values!r})"

    @property
    def rope_type(self) -> str:
        """The type's registered name ("none", "linear", "yarn", ...)."""
        return str(self._values["rope_type"])

    @property
    def kind(self) -> type[ScalingType]:
        """The type's registry entry (its checks, frequencies and Hugging Face mapping)."""
        return SCALING_TYPES.get(self.rope_type)


def _typed(kind: type[ScalingType], given: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The type's declared parameters, in declaration order, from `given` (defaults filled in), each checked
    against its annotation; a key the type does not declare, or a required one missing, is refused."""
    declared = {option.name: option for option in kind.params}
    stray = [key for key in given if key not in declared]
    if stray:
        reads = ", ".join(declared) or "no parameters"
        raise ConfigError(f"{where} does not use {', '.join(stray)}; it reads {reads}")
    values = {}
    for name, option in declared.items():
        value = given.get(name, option.default)
        if value is Option.REQUIRED:
            what = "the training length L_tr" if name == TRAIN_LENGTH else option.annotation
            raise ConfigError(f"{where} needs {name} ({what})")
        values[name] = _typed_value(f"{where}: {name}", value, option.annotation)
    return values


def _typed_value(what: str, value: Any, annotation: str) -> Any:
    """`value` as its annotation says ("float", "int", "bool", "tuple[float, ...]", each maybe "| None")."""
    words = {word.strip() for word in annotation.split("|")}
    if value is None and "None" in words:
        return None
    if "bool" in words:
        if not isinstance(value, bool):
            raise ConfigError(f"{what} must be True or False, got {value!r}")
        return value
    if "int" in words:
        integral = isinstance(value, int | float) and math.isfinite(value) and value == int(value)
        if isinstance(value, bool) or not integral or value < 1:
            raise ConfigError(f"{what} must be a positive integer, got {value!r}")
        return int(value)
    if any(word.startswith(("tuple", "list")) for word in words):
        values = value.tolist() if isinstance(value, Tensor) else value
        if isinstance(values, str | bytes) or not isinstance(values, Sequence):
            raise ConfigError(f"{what} must be a list of numbers, got {value!r}")
        return tuple(_number(what, v) for v in values)
    if "float" in words:
        return _number(what, value)
    return value


def _number(what: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{what} must be a finite number, got {value!r}")
    return float(value)


def _check_shared(scaling: RopeScaling, where: str) -> None:
    """The keys Hugging Face gives one meaning in every type: factor, the extension ratio in [1, MAX_FACTOR], and
    attention_factor, a positive cos/sin multiplier."""
    factor = scaling.get("factor")
    if factor is not None and factor < 1.0:
        raise ConfigError(
            f"{where}: factor must be >= 1 (the extension ratio L_ex / L_tr), got {factor:g}; "
            "use type 'none' for no scaling"
        )
    if factor is not None and factor > MAX_FACTOR:
        raise ConfigError(f"{where}: factor must be <= {MAX_FACTOR:g} (the extension ratio), got {factor:g}")
    attention = scaling.get("attention_factor")
    if attention is not None and not attention > 0:
        raise ConfigError(f"{where}: attention_factor must be positive, got {attention:g}")


def rope_inv_freq(head_dim: int, base: float = 10000.0, device: torch.device | None = None) -> Tensor:
    """theta_k = base^(-2k/D), k = 0..D/2-1, in fp32 (the same arithmetic as Hugging Face's default RoPE)."""
    exponent = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim
    return 1.0 / (base**exponent)


def check_head_dim(scaling: RopeScaling, head_dim: int) -> None:
    """Checks that need the head dimension: even, at least the type's `min_head_dim` (4 for the NTK family),
    and the type's own (D/2 longrope factors)."""
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 2 or head_dim % 2:
        raise ConfigError(f"RoPE scaling needs an even positive head dimension, got {head_dim!r}")
    kind = scaling.kind
    if head_dim < kind.min_head_dim:
        raise ConfigError(
            f"RoPE scaling {scaling.rope_type!r} uses the exponent D/(D-2) and needs head_dim >= {kind.min_head_dim}"
        )
    kind.check_head_dim(scaling, head_dim)


def frequencies(
    scaling: RopeScaling, head_dim: int, base: float = 10000.0, seq_len: int | None = None
) -> tuple[Tensor, float]:
    """The scaled inverse frequencies (D/2,) fp32 and the cos/sin multiplier for `seq_len` positions (None: at
    most L_tr), equal to Hugging Face's `ROPE_INIT_FUNCTIONS[rope_type]` bit for bit."""
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


def scaling_type_of(values: Mapping[str, Any]) -> str:
    """The type a `rope_parameters` dict names (`rope_type`, else the legacy `type`; "none" when neither)."""
    return str(values.get("rope_type", values.get("type", "none")))


def parse_rope_scaling(spec: str) -> dict[str, Any]:
    """A scaling spec as `rope_parameters`: `yarn:4` -> {"rope_type": "yarn", "factor": 4.0}, `yarn:4,beta_fast=16`,
    `linear,factor=2`, `pi:2` (= linear), `none` -> {"rope_type": "none"}; a JSON object is taken as it is."""
    if spec.lstrip().startswith("{"):
        try:
            return dict(json.loads(spec))
        except (json.JSONDecodeError, TypeError, ValueError):
            raise ConfigError(f"rope scaling {spec!r} is not a JSON object") from None
    name, options = SCALING_TYPES.parse(spec)
    if SCALING_TYPES.get(name).declares("factor"):
        factor = options.setdefault("factor", 1.0)
        if not factor > 0:
            raise ConfigError(f"rope scaling {spec!r}: the factor must be a finite number > 0")
    return {"rope_type": name, **options}
