"""`InferenceSetup`: everything inference changes on a trained model, applied in one place.

A trained model runs at inference with a RoPE scaling, softmax temperatures, a log-n scaling, a training-free
extension method and a mask. An `InferenceSetup` states any of them (a field left at `KEEP` stays as the model
has it) and `setup.apply(model)` applies them the same way to a lextra `GPT` and to a Hugging Face adapter
(`lextra.hf`, through its `apply_setup`), refusing what the model cannot take with a ConfigError.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

from lextra.attention.masks import Mask, build_mask
from lextra.errors import ConfigError
from lextra.extend.attention import apply_extension
from lextra.extend.base import ExtensionMethod
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
    """

    rope_scaling: str | dict[str, Any] | Keep | None = KEEP
    temperatures: Any = KEEP
    log_scaling: str | Keep = KEEP
    extension: str | ExtensionMethod | Keep | None = KEEP
    mask: str | Mask | Keep | None = KEEP

    def changes(self) -> dict[str, Any]:
        """The fields this setup sets (not `KEEP`)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not KEEP}

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


def _apply_to_gpt(setup: InferenceSetup, model: GPT) -> None:
    """RoPE scaling, then log scaling, temperatures, mask and extension (checked against the scaled scheme)."""
    removes_nothing = setup.rope_scaling is None and "scaling" not in model.config.scheme_options
    if setup.rope_scaling is not KEEP and not removes_nothing:
        if not isinstance(model.positions[0], RotaryFrequencies):
            raise ConfigError(f"rope scaling applies to rope, xpos and coca models, not {model.config.scheme!r}")
        scaling = setup.scaling_dict()
        options = {k: v for k, v in model.config.scheme_options.items() if k != "scaling"}
        model.config.scheme_options = options
        if scaling is None:
            model.set_scheme_options()
        else:
            model.set_scheme_options(scaling=scaling)
    if setup.log_scaling is not KEEP:
        _set_log_scaling(model, setup.log_scaling)
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
        apply_extension(model, setup.extension)


def _set_log_scaling(model: GPT, kind: str) -> None:
    if kind not in GPT_LOG_SCALINGS:
        raise ConfigError(f"log-n scaling must be one of {', '.join(GPT_LOG_SCALINGS)}, got {kind!r}")
    if (kind == "ssmax") != (model.config.log_scaling == "ssmax"):
        raise ConfigError(
            f"ssmax is a learned per-head scale: a model trained with log_scaling={model.config.log_scaling!r} "
            f"cannot switch to {kind!r}; train with --log-scaling ssmax, or use 'qwen' or 'none'"
        )
    model.config.log_scaling = kind
    for block in model.blocks:
        cast(Block, block).attn.log_scaling = kind
