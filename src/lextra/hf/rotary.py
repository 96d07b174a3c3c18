"""Hugging Face rotary embeddings under lextra: scaled `rope_parameters`, lextra's RoPE with their frequencies, and
the identity stand-in that leaves rotation to lextra's attention.

While a RoPE scaling applies alike to every layer that shares frequencies, Hugging Face rotates with the scaled
`rope_parameters`; otherwise the model's rotary module becomes an `IdentityRotary` and each layer rotates with an
`HFRoPE` reading its source module's frequencies."""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor

from lextra.errors import ConfigError
from lextra.positions.base import HeadDims
from lextra.positions.rotary import RoPE, build_rope_scaling
from lextra.positions.scaling import parse_rope_scaling
from lextra.positions.scaling_hf import to_hf
from lextra.positions.scaling_types import ntk_base

#: keys of `rope_parameters` that describe the model rather than a scaling, kept under any scaling
MODEL_KEYS = ("partial_rotary_factor",)


def inv_freq_of(source: torch.nn.Module, key: str | None) -> Tensor:
    return getattr(source, f"{key}_inv_freq" if key else "inv_freq")


def attention_scaling_of(source: torch.nn.Module, key: str | None) -> float:
    return float(getattr(source, f"{key}_attention_scaling" if key else "attention_scaling"))


def call_rotary(source: torch.nn.Module, x: Tensor, position_ids: Tensor, key: str | None) -> Any:
    return source(x, position_ids, key) if key else source(x, position_ids)


class IdentityRotary(torch.nn.Module):
    """Stands in for a model's rotary embedding while lextra rotates q and k: runs the real sources (so dynamic
    frequencies update) and returns cos = 1, sin = 0, so q, k and the cache stay un-rotated."""

    def __init__(self, template: torch.nn.Module, sources: list[tuple[torch.nn.Module, str | None]]) -> None:
        super().__init__()
        self.template = template
        self.sources = torch.nn.ModuleList([source for source, _ in sources])
        self.keys = [key for _, key in sources]

    def forward(self, x: Tensor, position_ids: Tensor, *args: Any) -> Any:
        for source, key in zip(self.sources, self.keys, strict=True):
            call_rotary(source, x, position_ids, key)
        out = self.template(x, position_ids, *args)
        if isinstance(out, Tensor):  # Llama 4: complex rotations, 1 is the identity
            return torch.ones_like(out)
        cos, sin = out
        return torch.ones_like(cos), torch.zeros_like(sin)


def hf_rope_parameters(cfg: Any, original: dict[str, Any], spec: str | dict | None) -> dict[str, Any]:
    """The Hugging Face `rope_parameters` of a lextra RoPE scaling spec (None: `original`) over the plain RoPE
    `original`; lextra's `ntk` becomes rope_type "default" with the NTK base."""
    base = float(original["rope_theta"])
    if spec is None:
        return dict(original)
    if original.get("rope_type", "default") != "default":
        raise ConfigError(
            f"this model already uses rope_type {original['rope_type']!r}; lextra only adds a "
            "scaling to models trained with plain RoPE"
        )
    raw = parse_rope_scaling(spec) if isinstance(spec, str) else dict(spec)
    scaling = build_rope_scaling(raw, int(cfg.max_position_embeddings))
    kept = {key: original[key] for key in MODEL_KEYS if key in original}
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    if scaling.rope_type == "ntk":
        rotated = int(head_dim * float(original.get("partial_rotary_factor", 1.0)))
        return {**kept, "rope_type": "default", "rope_theta": ntk_base(scaling["factor"], rotated, base)}
    return {**kept, **to_hf(scaling, base=base)}


def scaled_source(
    template: torch.nn.Module, cfg: Any, key: str | None, params: dict[str, Any], device: torch.device
) -> torch.nn.Module:
    """A rotary module of the template's class whose (layer type's) `rope_parameters` are `params`."""
    copied = copy.deepcopy(cfg)
    if key is None:
        copied.rope_parameters = params
    else:
        copied.rope_parameters = {**copied.rope_parameters, key: params}
    with torch.device(device):  # Hugging Face builds its frequency buffers on the default device
        return type(template)(config=copied)


class HFRoPE(RoPE):
    """lextra's RoPE in the model's layout and partial fraction, with the inverse frequencies and cos/sin factor a
    Hugging Face rotary module holds at call time: exactly Hugging Face's RoPE at any positions."""

    def __init__(
        self,
        source: torch.nn.Module,
        key: str | None,
        dims: HeadDims,
        layout: str = "half",
        fraction: float = 1.0,
    ) -> None:
        super().__init__(dims, layout=layout, fraction=fraction)
        self.sources = [source]  # a plain list: not a submodule of this scheme
        self.key = key

    def frequencies_for(self, seq_len: int | None) -> tuple[Tensor, float]:
        source = self.sources[0]
        return inv_freq_of(source, self.key), attention_scaling_of(source, self.key)
