"""Inference-time methods for a trained model: RoPE scalings, temperature alignment, log-n scaling, extensions."""

from lextra.extend import KEEP, InferenceSetup
from lextra.methods.align import Alignment, align_temperatures, calibration_windows, log_length_temperature
from lextra.methods.stretch import (
    EXTEND,
    TEMPERATURES,
    apply_rope_scaling,
    extension_method,
    inference_setup,
    is_rotary,
    known_methods,
    methods_for,
    prepared,
    rope_scalings,
)

__all__ = [
    "EXTEND",
    "KEEP",
    "TEMPERATURES",
    "Alignment",
    "InferenceSetup",
    "align_temperatures",
    "apply_rope_scaling",
    "calibration_windows",
    "extension_method",
    "inference_setup",
    "is_rotary",
    "known_methods",
    "log_length_temperature",
    "methods_for",
    "prepared",
    "rope_scalings",
]
