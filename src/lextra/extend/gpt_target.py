"""A lextra `GPT` as an `InferenceTarget`: the primitive operations `InferenceSetup.apply` orders and checks.

The GPT lives below `lextra.extend` (its extension machinery wraps the model's attention layers), so its
primitives are written here, over the GPT's own state: per-layer schemes (`_set_scheme_options`), each layer's
log-n scaling and temperature tuning, the call mask, temperatures and `apply_extension`.
"""

from __future__ import annotations

from typing import Any, cast

from lextra.attention.masks import Mask
from lextra.attention.pieces import PIECES
from lextra.attention.plan import LayerVariant
from lextra.errors import ConfigError
from lextra.extend.attention import apply_extension
from lextra.extend.base import ExtensionMethod, check_scheme
from lextra.model import GPT, Block
from lextra.positions.rotary import RotaryFrequencies


class GPTInferenceTarget:
    """The `InferenceTarget` primitives over a lextra GPT (module docstring)."""

    def __init__(self, model: GPT) -> None:
        self.model = model
        self.config = model.config

    @property
    def variants(self) -> list[LayerVariant]:
        return self.model.variants

    def _attn(self, layer: int) -> Any:
        return cast(Block, self.model.blocks[layer]).attn

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
            return (
                str(err)
                if self.config.layer_plan is None
                else f"its scheme {self.variants[layer].scheme!r} has no rotation to remap"
            )
        attn = self._attn(layer)
        if attn.own_mask is not None:
            return f"it attends through its own mask {attn.own_mask!r}, and the method sets its own visibility"
        return None

    def _scale_rope(self, scaling: dict[str, Any] | None, layers: list[int]) -> None:
        if scaling is None:
            if any("scaling" in self.variants[layer].scheme_options for layer in layers):
                self.model._set_scheme_options(layers, drop=("scaling",))
            return
        self.model._set_scheme_options(layers, drop=("scaling",), scaling=scaling)

    def _set_log_scaling(self, kind: str, layers: list[int]) -> None:
        for layer in layers:
            current = self._attn(layer).log_scaling
            if (kind == "ssmax") != (current == "ssmax"):
                raise ConfigError(
                    f"ssmax is a learned per-head scale: a model trained with log_scaling={current!r} "
                    f"cannot switch to {kind!r}; train with --log-scaling ssmax, or use 'qwen' or 'none'"
                )
        if len(layers) == self.config.n_layer:
            self.config.log_scaling = kind
        for layer in layers:
            self._attn(layer).log_scaling = kind

    def _set_temp_tuning(self, options: dict[str, Any] | None, layers: list[int]) -> None:
        for layer in layers:
            tuning = None if options is None else PIECES.build("temp_tuning", self.config.head_dims(), **options)
            self._attn(layer).set_piece("temp_tuning", tuning)

    def _set_temperatures(self, temperatures: Any) -> None:
        self.model._set_temperatures(temperatures)

    def _set_mask(self, mask: Mask | None) -> None:
        self.model.mask = mask

    def _inference_state(self) -> tuple[Mask | None, bool]:
        extended = any(self._attn(layer).extension is not None for layer in range(self.config.n_layer))
        return self.model.mask, extended

    def _set_extension(self, method: ExtensionMethod | None, layers: list[int]) -> None:
        if method is None:
            apply_extension(self.model, None)
        else:
            apply_extension(self.model, method, layers=layers)
