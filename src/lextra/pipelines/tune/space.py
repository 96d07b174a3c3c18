"""What `lextra tune` searches: each method's settings as a few discrete values per parameter, scaled to the training
length L and the target length T (s = T / L), starting from the method's registry defaults. Every setup states both
the RoPE scaling and the extension method (null where unused), so a setup file reproduces what was measured."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from lextra.errors import ConfigError
from lextra.extend import InferenceSetup, build_extension
from lextra.positions.scaling import SCALING_TYPES

Values = dict[str, Any]


@dataclass(frozen=True)
class MethodSpace:
    """One method's search space: parameter -> the values tried, the authors' defaults, the setup of a set of
    values, and `valid(values)`, which rejects combinations the method refuses (e.g. Self-Extend too short for T)."""

    name: str
    params: dict[str, tuple[Any, ...]]
    defaults: Values
    setup: Callable[[Values], InferenceSetup]
    valid: Callable[[Values], bool] = lambda values: True

    def size(self) -> int:
        return math.prod(len(v) for v in self.params.values())


def _ints(*values: float, low: int = 1, high: int | None = None) -> tuple[int, ...]:
    """Distinct integers in the order given, clipped to [low, high]."""
    found: list[int] = []
    for v in values:
        n = max(low, int(v))
        n = n if high is None else min(n, high)
        if n not in found:
            found.append(n)
    return tuple(found)


def _fits(name: str, train_len: int, target: int, values: Values) -> bool:
    """Whether the method built with these values takes T tokens (and accepts the values at all)."""
    try:
        build_extension(name, train_len, **values).check_length(target)
    except ConfigError:
        return False
    return True


def _extension_space(name: str, params: dict[str, tuple[Any, ...]], L: int, T: int) -> MethodSpace:
    """An extension method's space: its setups are `NAME:k=v,...` with no RoPE scaling; valid if it reaches T. Its
    defaults are the method's own at L."""
    defaults = {key: value for key, value in build_extension(name, L).options.items() if key in params}

    def make(values: Values) -> InferenceSetup:
        return InferenceSetup(rope_scaling=None, extension=name + ":" + ",".join(f"{k}={v}" for k, v in values.items()))

    return MethodSpace(name, params, defaults, make, partial(_fits, name, L, T))


def _scaling_defaults(kind: str, keys: tuple[str, ...]) -> Values:
    """The declared defaults of a scaling type's options `keys`."""
    return {option.name: option.default for option in SCALING_TYPES.options(kind) if option.name in keys}


def self_extend_space(train_len: int, target: int) -> MethodSpace:
    L = train_len
    groups = tuple(g for g in (2, 4, 8, 16, 32, 64) if (L - L // 16) * g + L // 16 >= target) or (64,)
    windows = _ints(L // 16, L // 8, L // 4, L // 2, high=L - 1)
    return _extension_space("self_extend", {"group": groups, "window": windows}, L, target)


def dca_space(train_len: int, target: int) -> MethodSpace:
    L = train_len
    chunks = _ints(L // 2, 5 * L // 8, 3 * L // 4, 7 * L // 8, low=2, high=L)
    return _extension_space("dca", {"chunk": chunks, "local": _ints(L // 32, L // 16, L // 8)}, L, target)


def string_space(train_len: int, target: int) -> MethodSpace:
    L = train_len
    offsets = _ints(0.25 * L, 0.33 * L, 0.4 * L, 0.5 * L, low=2, high=L - 1)
    offset = build_extension("string", L).options["offset"]
    locals_ = _ints(32, 64, 128, 256, high=max(1, offset - 1))
    return _extension_space("string", {"offset": offsets, "local": locals_}, L, target)


def _scaling(values: Values, kind: str) -> InferenceSetup:
    options = {k: v for k, v in values.items() if v is not None}
    return InferenceSetup(rope_scaling={"rope_type": kind, **options}, extension=None)


def yarn_space(train_len: int, target: int) -> MethodSpace:
    s = max(1.0, target / train_len)
    factors = tuple(dict.fromkeys(round(max(1.0, f), 4) for f in (s, s / 2, 1.5 * s, 2 * s)))
    return MethodSpace(
        "yarn",
        {
            "factor": factors,
            "beta_fast": (32.0, 16.0, 64.0),
            "beta_slow": (1.0, 2.0),
            "attention_factor": (None, 1.0, round(1.0 + 0.2 * math.log(s), 4)),
        },
        {"factor": factors[0], **_scaling_defaults("yarn", ("beta_fast", "beta_slow", "attention_factor"))},
        lambda v: _scaling(v, "yarn"),
    )


def ntk_space(train_len: int, target: int) -> MethodSpace:
    """NTK-aware scaling, static (`ntk`, the base set once for s) or dynamic (the base follows the length)."""
    s = max(1.0, target / train_len)
    factors = tuple(dict.fromkeys(round(max(1.0, f), 4) for f in (s, s / 2, 2 * s, 4 * s)))

    def make(values: Values) -> InferenceSetup:
        kind = "dynamic" if values["dynamic"] else "ntk"
        return InferenceSetup(rope_scaling={"rope_type": kind, "factor": values["factor"]}, extension=None)

    return MethodSpace("ntk", {"dynamic": (False, True), "factor": factors}, {"dynamic": False, "factor": s}, make)


#: the grid/coordinate-searched methods; `longrope` is searched by `lextra.pipelines.tune.evolution`
SPACES: dict[str, Callable[[int, int], MethodSpace]] = {
    "self_extend": self_extend_space,
    "dca": dca_space,
    "string": string_space,
    "yarn": yarn_space,
    "ntk": ntk_space,
}
METHODS = (*SPACES, "longrope")


def parse_methods(text: str) -> list[str]:
    """`self_extend,yarn` -> the method names, each known (`all`: every one)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return list(METHODS)
    unknown = [n for n in names if n not in METHODS]
    if unknown or not names:
        raise ConfigError(
            f"--methods: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(METHODS)}"
        )
    return names
