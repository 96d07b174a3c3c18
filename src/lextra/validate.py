"""Checks for numbers in options and configs, run before any work: each returns the value in its canonical type
or raises a one-line `ConfigError`; non-finite values, bools and strings are never numbers here."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import SupportsInt, cast

from lextra.errors import ConfigError

#: the largest finite float32: values that become tensors (initial parameters, scales) must stay below it
FLOAT32_MAX = 3.4028234663852886e38


def describe_range(
    low: float | None = None, high: float | None = None, *, low_open: bool = False, high_open: bool = False
) -> str:
    """The allowed interval in words: '> 0', '>= 1', '<= 2' or 'in [0, 1)'."""
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{_text(low)}, {_text(high)}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '>='} {_text(low)}"
    if high is not None:
        return f"{'<' if high_open else '<='} {_text(high)}"
    return "any value"


def _text(bound: float) -> str:
    return str(bound) if isinstance(bound, int) else f"{bound:g}"


def shown(value: object, limit: int = 40) -> str:
    """`repr(value)`, shortened to `limit` characters so that an error stays one readable line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _refuse(name: str, requirement: str, value: object, hint: str) -> ConfigError:
    return ConfigError(f"{name} must be {requirement}, got {shown(value)}" + (f"; {hint}" if hint else ""))


def _in_range(value: float, low: float | None, high: float | None, low_open: bool, high_open: bool) -> bool:
    if low is not None and (value <= low if low_open else value < low):
        return False
    return not (high is not None and (value >= high if high_open else value > high))


def _as_float(value: object) -> float | None:
    """A finite float for a real number that is not a bool, else None (nan, inf, 10**400, '1', True)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def check_finite(name: str, value: object, *, hint: str = "") -> float:
    """`value` as a float if it is a real, finite number (not a bool, a string, nan or +-inf)."""
    number = _as_float(value)
    if number is None:
        raise _refuse(name, "a finite number", value, hint)
    return number


def check_range(
    name: str,
    value: object,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    hint: str = "",
) -> float:
    """`value` as a float if it is finite and within [low, high] (either end open or absent)."""
    number = _as_float(value)
    if number is None or not _in_range(number, low, high, low_open, high_open):
        allowed = describe_range(low, high, low_open=low_open, high_open=high_open)
        if low is None or high is None:
            allowed = "a finite number" + ("" if low is high is None else f" {allowed}")
        raise _refuse(name, allowed, value, hint)
    return number


def check_positive(name: str, value: object, *, hint: str = "") -> float:
    """`value` as a float if it is finite and > 0."""
    return check_range(name, value, 0.0, low_open=True, hint=hint)


def check_int(name: str, value: object, low: int | None = None, high: int | None = None, *, hint: str = "") -> int:
    """`value` as an int if it is an integer (or an integral finite float such as 32.0) within [low, high]."""
    if low == 1 and high is None:
        requirement = "a positive integer"
    else:
        requirement = "an integer" + (f" {describe_range(low, high)}" if low is not None or high is not None else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _refuse(name, requirement, value, hint)
    if not isinstance(value, numbers.Integral):
        number = _as_float(value)
        if number is None or not number.is_integer():
            raise _refuse(name, requirement, value, hint)
    integer = int(cast(SupportsInt, value))
    if not _in_range(integer, low, high, False, False):
        raise _refuse(name, requirement, value, hint)
    return integer


def check_temperatures(values: object, layers: int, heads: int, *, what: str = "temperatures") -> list[list[float]]:
    """Per-layer, per-head softmax temperatures (nested lists, or anything with `tolist`, such as a tensor) as
    `layers` lists of `heads` floats, each finite and > 0."""
    rows = values.tolist() if hasattr(values, "tolist") else values
    shape_ok = isinstance(rows, list | tuple) and len(rows) == layers
    shape_ok = shape_ok and all(isinstance(r, list | tuple) and len(r) == heads for r in cast(list, rows))
    if not shape_ok:
        raise ConfigError(f"{what} must be {layers} lists of {heads} positive numbers (one per layer and head)")
    hint = "each is a softmax temperature"
    return [[check_positive(what, value, hint=hint) for value in row] for row in cast(list, rows)]


def check_positive_int(name: str, value: object, *, hint: str = "") -> int:
    """`value` as an int if it is an integer >= 1."""
    return check_int(name, value, 1, hint=hint)


def check_optional_int(name: str, value: object, low: int | None = None, *, hint: str = "") -> int | None:
    """None, or `value` as an int >= low."""
    return None if value is None else check_int(name, value, low, hint=hint)


def check_bool(name: str, value: object) -> bool:
    """`value` if it is True or False (so that a string such as 'false' is not read as True)."""
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be true or false, got {shown(value)}")
    return value


def check_int_list(name: str, values: Iterable[object], low: int | None = None) -> list[int]:
    """A non-empty list of integers >= low."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise ConfigError(f"{name} must be a list of integers, got {shown(values)}")
    items = list(values)
    if not items:
        raise ConfigError(f"{name} must list at least one integer, got {shown(values)}")
    return [check_int(name, item, low) for item in items]


def parse_lengths(text: str | None, minimum: int = 1, *, distinct: bool = False) -> list[int] | None:
    """The token counts of a `--lengths 512,1024` option, each >= `minimum`; None when none are given (the
    caller's defaults apply). `distinct` sorts them and drops repeats (analyses that tabulate by length)."""
    if not text:
        return None
    try:
        lengths = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        lengths = []
    if not lengths:
        raise ConfigError(f"--lengths takes comma-separated integers, got {text!r}")
    if any(n < minimum for n in lengths):
        allowed = "positive integers" if minimum == 1 else f"integers >= {minimum}"
        raise ConfigError(f"--lengths must be {allowed}, got {text!r}")
    return sorted(set(lengths)) if distinct else lengths
