"""Position schemes: one class per scheme, all behind `PositionScheme` and the `SCHEMES` registry."""

from lextra.positions import absolute, rotary, bias, coca  # noqa: F401, I001  (import order = listing order)
from lextra.positions.base import (
    SCHEMES,
    HeadDims,
    PositionScheme,
    build_scheme,
    register_scheme,
    split_scheme_spec,
)

__all__ = ["SCHEMES", "HeadDims", "PositionScheme", "build_scheme", "register_scheme", "split_scheme_spec"]
