"""`InferenceSetup`: everything inference changes on a trained model, applied in one place.

A trained model runs at inference with a RoPE scaling, softmax temperatures, a log-n scaling, a training-free
extension method and a mask. An `InferenceSetup` states any of them (a field left at `KEEP` stays as the model
has it) and `setup.apply(model)` applies them the same way to a lextra `GPT` and to a Hugging Face adapter
(`lextra.hf`, through its `apply_setup`), refusing what the model cannot take with a ConfigError.

On a lextra GPT with a layer plan, `layers` names the layers the RoPE scaling, the extension method, the log-n
scaling and the temperature tuning apply to (`rotary`, `global`, `local`, `nope`, `all` or indices such as `0,3`
or `2-4`); by default each applies to the layers that can take it (rotary layers for a scaling or an extension
method, every layer for a log-n scaling, the NoPE layers for temperature tuning, as Llama 4), and a layer named
that cannot take it is refused (Self-Extend on a NoPE layer), so "YaRN on the global layers only" is
`InferenceSetup(rope_scaling="yarn:4", layers="global")`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

from lextra.attention.masks import Mask, build_mask
from lextra.attention.pieces import PIECES, TemperatureTuning
from lextra.attention.plan import select_layers
from lextra.errors import ConfigError
from lextra.extend.attention import apply_extension
from lextra.extend.base import ExtensionMethod, build_extension, check_scheme
from lextra.model import GPT, Block
from lextra.positions.rotary import RotaryFrequencies
from lextra.positions.scaling import parse_rope_scaling


class Keep(enum.Enum):
    """The value of a setup field that leaves the model's setting as it is."""

    KEEP = "keep"

    def __repr__(self) -> str:
        return "KEEP"


KEEP = Keep.KEEP
#: log-n scalings of a lextra GPT ("ssmax" is learned: only a model trained with it has it)
GPT_LOG_SCALINGS = ("none", "qwen", "ssmax")


@runtime_checkable
class SetupTarget(Protocol):
    """A model that applies an `InferenceSetup` itself (the Hugging Face adapters)."""

    def apply_setup(self, setup: InferenceSetup) -> None: ...


ModelT = TypeVar("ModelT")


@dataclass(frozen=True)
class InferenceSetup:
    """What inference changes on a trained model; each field `KEEP` (the default) leaves it as it is.

    - `rope_scaling`: a spec (`yarn:4`, `dynamic:1`) or a dict of RopeScaling fields; None removes it.
    - `temperatures`: (n_layer, n_head) positive softmax temperatures; None resets them to 1.
    - `log_scaling`: "none" or "qwen" (and "ssmax" on a GPT trained with it).
    - `extension`: a training-free extension method (a spec such as `self_extend:group=4`, or built); None or
      "none" removes it.
    - `mask`: the mask calls use when they name none (causal, window:W, bca[:B], full); None: the default.
    - `temp_tuning`: Llama 4's query temperature (`temp_tuning,beta=0.1,gamma=8192`) on the selected layers
      (default the NoPE ones, as Llama 4); None or "none" removes it there.
    - `layers`: which layers of a lextra GPT the scaling, extension, log-n scaling and temperature tuning
      apply to (module docstring); None: the layers that can take each.
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

    def scaling_dict(self) -> dict[str, Any] | None:
        """`rope_scaling` as a dict of RopeScaling fields (None: no scaling); only when it is set."""
        spec = self.rope_scaling
        if spec is KEEP:
            raise ConfigError("this setup leaves the rope scaling as it is")
        if spec is None:
            return None
        return parse_rope_scaling(spec) if isinstance(spec, str) else dict(spec)

    def apply(self, model: ModelT) -> ModelT:
        """Apply this setup to `model` in place (a lextra GPT or a Hugging Face adapter) and return it."""
        if isinstance(model, GPT):
            _apply_to_gpt(self, model)
        elif isinstance(model, SetupTarget):
            model.apply_setup(self)
        else:
            raise ConfigError(
                f"an inference setup applies to a lextra GPT or a Hugging Face adapter (lextra.hf), not "
                f"{type(model).__name__}"
            )
        return model


def _chosen(model: GPT, selector: str | None, default: str, what: str, fits: Any) -> list[int]:
    """The layers `what` applies to: the selector's (each checked by `fits(layer)`, which returns why a layer cannot
    take it, or None), else the `default` kind's layers that can take it."""
    if selector is None:
        return [layer for layer in select_layers(model.variants, default) if fits(layer) is None]
    chosen = select_layers(model.variants, selector)
    if not chosen:
        raise ConfigError(f"layer selector {selector!r} names no layer of this model; {what} applies to none")
    for layer in chosen:
        why = fits(layer)
        if why is not None:
            raise ConfigError(f"{what} cannot apply to layer {layer} ({why}); select other layers (--layers-select)")
    return chosen


def _apply_to_gpt(setup: InferenceSetup, model: GPT) -> None:
    """RoPE scaling, then log scaling, temperatures, mask, temperature tuning and extension (checked against the
    scaled schemes), each on its layers."""
    if setup.rope_scaling is not KEEP:
        _set_rope_scaling(model, setup)
    if setup.log_scaling is not KEEP:
        _set_log_scaling(model, setup.log_scaling, _chosen(model, setup.layers, "all", "log-n scaling", _any))
    if setup.temp_tuning is not KEEP:
        layers = _chosen(model, setup.layers, "nope", "temp_tuning", _any)
        if not layers:
            raise ConfigError("temp_tuning applies to the NoPE layers by default and this model has none; name layers")
        _set_temp_tuning(model, setup.temp_tuning, layers)
    if setup.temperatures is not KEEP:
        model.set_temperatures(setup.temperatures)
    if setup.extension is not KEEP and setup.extension in (None, "none"):
        apply_extension(model, None)
    if setup.mask is not KEEP:
        mask = build_mask(setup.mask, model.config.train_len)
        if any(cast(Block, block).attn.extension is not None for block in model.blocks) and not mask.exactly_causal:
            raise ConfigError(
                f"an extension method sets its own visibility over causal attention; drop the mask {mask!r}"
            )
        model.mask = None if setup.mask is None else mask
    if setup.extension is not KEEP and setup.extension not in (None, "none"):
        if model.mask is not None and not model.mask.exactly_causal:
            raise ConfigError(
                f"extension {setup.extension!r} sets its own visibility over causal attention; drop the mask "
                f"{model.mask!r}"
            )
        built = build_extension(setup.extension, model.config.train_len)

        def takes(layer: int) -> str | None:
            try:
                check_scheme(model.scheme_for(layer), built)
            except ConfigError:
                return f"its scheme {model.variants[layer].scheme!r} has no rotation to remap"
            attn = cast(Block, model.blocks[layer]).attn
            if attn.sinks is not None or attn.softcap is not None:
                return "it has learned sinks or a softcap"
            if attn.own_mask is not None:
                return f"it attends through its own mask {attn.own_mask!r}, and the method sets its own visibility"
            return None

        layers = _chosen(model, setup.layers, "rotary", f"extension {built.name!r}", takes)
        if not layers:  # no layer takes it: a plain model's refusal names its scheme, a plan's its first layer's
            check_scheme(model.scheme_for(0), built)
            raise ConfigError(f"extension {built.name!r} applies to no layer of this model: layer 0: {takes(0)}")
        apply_extension(model, built, layers=layers)


def _any(layer: int) -> None:
    return None


def _set_rope_scaling(model: GPT, setup: InferenceSetup) -> None:
    """The scaling on the selected rotary layers (default: every rotary one); None removes it there."""

    def rotary(layer: int) -> str | None:
        if isinstance(model.scheme_for(layer), RotaryFrequencies):
            return None
        return f"its scheme {model.variants[layer].scheme!r} does not rotate q and k"

    layers = _chosen(model, setup.layers, "rotary", "rope scaling", rotary)
    scaling = setup.scaling_dict()
    if scaling is None and not any("scaling" in model.variants[layer].scheme_options for layer in layers):
        return  # nothing to remove
    if not layers:
        raise ConfigError(f"rope scaling applies to rope, xpos and coca models, not {model.config.scheme!r}")
    if scaling is None:
        model.set_scheme_options(layers, drop=("scaling",))
    else:
        model.set_scheme_options(layers, drop=("scaling",), scaling=scaling)


def _set_temp_tuning(model: GPT, spec: str | None, layers: list[int]) -> None:
    """Llama 4's temperature tuning on `layers` (None or "none": removed there)."""
    piece = None
    if spec not in (None, "none"):
        name, options = PIECES.parse(str(spec))
        if name != "temp_tuning":
            raise ConfigError(f"temp_tuning takes a spec such as 'temp_tuning,beta=0.1,gamma=8192', got {spec!r}")
        piece = options
    for layer in layers:
        attn = cast(Block, model.blocks[layer]).attn
        attn.temp_tuning = None if piece is None else TemperatureTuning(model.config.head_dims(), **piece)


def _set_log_scaling(model: GPT, kind: str, layers: list[int] | None = None) -> None:
    if kind not in GPT_LOG_SCALINGS:
        raise ConfigError(f"log-n scaling must be one of {', '.join(GPT_LOG_SCALINGS)}, got {kind!r}")
    chosen = range(model.config.n_layer) if layers is None else layers
    for layer in chosen:
        attn = cast(Block, model.blocks[layer]).attn
        if (kind == "ssmax") != (attn.log_scaling == "ssmax"):
            raise ConfigError(
                f"ssmax is a learned per-head scale: a model trained with log_scaling={attn.log_scaling!r} "
                f"cannot switch to {kind!r}; train with --log-scaling ssmax, or use 'qwen' or 'none'"
            )
    if layers is None or len(chosen) == model.config.n_layer:
        model.config.log_scaling = kind
    for layer in chosen:
        cast(Block, model.blocks[layer]).attn.log_scaling = kind
