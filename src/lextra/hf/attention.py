"""lextra's attention inside Hugging Face models, registered with transformers' `AttentionInterface` as "lextra".

Hugging Face computes q, k, v (Llama family: already rotated by its own RoPE, with its own `rope_parameters`;
T5: with its bucket bias passed as `position_bias`) and hands them to this function, which applies what lextra
adds at inference: a mask (causal, window, BCA; `full` for encoders), per-layer and per-head temperatures, Qwen's
log-n scaling, a training-free extension method, and capture of one layer's attention inputs for analysis. Every
call is one `lextra.attention.attention` call, T5's `position_bias` its score bias, Hugging Face's padding mask its
padding and the layer's softcap (Gemma 2) and sinks (gpt-oss) its own, on the backend `AttentionState.backend`
names (`auto`, `reference`, `sdpa`, `chunked`, `flex`). Keys and values keep their grouped-query heads: the
shared call folds a decoding step's query heads onto them or expands them (`lextra.attention.backends.dispatch`).
It is exact: with the default settings its outputs equal Hugging Face's own `sdpa` / `eager` attention (tested).
Under `auto` the dispatch sends a plain layer's windows and BCA on CPU to the tiles of their bands.

Under a training-free extension method (`AttentionState.set_extension`, called through `InferenceSetup`) the
model's rotary embedding returns the identity, so q and k arrive un-rotated (and the cache holds un-rotated keys);
the extended layers then attend through the state's one `lextra.extend.ExtendedAttention`, with the layer's RoPE
(`AttentionState.rotaries`: lextra's RoPE with Hugging Face's own frequencies, scalings included) as the scheme:
the method's dense reference, tiled passes or FlexAttention passes, as for a lextra model's layer.

Each adapted attention module carries an `AttentionState` as `module.lextra_state`; modules without one (T5's
decoder and cross attention) run the plain computation: causal when the module is causal, else full.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from lextra.analysis.capture import CapturedLayer, LayerAttention
from lextra.attention import attention, expand_kv
from lextra.attention.masks import CausalMask, FullMask, Mask
from lextra.attention.pieces import TemperatureTuning
from lextra.errors import ConfigError
from lextra.extend import ExtendedAttention, ExtensionMethod
from lextra.positions.base import PositionScheme
from lextra.positions.logn import log_scaling_factor

ATTENTION_NAME = "lextra"


@dataclass
class AttentionState:
    """What lextra changes in a model's attention; shared by all of its adapted attention modules."""

    mask: Mask
    train_len: int
    #: (n_layer, n_head) softmax temperatures, or None for 1
    temperatures: Tensor | None = None
    #: a log-n scaling name (`lextra.extend.LOG_SCALINGS`): "none" or "qwen" (the query at 1-based position
    #: i > L_tr multiplied by log_{L_tr} i), on the layers `log_layers` names (None: every layer)
    log_scaling: str = "none"
    log_layers: frozenset[int] | None = None
    #: when set, the layer with this index records its attention inputs and stops the forward pass
    capture_layer: int | None = None
    #: the training-free extension method's wrapper (one per method, `set_extension`), on the layers `extended`
    #: names; q and k then arrive un-rotated
    wrapper: ExtendedAttention | None = None
    extended: frozenset[int] = frozenset()
    #: each layer's own mask (a sliding window, Llama 4's chunks), None where the layer uses `mask`
    layer_masks: list[Mask | None] = field(default_factory=list)
    #: when lextra rotates q and k (an extension, or a scaling on some layers only): each layer's RoPE (Hugging
    #: Face's frequencies; None for a NoPE layer); None while Hugging Face rotates them itself
    rotaries: list[PositionScheme | None] | None = None
    #: Llama 4's query temperature tuning added by lextra, per layer index
    temp_tuning: dict[int, TemperatureTuning] = field(default_factory=dict)
    #: the position ids of the current forward, recorded by the adapter for families whose attention modules do
    #: not receive them (Llama 4)
    position_ids: Tensor | None = None
    #: the attention backend every call asks for (`lextra.attention.backends.backend_names`)
    backend: str = "auto"

    @property
    def extension(self) -> ExtensionMethod | None:
        """The training-free extension method on the layers `extended` names, or None."""
        return None if self.wrapper is None else self.wrapper.method

    def set_extension(self, method: ExtensionMethod | None, layers: list[int]) -> None:
        """Attend under `method` on `layers` through one `ExtendedAttention` (None: no method on any layer)."""
        self.wrapper = None if method is None else ExtendedAttention(method)
        self.extended = frozenset(layers if method is not None else ())

    def layer_mask(self, layer: int) -> Mask:
        own = self.layer_masks[layer] if layer < len(self.layer_masks) else None
        return self.mask if own is None else own


def query_temperature(state: AttentionState, layer: int, q_pos: Tensor) -> Tensor | None:
    """The layer's temperature (H,) times the log-n factor and the temperature tuning per query: None, (H,) or
    (H, Lq)."""
    tau = None if state.temperatures is None else state.temperatures[layer].to(q_pos.device)
    factors: list[Tensor] = []
    if state.log_scaling != "none" and (state.log_layers is None or layer in state.log_layers):
        factors.append(log_scaling_factor(state.log_scaling, q_pos, state.train_len))
    tuning = state.temp_tuning.get(layer)
    if tuning is not None:
        factors.append(tuning.query_scale(q_pos).to(q_pos.device))
    if not factors:
        return tau
    factor = factors[0] if len(factors) == 1 else factors[0] * factors[1]
    return 1.0 / factor[None] if tau is None else tau[:, None] / factor[None]


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
    wrapper = state.wrapper if state is not None and layer in state.extended else None
    rotary = state.rotaries[layer] if state is not None and state.rotaries is not None else None
    if wrapper is not None:  # the method rotates q and k at its remapped positions (`scheme=rotary` below)
        _check_extended(wrapper.method, capturing, attention_mask, q_pos, k_pos)
        attention_mask = None  # plain causal: the layer's mask
    elif rotary is not None:  # lextra rotates this layer (a scaling on some layers only)
        query, key = rotary.rotate(query, key, q_pos, k_pos)
    mask, tau = _mask_and_temperature(module, state, layer, q_pos)
    if capturing:
        key = expand_kv(key, query.shape[1] // key.shape[1])
        inputs = (layer, query.float(), key.float(), None, q_pos, mask, tau)
        raise CapturedLayer(LayerAttention(*inputs, bias=position_bias, scale=scale, sinks=sinks, softcap=softcap))
    out = attention(
        query,
        key,
        value,
        scheme=rotary if wrapper is not None else None,
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
        extension=wrapper,
    )
    return out.transpose(1, 2).contiguous(), None


def _mask_and_temperature(
    module: Any, state: AttentionState | None, layer: int, q_pos: Tensor
) -> tuple[Mask, Tensor | None]:
    """The layer's mask and temperature: its state's, or without one causal when the module is causal (and has more
    than one query), else full, and no temperature."""
    if state is None:
        causal = getattr(module, "is_causal", False) and q_pos.numel() > 1
        return (CausalMask() if causal else FullMask()), None
    return state.layer_mask(layer), query_temperature(state, layer, q_pos)


def _check_extended(
    method: ExtensionMethod, capturing: bool, attention_mask: Tensor | None, q_pos: Tensor, k_pos: Tensor
) -> None:
    """What an extended layer refuses, in one line each: capture (the analyses read rotated q and k) and padding.
    Every cached key is kept; methods with a bounded view (attention sinks, LM-Infinite) hide the keys their rule
    hides, which gives the logits an evicting cache gives."""
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
    """The mask transformers builds for "lextra": None when nothing is padded (each adapted layer applies its own
    mask, `AttentionState.layer_mask`: causal, a sliding window, Llama 4's chunks), else `sdpa_mask`'s (padding)."""
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
