"""Inference-time methods for a trained model: RoPE scalings, temperature alignment, log-n scaling."""

from lextra.methods.align import Alignment, align_temperatures, calibration_windows, log_length_temperature
from lextra.methods.stretch import ROPE_SCALINGS, TEMPERATURES, apply_rope_scaling, is_rotary, methods_for, prepared

__all__ = [
    "ROPE_SCALINGS",
    "TEMPERATURES",
    "Alignment",
    "align_temperatures",
    "apply_rope_scaling",
    "calibration_windows",
    "is_rotary",
    "log_length_temperature",
    "methods_for",
    "prepared",
]
