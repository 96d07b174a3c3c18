"""Inference-time methods applied to a trained GPT: RoPE scalings, temperature alignment, log-n scaling, and the
training-free extension methods of `lextra.extend` (named `extend:NAME[:KEY=VALUE,...]`), each named as its registry
names it (`SCALING_TYPES`, the alignment `STRATEGIES`, `LOG_SCALINGS`, `EXTENSIONS`).

`methods_for(model)` lists what applies to a model; `prepared(model, method, data, length)` returns a copy with
the method set up for inputs of `length` tokens (alignment is calibrated at that length on validation windows).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from lextra.errors import ConfigError
from lextra.extend import ExtensionMethod, InferenceSetup, build_extension, check_scheme
from lextra.methods.align import STRATEGIES as TEMPERATURES
from lextra.methods.align import align_temperatures
from lextra.model import GPT
from lextra.positions.logn import log_scaling_names
from lextra.positions.rotary import RotaryFrequencies
from lextra.positions.scaling import SCALING_TYPES

#: prefix of an extension method's name among the methods: `extend:rerope`, `extend:self_extend:group=4`
EXTEND = "extend:"


def rope_scalings() -> list[str]:
    """The RoPE scaling types stretching tries (`ScalingType.stretch`, plugins' included), in registry order."""
    return [name for name in SCALING_TYPES.names() if SCALING_TYPES.get(name).stretch]


def log_scalings() -> list[str]:
    """The log-n scalings a trained model takes at inference (`LOG_SCALINGS` but `none` and the learned ones)."""
    return [name for name in log_scaling_names(inference=True) if name != "none"]


def is_rotary(model: GPT) -> bool:
    """Whether the model's scheme rotates q and k (rope, xpos, coca), so RoPE scalings apply."""
    return any(isinstance(scheme, RotaryFrequencies) for scheme in model.schemes)


def apply_rope_scaling(model: GPT, spec: str | dict[str, Any], layers: str | None = None) -> GPT:
    """Give a trained rope/xpos/coca model an inference-time frequency scaling (`yarn:4`, `dynamic:1`, a dict), on
    the `layers` a selector names (default: its rotary layers)."""
    return InferenceSetup(rope_scaling=spec, layers=layers).apply(model)


def methods_for(model: GPT, extensions: Sequence[str] = ()) -> list[str]:
    """none, the RoPE scalings (rope, xpos, coca models), temperature alignment and the log-n scalings, then the
    given `extend:...` methods where the model's scheme takes them."""
    rotary = is_rotary(model)
    taken = [m for m in extensions if rotary and _extension_applies(model, m)]
    return ["none", *(rope_scalings() if rotary else ()), *TEMPERATURES, *log_scalings(), *taken]


def extension_method(name: str, train_len: int, lengths: Sequence[int] = ()) -> ExtensionMethod:
    """The extension method a method name `extend:SPEC` stands for, checked against the longest of `lengths`."""
    if not name.startswith(EXTEND):
        raise ConfigError(f"{name!r} is not an extension method; write it as {EXTEND}NAME[:KEY=VALUE,...]")
    method = build_extension(name[len(EXTEND) :], train_len)
    if lengths:
        method.check_length(max(lengths))
    return method


def _extension_applies(model: GPT, name: str) -> bool:
    method = extension_method(name, model.config.train_len)
    try:
        for layer in range(model.config.n_layer):
            check_scheme(model.scheme_for(layer), method)
    except ConfigError:
        return False
    return True


def known_methods() -> str:
    """The method names `prepared` takes, for errors."""
    return ", ".join(["none", *rope_scalings(), *TEMPERATURES, *log_scalings(), f"{EXTEND}NAME[:KEY=VALUE,...]"])


def inference_setup(model: GPT, method: str, data: Any, length: int, factor: float, windows: int = 2) -> InferenceSetup:
    """The `InferenceSetup` that `method` stands for on `model` at inputs of `length` tokens (alignment is
    calibrated here, on `model` itself); ConfigError for a method name that is none of `known_methods()`."""
    if method == "none":
        return InferenceSetup()
    if method in rope_scalings():
        return InferenceSetup(
            rope_scaling={"rope_type": method, "factor": SCALING_TYPES.get(method).stretch_factor(factor)}
        )
    if method in TEMPERATURES:
        if length <= model.config.train_len:
            return InferenceSetup()
        alignment = align_temperatures(model, data, method, length, windows=windows)
        return InferenceSetup(temperatures=alignment.temperatures)
    if method in log_scalings():
        return InferenceSetup(log_scaling=method)
    if method.startswith(EXTEND):
        return InferenceSetup(extension=extension_method(method, model.config.train_len, [length]))
    raise ConfigError(f"unknown inference method {method!r}; choose one of {known_methods()}")


def prepared(model: GPT, method: str, data: Any, length: int, factor: float, windows: int = 2) -> GPT:
    """A copy of `model` with `method` applied for inputs of `length` tokens (`inference_setup`); static
    scalings use `factor`, dynamic NTK uses factor 1 (s = L / L_tr at every length)."""
    model = copy.deepcopy(model)
    return inference_setup(model, method, data, length, factor, windows).apply(model)
