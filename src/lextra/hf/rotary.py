"""Hugging Face rotary embeddings under lextra: scaled `rope_parameters`, lextra's RoPE with their frequencies, and
the identity stand-in that leaves rotation to lextra's attention.

Hugging Face rotates q and k itself with one rotary module per model (Gemma 3 and OLMo 3: one set of frequencies
per layer type, `rope_parameters[layer_type]`). While a RoPE scaling applies alike to every layer that shares
those frequencies, the adapter gives Hugging Face the scaled `rope_parameters` and lets it rotate. When layers
that share them need different rotations (a scaling on some layers only, an extension method remapping
positions on some), the model's rotary module becomes an `IdentityRotary` and lextra's attention rotates each
layer with an `HFRoPE` reading its own source module's frequencies (dynamic NTK and LongRoPE updated by that
module's forward, as Hugging Face would).
"""

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
    """Stands in for a model's rotary embedding while lextra rotates q and k: it runs the real sources (so that
    dynamic NTK and LongRoPE update their frequencies for this input, as Hugging Face would) and returns
    cos = 1, sin = 0, so `apply_rotary_pos_emb` leaves q and k exactly as projected and the cache holds
    un-rotated keys."""

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
    """The Hugging Face `rope_parameters` of a lextra RoPE scaling spec (`yarn:4`, a dict; None: `original`) for
    frequencies trained with plain RoPE `original`, at the config's `max_position_embeddings`; lextra's `ntk`
    (no HF type) becomes its exact HF equivalent, rope_type "default" with the NTK base of the rotated channels.
    Without a spec the model's own parameters, whatever their type (gpt-oss's YaRN under an extension method)."""
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
    """lextra's RoPE in the model's layout (half-split `rotate_half`, or Cohere's interleaved pairs) and partial
    fraction, with the inverse frequencies and cos/sin factor that a Hugging Face rotary module holds at call time
    (`inv_freq`, `attention_scaling`, per layer type where it keeps several), so that rotating at any positions
    is exactly Hugging Face's RoPE there."""

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
