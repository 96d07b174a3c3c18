"""Hugging Face decoder families described in lextra's layer-plan vocabulary (`lextra.attention.plan`).

Each family's layers are read from its config and attention modules into one `LayerVariant` per layer: the scheme
(`rope` with its base and partial fraction, or `nope`), the mask (`causal`, `window:W`, `chunk:C`) and its pieces
(`qknorm`, `softcap:C`, `sinks`, `temp_tuning`), so the registered attention applies each layer's own mask and
inference changes select layers by kind as on a lextra model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lextra.attention.plan import LayerVariant
from lextra.errors import ConfigError

#: the `model_type`s adapted by `lextra.hf.HFCausalLM` and trained by `lextra hf finetune`
DECODER_FAMILIES = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma2",
    "gemma3_text",
    "smollm3",
    "gpt_oss",
    "phi3",
    "phi",
    "cohere2",
    "olmo2",
    "olmo3",
    "llama4_text",
)
#: families whose rotary layers rotate pairs (2k, 2k + 1) (`rotate_half` on interleaved channels), not halves
INTERLEAVED = ("cohere2", "llama4_text")


@dataclass(frozen=True)
class FamilyLayers:
    """A model's layers in plan vocabulary, the rotary layout, the fraction of each head that rotates and the
    Hugging Face layer type of each layer (the key of per-type `rope_parameters`; None where they are flat)."""

    variants: list[LayerVariant]
    layout: str
    fraction: float
    rope_keys: list[str | None]


def layer_types(cfg: Any) -> list[str] | None:
    types = getattr(cfg, "layer_types", None)
    return list(types) if types else None


def _mask(cfg: Any, index: int) -> str:
    """The mask Hugging Face builds for layer `index` (its `causal_mask_mapping` entry), as a lextra mask spec."""
    types = layer_types(cfg)
    kind = types[index] if types else ("sliding_attention" if getattr(cfg, "sliding_window", None) else None)
    if kind == "sliding_attention":
        return f"window:{int(cfg.sliding_window)}"
    if kind == "chunked_attention":
        return f"chunk:{int(cfg.attention_chunk_size)}"
    if kind not in (None, "full_attention"):
        raise ConfigError(f"{cfg.model_type} layer {index} has layer type {kind!r}, which lextra does not adapt")
    return "causal"


def _rotates(cfg: Any, module: Any, index: int) -> bool:
    if cfg.model_type == "cohere2":
        return getattr(module, "sliding_window", None) is not None
    return bool(getattr(module, "use_rope", True))


def rope_key(cfg: Any, index: int) -> str | None:
    """The layer type whose `rope_parameters` layer `index` uses (Gemma 3, OLMo 3), or None where they are flat."""
    params = getattr(cfg, "rope_parameters", None) or {}
    types = layer_types(cfg)
    if types and types[index] in params and isinstance(params[types[index]], dict):
        return types[index]
    return None


def _pieces(cfg: Any, module: Any, rotary: bool) -> dict[str, dict[str, Any]]:
    pieces: dict[str, dict[str, Any]] = {}
    if any(hasattr(module, name) for name in ("q_norm", "qk_norm", "q_layernorm")):
        pieces["qknorm"] = {} if not hasattr(module, "qk_norm") else {"weight": False}
    cap = getattr(module, "attn_logit_softcapping", None)
    if cap is not None:
        pieces["softcap"] = {"cap": float(cap)}
    if getattr(module, "sinks", None) is not None:
        pieces["sinks"] = {}
    if getattr(module, "attn_temperature_tuning", False) and not rotary:
        pieces["temp_tuning"] = {"beta": float(module.attn_scale), "gamma": float(module.floor_scale)}
    return pieces


def attention_kinds(cfg: Any, modules: list[Any]) -> list[tuple[str, dict[str, dict[str, Any]]]]:
    """Each layer's mask spec and attention pieces (what replacing its attention function must respect)."""
    return [(_mask(cfg, i), _pieces(cfg, m, _rotates(cfg, m, i))) for i, m in enumerate(modules)]


def describe_layers(cfg: Any, modules: list[Any], head_dim: int, rotary_dim: int) -> FamilyLayers:
    """The plan of a Hugging Face decoder: each layer's scheme, mask and pieces (module docstring)."""
    variants: list[LayerVariant] = []
    keys: list[str | None] = []
    fraction = rotary_dim / head_dim
    for index, module in enumerate(modules):
        rotary = _rotates(cfg, module, index)
        key = rope_key(cfg, index)
        keys.append(key)
        options: dict[str, Any] = {}
        if rotary:
            params = cfg.rope_parameters or {}
            options["base"] = float((params[key] if key is not None else params)["rope_theta"])
            if fraction < 1:
                options["fraction"] = fraction
        variants.append(
            LayerVariant("rope" if rotary else "nope", options, _mask(cfg, index), _pieces(cfg, module, rotary))
        )
    layout = "interleaved" if cfg.model_type in INTERLEAVED else "half"
    return FamilyLayers(variants, layout, fraction, keys)
