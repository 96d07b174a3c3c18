"""Position schemes: one class per scheme, all behind `PositionScheme` and the `SCHEMES` registry."""

from lextra.positions import absolute, bias, coca, rotary  # noqa: F401  (registers the schemes)
from lextra.positions.base import SCHEMES, HeadDims, PositionScheme, build_scheme, register_scheme

__all__ = ["SCHEMES", "HeadDims", "PositionScheme", "build_scheme", "register_scheme"]
