"""`InferenceSetup`: everything inference changes on a trained model (RoPE scaling, temperatures, log-n scaling,
extension method, mask), checked, ordered and written into each layer's `LayerInference` by `apply`, the one
writer, for a lextra GPT and a Hugging Face adapter alike.

`layers` (`rotary`, `global`, `local`, `nope`, `all` or indices such as `0,3` or `2-4`) names the layers a change
applies to; by default each applies to the layers that can take it, and a named layer that cannot is refused:
"YaRN on the global layers only" is `InferenceSetup(rope_scaling="yarn:4", layers="global")`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

import torch

from lextra.attention.inference import LayerInference
from lextra.attention.masks import Mask, build_mask
from lextra.attention.pieces import PIECES, TemperatureTuning
from lextra.attention.plan import LayerVariant, select_layers
from lextra.errors import ConfigError
from lextra.extend.base import ExtensionMethod, build_extension
from lextra.positions.base import HeadDims
from lextra.positions.logn import LOG_SCALINGS, check_log_scaling, log_scaling_names
from lextra.positions.scaling import parse_rope_scaling
from lextra.validate import check_temperatures


class Keep(enum.Enum):
    """The value of a setup field that leaves the model's setting as it is."""

    KEEP = "keep"

    def __repr__(self) -> str:
        return "KEEP"


KEEP = Keep.KEEP


@runtime_checkable
class InferenceTarget(Protocol):
    """What `InferenceSetup.apply` writes and asks of a model: `variants` (each layer in plan vocabulary), `config`
    (`train_len`, `n_layer`, `n_head`, `head_dims()`, `temperatures`), each layer's `LayerInference`; the `_reason`
    methods say why a layer cannot take a change (None: it can)."""

    @property
    def variants(self) -> list[LayerVariant]: ...

    @property
    def config(self) -> Any: ...

    @property
    def inference_layers(self) -> list[LayerInference]: ...

    def _default_scaling_layers(self) -> list[int]: ...

    def _rotary_reason(self, layer: int) -> str | None: ...

    def _extension_reason(self, layer: int, method: ExtensionMethod) -> str | None: ...

    def _scale_rope(self, scaling: dict[str, Any] | None, layers: list[int]) -> None: ...

    def _rotation_changed(self) -> None: ...


ModelT = TypeVar("ModelT")


@dataclass(frozen=True)
class InferenceSetup:
    """What inference changes on a trained model; each field `KEEP` (the default) leaves it as it is.

    - `rope_scaling`: a spec (`yarn:4`, `dynamic:1`) or a `rope_parameters` dict; None removes it.
    - `temperatures`: (n_layer, n_head) positive softmax temperatures; None resets them to 1.
    - `log_scaling`: a name of `LOG_SCALINGS` ("none", "qwen"; "ssmax" where trained with `logn:ssmax`).
    - `extension`: an extension method (a spec such as `self_extend:group=4`, or built); None or "none" removes it.
    - `mask`: the mask on the layers without their own; None: the default.
    - `temp_tuning`: Llama 4's query temperature (`temp_tuning,beta=0.1,gamma=8192`), default on the NoPE layers.
    - `layers`: the layers the scaling, extension, log-n scaling and temperature tuning apply to (module
      docstring); None: the layers that can take each.
    """

    rope_scaling: str | dict[str, Any] | Keep | None = KEEP
    temperatures: Any = KEEP
    log_scaling: str | Keep = KEEP
    extension: str | ExtensionMethod | Keep | None = KEEP
    mask: str | Mask | Keep | None = KEEP
    temp_tuning: str | Keep | None = KEEP
    layers: str | None = None

    def changes(self) -> dict[str, Any]:
        """The fields this setup sets (not `KEEP`; `layers` when given)."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if getattr(self, f.name) is not KEEP and not (f.name == "layers" and self.layers is None)
        }

    @property
    def mask_spec(self) -> str | None:
        """The mask this setup sets, as results name it; None where it keeps or resets the model's."""
        if self.mask is KEEP or self.mask is None:
            return None
        return self.mask if isinstance(self.mask, str) else repr(self.mask)

    def apply(self, model: ModelT) -> ModelT:
        """Apply this setup to `model` in place (a lextra GPT or a Hugging Face adapter) and return it."""
        _apply(self, inference_target(model))
        return model


def inference_target(model: Any) -> InferenceTarget:
    """The `InferenceTarget` of a model: a Hugging Face adapter is one; a lextra GPT is wrapped."""
    from lextra.extend.gpt_target import GPTInferenceTarget
    from lextra.model import GPT

    if isinstance(model, GPT):
        return GPTInferenceTarget(model)
    if isinstance(model, InferenceTarget):
        return model
    raise ConfigError(
        f"an inference setup applies to a lextra GPT or a Hugging Face adapter (lextra.hf), not {type(model).__name__}"
    )


def setup_mask(model: Any) -> Mask | None:
    """The mask an inference setup set on `model`'s layers (None: the default), for putting it back."""
    return next((layer.mask for layer in inference_target(model).inference_layers if not layer.local), None)


def _chosen(
    target: InferenceTarget, selector: str | None, default: list[int], what: str, fits: Callable[[int], str | None]
) -> list[int]:
    """The layers `what` applies to: the selector's (each checked by `fits`), else the `default` layers that fit."""
    if selector is None:
        return [layer for layer in default if fits(layer) is None]
    chosen = select_layers(target.variants, selector)
    if not chosen:
        raise ConfigError(f"layer selector {selector!r} names no layer of this model; {what} applies to none")
    for layer in chosen:
        why = fits(layer)
        if why is not None:
            raise ConfigError(f"{what} cannot apply to layer {layer} ({why}); select other layers (--layers-select)")
    return chosen


def _any(layer: int) -> None:
    return None


def _apply(setup: InferenceSetup, target: InferenceTarget) -> None:
    """Each change on its layers, in an order that lets a setup swap a mask for an extension."""
    every = list(range(len(target.variants)))
    if setup.rope_scaling is not KEEP:
        _rope_scaling(setup, target)
    if setup.log_scaling is not KEEP:
        kind = check_log_scaling(str(setup.log_scaling))
        _set_log_scaling(target, kind, _chosen(target, setup.layers, every, "log-n scaling", _any))
    if setup.temp_tuning is not KEEP:
        nope = select_layers(target.variants, "nope")
        layers = _chosen(target, setup.layers, nope, "temp_tuning", _any)
        if not layers:
            raise ConfigError("temp_tuning applies to the NoPE layers by default and this model has none; name layers")
        tuning = _temp_tuning(setup.temp_tuning, target.config.head_dims())
        for layer in layers:
            target.inference_layers[layer].temp_tuning = tuning
    if setup.temperatures is not KEEP:
        _set_temperatures(target, setup.temperatures)
    if setup.extension is not KEEP and setup.extension in (None, "none"):
        _set_extension(target, None, [])
    if setup.mask is not KEEP:
        _set_mask(setup, target)
    if setup.extension is not KEEP and setup.extension not in (None, "none"):
        _add_extension(setup, target, setup.extension)


def _set_log_scaling(target: InferenceTarget, kind: str, layers: list[int]) -> None:
    """The log-n scaling `kind` on `layers`; a learned one (a layer's trained `logn:ssmax`) is kept or refused."""
    for layer in layers:
        current = target.inference_layers[layer].log_scaling
        learned = kind if LOG_SCALINGS.get(kind).learned else current
        if LOG_SCALINGS.get(kind).learned != LOG_SCALINGS.get(current).learned:
            others = " or ".join(map(repr, log_scaling_names(inference=True)))
            raise ConfigError(
                f"{learned} is a learned per-head scale: a layer trained with log-n scaling {current!r} "
                f"cannot switch to {kind!r}; train with the piece logn:{learned} in its plan, or use {others}"
            )
    for layer in layers:
        target.inference_layers[layer].log_scaling = kind


def _set_temperatures(target: InferenceTarget, temperatures: Any) -> None:
    """Per-layer, per-head softmax temperatures (n_layer, n_head), recorded in the config; None resets them."""
    config = target.config
    rows: list[Any] = [None] * config.n_layer
    config.temperatures = None
    if temperatures is not None:
        values = torch.tensor(
            check_temperatures(temperatures, config.n_layer, config.n_head), dtype=torch.float32, device="cpu"
        )
        rows, config.temperatures = list(values), values.tolist()
    for layer, row in zip(target.inference_layers, rows, strict=True):
        layer.temperature = row


def _set_extension(target: InferenceTarget, method: ExtensionMethod | None, layers: list[int]) -> None:
    """`method` on `layers`, no method on the others (None: on none)."""
    for index, layer in enumerate(target.inference_layers):
        layer.extension = method if index in layers else None
    target._rotation_changed()


def _rope_scaling(setup: InferenceSetup, target: InferenceTarget) -> None:
    """The scaling on the selected rotary layers (default: the target's); None removes it there."""
    spec = cast("str | dict[str, Any] | None", setup.rope_scaling)
    scaling = None if spec is None else parse_rope_scaling(spec) if isinstance(spec, str) else dict(spec)
    layers = _chosen(target, setup.layers, target._default_scaling_layers(), "rope scaling", target._rotary_reason)
    if not layers:
        if scaling is None:
            return  # nothing to remove
        raise ConfigError(
            f"rope scaling applies to rope, xpos and coca models, not {target.variants[0].scheme!r}: "
            f"layer 0: {target._rotary_reason(0)}"
        )
    target._scale_rope(scaling, layers)


def _set_mask(setup: InferenceSetup, target: InferenceTarget) -> None:
    """The mask of every layer without its own; None: the model's default."""
    mask = None if setup.mask is None else build_mask(cast("str | Mask", setup.mask), target.config.train_len)
    extended = any(layer.extension is not None for layer in target.inference_layers)
    if extended and mask is not None and not mask.exactly_causal:
        raise ConfigError(f"an extension method sets its own visibility over causal attention; drop the mask {mask!r}")
    for layer in target.inference_layers:
        if not layer.local:
            layer.mask = mask


def _add_extension(setup: InferenceSetup, target: InferenceTarget, spec: str | ExtensionMethod) -> None:
    built = build_extension(spec, target.config.train_len)

    def takes(layer: int) -> str | None:
        return target._extension_reason(layer, built)

    layers = _chosen(target, setup.layers, select_layers(target.variants, "all"), f"extension {built.name!r}", takes)
    if not layers:
        reasons: dict[str, int] = {}
        for layer in range(len(target.variants)):
            reasons.setdefault(str(takes(layer)), layer)
        why = "; ".join(f"layer {layer}: {reason}" for reason, layer in reasons.items())
        raise ConfigError(f"extension {built.name!r} applies to no layer of this model: {why}")
    current = next((layer.mask for layer in target.inference_layers if not layer.local), None)  # the setup's
    if current is not None and not current.exactly_causal:
        raise ConfigError(
            f"extension {built.name!r} sets its own visibility over causal attention; drop the mask {current!r}"
        )
    _set_extension(target, built, layers)


def _temp_tuning(spec: str | Keep | None, dims: HeadDims) -> TemperatureTuning | None:
    """The temperature tuning a spec states (None or "none": none)."""
    if spec in (None, "none"):
        return None
    name, options = PIECES.parse(str(spec))
    if name != "temp_tuning":
        raise ConfigError(f"temp_tuning takes a spec such as 'temp_tuning,beta=0.1,gamma=8192', got {spec!r}")
    return TemperatureTuning(dims, **options)
