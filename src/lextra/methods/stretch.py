"""Inference-time methods applied to a trained model: RoPE scalings, temperature alignment, log-n scaling and
the extension methods (`extend:NAME[:KEY=VALUE,...]`), each named as its registry names it; `METHOD_KINDS` pairs
each registry with the `InferenceSetup` its names stand for. `prepared(model, method, data, length)` returns a
copy with the method set up for inputs of `length` tokens."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lextra.errors import ConfigError
from lextra.extend import EXTENSIONS, ExtensionMethod, InferenceSetup, build_extension, check_scheme
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
    """Give a trained rotary model an inference-time RoPE scaling on the `layers` a selector names (default: rotary)."""
    return InferenceSetup(rope_scaling=spec, layers=layers).apply(model)


def extension_method(name: str, train_len: int, lengths: Sequence[int] = ()) -> ExtensionMethod:
    """The extension method a method name `extend:SPEC` stands for, checked against the longest of `lengths`."""
    if not name.startswith(EXTEND):
        raise ConfigError(f"{name!r} is not an extension method; write it as {EXTEND}NAME[:KEY=VALUE,...]")
    method = build_extension(name[len(EXTEND) :], train_len)
    if lengths:
        method.check_length(max(lengths))
    return method


@dataclass(frozen=True)
class Request:
    """What a method is set up for: model, calibration data and windows, input length, static scalings' factor."""

    model: GPT
    data: Any
    length: int
    factor: float
    windows: int = 2


def _extension_applies(model: GPT, method: str) -> bool:
    if not is_rotary(model):
        return False
    built = extension_method(method, model.config.train_len)
    try:
        for layer in range(model.config.n_layer):
            check_scheme(model.scheme_for(layer), built)
    except ConfigError:
        return False
    return True


def _rope_scaling(request: Request, method: str) -> InferenceSetup:
    factor = SCALING_TYPES.get(method).stretch_factor(request.factor)
    return InferenceSetup(rope_scaling={"rope_type": method, "factor": factor})


def _alignment(request: Request, method: str) -> InferenceSetup:
    """Temperatures calibrated at the request's length on the model itself; none at or below L_tr."""
    if request.length <= request.model.config.train_len:
        return InferenceSetup()
    alignment = align_temperatures(request.model, request.data, method, request.length, windows=request.windows)
    return InferenceSetup(temperatures=alignment.temperatures)


def _extension(request: Request, method: str) -> InferenceSetup:
    return InferenceSetup(extension=extension_method(method, request.model.config.train_len, [request.length]))


@dataclass(frozen=True)
class MethodKind:
    """One kind of inference-time method: its registry's names, the `InferenceSetup` one stands for and whether
    it applies to a model; a kind with a `prefix` owns every method named `PREFIX...`, offered only where asked for."""

    names: Callable[[], list[str]]
    setup: Callable[[Request, str], InferenceSetup]
    applies: Callable[[GPT, str], bool] = lambda model, method: True
    prefix: str | None = None

    def owns(self, method: str) -> bool:
        """Whether `method` is one of this kind's names."""
        return method.startswith(self.prefix) if self.prefix is not None else method in self.names()

    def shown(self) -> list[str]:
        """How `known_methods` lists the kind: its names, or its prefix's pattern and the names it takes."""
        if self.prefix is None:
            return self.names()
        return [f"{self.prefix}NAME[:KEY=VALUE,...] (NAME: {' | '.join(self.names())})"]


#: every kind of inference-time method, in the order they are listed
METHOD_KINDS: tuple[MethodKind, ...] = (
    MethodKind(lambda: ["none"], lambda request, method: InferenceSetup()),
    MethodKind(rope_scalings, _rope_scaling, lambda model, method: is_rotary(model)),
    MethodKind(lambda: list(TEMPERATURES), _alignment),
    MethodKind(log_scalings, lambda request, method: InferenceSetup(log_scaling=method)),
    MethodKind(EXTENSIONS.names, _extension, _extension_applies, EXTEND),
)


def method_kind(method: str) -> MethodKind:
    """The kind `method` is a name of; ConfigError for a name that is none of `known_methods()`."""
    for kind in METHOD_KINDS:
        if kind.owns(method):
            return kind
    raise ConfigError(f"unknown inference method {method!r}; choose one of {known_methods()}")


def methods_for(model: GPT, extensions: Sequence[str] = ()) -> list[str]:
    """none, the RoPE scalings, alignment and log-n scalings, then the `extend:...` methods the model takes."""
    offered = [kind for kind in METHOD_KINDS if kind.prefix is None]
    listed = [name for kind in offered for name in kind.names() if kind.applies(model, name)]
    return [*listed, *(method for method in extensions if method_kind(method).applies(model, method))]


def known_methods() -> str:
    """The method names `prepared` takes, for errors."""
    return ", ".join(name for kind in METHOD_KINDS for name in kind.shown())


def inference_setup(model: GPT, method: str, data: Any, length: int, factor: float, windows: int = 2) -> InferenceSetup:
    """The `InferenceSetup` `method` stands for on `model` at inputs of `length` tokens (alignment calibrated here)."""
    return method_kind(method).setup(Request(model, data, length, factor, windows), method)


def prepared(model: GPT, method: str, data: Any, length: int, factor: float, windows: int = 2) -> GPT:
    """A copy of `model` with `method` applied for inputs of `length` tokens (`inference_setup`)."""
    model = copy.deepcopy(model)
    return inference_setup(model, method, data, length, factor, windows).apply(model)
