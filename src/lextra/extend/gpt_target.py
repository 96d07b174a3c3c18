"""A lextra `GPT` as an `InferenceTarget`: its layers' `LayerInference`, which layers take a RoPE scaling or an
extension method, and the per-layer schemes a scaling rebuilds."""

from __future__ import annotations

from typing import Any, cast

from lextra.attention.inference import LayerInference
from lextra.attention.plan import LayerVariant
from lextra.errors import ConfigError
from lextra.extend.base import ExtensionMethod, check_scheme
from lextra.model import GPT, Block
from lextra.positions.rotary import RotaryFrequencies


class GPTInferenceTarget:
    """The `InferenceTarget` of a lextra GPT (module docstring)."""

    def __init__(self, model: GPT) -> None:
        self.model = model
        self.config = model.config

    @property
    def variants(self) -> list[LayerVariant]:
        return self.model.variants

    @property
    def inference_layers(self) -> list[LayerInference]:
        return [cast(Block, block).attn.inference for block in self.model.blocks]

    def _default_scaling_layers(self) -> list[int]:
        return list(range(self.config.n_layer))

    def _rotary_reason(self, layer: int) -> str | None:
        if isinstance(self.model.scheme_for(layer), RotaryFrequencies):
            return None
        return f"its scheme {self.variants[layer].scheme!r} does not rotate q and k"

    def _extension_reason(self, layer: int, method: ExtensionMethod) -> str | None:
        try:
            check_scheme(self.model.scheme_for(layer), method)
        except ConfigError as err:
            if len({v.spec() for v in self.variants}) == 1:  # one variant on every layer: the scheme's own reason
                return str(err)
            return f"its scheme {self.variants[layer].scheme!r} has no rotation to remap"
        own = self.inference_layers[layer]
        if own.local:
            return f"it attends through its own mask {own.mask!r}, and the method sets its own visibility"
        return None

    def _scale_rope(self, scaling: dict[str, Any] | None, layers: list[int]) -> None:
        if scaling is None:
            if any("scaling" in self.variants[layer].scheme_options for layer in layers):
                self.model._set_scheme_options(layers, drop=("scaling",))
            return
        self.model._set_scheme_options(layers, drop=("scaling",), scaling=scaling)

    def _rotation_changed(self) -> None:
        """A GPT's layers rotate q and k themselves, under an extension method or not."""
