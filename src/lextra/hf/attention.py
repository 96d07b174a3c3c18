"""lextra's attention inside Hugging Face models, registered with transformers' `AttentionInterface` as "lextra".

Hugging Face hands this function q, k, v (rotated by its own RoPE; T5 with its bucket bias as `position_bias`),
and each call is one `lextra.attention.attention` call adding what lextra changes at inference: a mask,
temperatures, log-n scaling, an extension method, the layer's softcap and sinks, and capture for analysis. With
default settings its outputs equal Hugging Face's own attention (tested). Under an extension method q and k
arrive un-rotated and the layer's `LayerInference.rotary` is the scheme.

Each adapted module carries an `AttentionState` as `module.lextra_state`; modules without one (T5's decoder and
cross attention) run the plain computation: causal when the module is causal, else full."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from lextra.analysis.capture import CapturedLayer, LayerAttention
from lextra.attention import attention, expand_kv
from lextra.attention.backends import PassExtension
from lextra.attention.inference import LayerInference
from lextra.attention.masks import CausalMask, FullMask, Mask
from lextra.errors import ConfigError

ATTENTION_NAME = "lextra"


@dataclass
class AttentionState:
    """What lextra changes in a model's attention, shared by its adapted modules: each layer's `LayerInference`."""

    #: the mask of a layer that neither a call, a setup nor the layer itself names (causal; full for an encoder)
    default: Mask
    layers: list[LayerInference]
    #: the mask the current call names (`HFCausalLM.features(mask=)`), None: each layer's
    call_mask: Mask | None = None
    #: when set, the layer with this index records its attention inputs and stops the forward pass
    capture_layer: int | None = None
    #: the position ids of the current forward, recorded by the adapter for families whose attention modules do
    #: not receive them (Llama 4)
    position_ids: Tensor | None = None
    #: the attention backend every call asks for (`lextra.attention.backends.backend_names`)
    backend: str = "auto"

    @property
    def extended(self) -> list[int]:
        """The layers that attend under a training-free extension method (q and k then arrive un-rotated)."""
        return [index for index, layer in enumerate(self.layers) if layer.extension is not None]


def _positions(
    query: Tensor, key: Tensor, state: AttentionState | None, kwargs: dict[str, Any]
) -> tuple[Tensor, Tensor]:
    """Query positions (from `position_ids`, else the last Lq of the keys) and key positions: the Lk keys a cache
    hands over are the latest ones, ending at the last query (a sliding-window cache holds only the last few)."""
    Lq, Lk = query.shape[2], key.shape[2]
    position_ids = kwargs.get("position_ids")
    if position_ids is None and state is not None:
        position_ids = state.position_ids
    if position_ids is not None and position_ids.shape[-1] == Lq and Lq <= Lk:
        q_pos = position_ids.reshape(-1, Lq)[0].to(torch.long)
        k_pos = torch.arange(Lk, device=query.device) + (q_pos[-1] + 1 - Lk)
        return q_pos, k_pos
    return torch.arange(Lk - Lq, Lk, device=query.device), torch.arange(Lk, device=query.device)


def lextra_attention(
    module: Any,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    position_bias: Tensor | None = None,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """The `AttentionInterface` entry: q (B, H, Lq, D), k and v (B, Hkv, Lk, D) -> ((B, Lq, H, D), None).
    gpt-oss hands its learned sinks as `s_aux`, Gemma 2 its logit cap as `softcap`."""
    if module.training and dropout > 0:
        raise ConfigError("lextra's Hugging Face attention is for evaluation; call model.eval() first")
    scale = query.shape[3] ** -0.5 if scaling is None else float(scaling)
    state: AttentionState | None = getattr(module, "lextra_state", None)
    q_pos, k_pos = _positions(query, key, state, kwargs)
    layer = int(getattr(module, "layer_idx", 0) or 0)
    sinks, softcap = kwargs.get("s_aux"), kwargs.get("softcap")
    capturing = state is not None and state.capture_layer == layer
    own = None if state is None else state.layers[layer]
    method = None if own is None else own.extension
    rotary = None if own is None else own.rotary
    if method is not None:  # the method rotates q and k at its remapped positions (`scheme=rotary` below)
        _check_extended(method, capturing, attention_mask, q_pos, k_pos)
        attention_mask = None  # plain causal: the layer's mask
    elif rotary is not None:  # lextra rotates this layer (a scaling on some layers only)
        query, key = rotary.rotate(query, key, q_pos, k_pos)
    mask: Mask
    if state is None:  # a module lextra does not adapt (T5's decoder): causal when it is and has queries, else full
        mask, tau = (CausalMask() if getattr(module, "is_causal", False) and q_pos.numel() > 1 else FullMask()), None
    else:
        mask = state.layers[layer].layer_mask(state.call_mask, state.default)
        tau = state.layers[layer].query_temperature(q_pos, k_pos, mask)
    if capturing:
        key = expand_kv(key, query.shape[1] // key.shape[1])
        inputs = (layer, query.float(), key.float(), None, q_pos, mask, tau)
        raise CapturedLayer(LayerAttention(*inputs, bias=position_bias, scale=scale, sinks=sinks, softcap=softcap))
    out = attention(
        query,
        key,
        value,
        scheme=rotary if method is not None else None,
        mask=mask,
        q_pos=q_pos,
        k_pos=k_pos,
        backend="auto" if state is None else state.backend,
        temperature=tau,
        scale=scale,
        sinks=sinks,
        softcap=softcap,
        score_bias=position_bias,
        padding=attention_mask,
        extension=method,
    )
    return out.transpose(1, 2).contiguous(), None


def _check_extended(
    method: PassExtension, capturing: bool, attention_mask: Tensor | None, q_pos: Tensor, k_pos: Tensor
) -> None:
    """What an extended layer refuses, in one line each: capture (the analyses read rotated q and k) and padding."""
    if capturing:
        raise ConfigError(
            f"analyses and alignment read rotated q and k, which extension {method.name!r} does not "
            "produce; run them without --extend"
        )
    if not _plain_causal(attention_mask, q_pos, k_pos):
        raise ConfigError(
            f"extension {method.name!r} runs on unpadded causal inputs; score prompts of one length "
            "together (padding masks are not supported under an extension)"
        )


def _plain_causal(attention_mask: Tensor | None, q_pos: Tensor, k_pos: Tensor) -> bool:
    """Whether Hugging Face's mask (None, boolean, or additive 0 / min) is plain causal attention, no padding."""
    if attention_mask is None:
        return True
    visible = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
    causal = k_pos[None, :] <= q_pos[:, None]
    return bool((visible == causal).all())


def lextra_mask(*args: Any, attention_mask: Tensor | None = None, **kwargs: Any) -> Tensor | None:
    """The mask transformers builds for "lextra": None when nothing is padded (layers apply their own), else SDPA's."""
    from transformers.masking_utils import sdpa_mask

    if attention_mask is None or bool(attention_mask.all()):
        return None
    return sdpa_mask(*args, **{**kwargs, "attention_mask": attention_mask, "allow_is_causal_skip": False})


def register() -> None:
    """Make `attn_implementation="lextra"` known to transformers (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTENTION_NAME, lextra_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, lextra_mask)
