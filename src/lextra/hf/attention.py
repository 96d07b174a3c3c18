"""lextra's attention inside Hugging Face models, registered with transformers' `AttentionInterface` as "lextra".

Hugging Face computes q, k, v (Llama family: already rotated by its own RoPE, with its own `rope_parameters`;
T5: with its bucket bias passed as `position_bias`) and hands them to this function, which applies what lextra
adds at inference: a mask (causal, window, BCA; `full` for encoders), per-layer and per-head temperatures, Qwen's
log-n scaling, and capture of one layer's attention inputs for analysis. It is exact: with the default settings
its outputs equal Hugging Face's own `sdpa` / `eager` attention (tested). A decoding step that sees every cached
key runs one SDPA call with grouped-query heads folded into the query axis, on the cache as it is. Every other
call is one `lextra.attention.attention` call, T5's `position_bias` its score bias and Hugging Face's padding mask
its padding, so a model reaches every backend (`reference`, `sdpa`, `chunked`, `flex`); it attends through
`lextra.extend.BANDED_MASKS`, which sends windows and BCA on CPU to the tiles of their bands.

Under a training-free extension method (`AttentionState.extension`, set through `InferenceSetup`) the model's
rotary embedding returns the identity, so q and k arrive un-rotated (and the cache holds un-rotated keys); this
function then runs `lextra.extend.extended_attention`, which rotates them at the method's remapped positions with
`AttentionState.rotary`, a lextra RoPE whose frequencies are Hugging Face's own (scalings included), and applies
the layer's softcap (Gemma 2) to each pass's scores and its sinks (gpt-oss) once to the merged softmax.

Each adapted attention module carries an `AttentionState` as `module.lextra_state`; modules without one (T5's
decoder and cross attention) run the plain computation: causal when the module is causal, else full.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from lextra.analysis.capture import CapturedLayer, LayerAttention
from lextra.attention import attention
from lextra.attention.masks import CausalMask, FullMask, Mask
from lextra.attention.pieces import TemperatureTuning
from lextra.errors import ConfigError
from lextra.extend import BANDED_MASKS, ExtensionMethod, LayerScores, extended_attention
from lextra.positions.base import PositionScheme
from lextra.positions.logn import log_scaling_factor

ATTENTION_NAME = "lextra"
#: at most this many queries take the folded grouped-query path when they see every key (decoding steps)
FOLD_MAX_QUERIES = 64


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
    #: a training-free extension method, on the layers `extended` names; q and k then arrive un-rotated
    extension: ExtensionMethod | None = None
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


def _repeat_kv(x: Tensor, heads: int) -> Tensor:
    """Grouped-query attention: each of the Hkv key/value heads serves heads / Hkv query heads."""
    groups = heads // x.shape[1]
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


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
    H, D = query.shape[1], query.shape[3]
    scale = D**-0.5 if scaling is None else float(scaling)
    state: AttentionState | None = getattr(module, "lextra_state", None)
    q_pos, k_pos = _positions(query, key, state, kwargs)
    layer = int(getattr(module, "layer_idx", 0) or 0)
    sinks, softcap = kwargs.get("s_aux"), kwargs.get("softcap")
    plain = position_bias is None and attention_mask is None and sinks is None and softcap is None
    method = state.extension if state is not None and layer in state.extended else None
    if state is not None and method is not None:
        scores = LayerScores(softcap, sinks)
        out = _extended(query, key, value, attention_mask, state, method, layer, q_pos, k_pos, scale, scores)
        return out.transpose(1, 2).contiguous(), None
    rotary = state.rotaries[layer] if state is not None and state.rotaries is not None else None
    if rotary is not None:
        query, key = rotary.rotate(query, key, q_pos, k_pos)
    if plain and _sees_every_key(module, state, layer, q_pos, k_pos):
        return _folded_attention(query, key, value, scale).transpose(1, 2).contiguous(), None
    key, value = _repeat_kv(key, H), _repeat_kv(value, H)
    mask, tau = _mask_and_temperature(module, state, layer, q_pos)
    if state is not None and state.capture_layer == layer:
        inputs = (layer, query.float(), key.float(), None, q_pos, mask, tau)
        raise CapturedLayer(LayerAttention(*inputs, bias=position_bias, scale=scale, sinks=sinks, softcap=softcap))
    out = attention(
        query,
        key,
        value,
        mask=mask,
        q_pos=q_pos,
        k_pos=k_pos,
        temperature=tau,
        scale=scale,
        sinks=sinks,
        softcap=softcap,
        score_bias=position_bias,
        padding=attention_mask,
        extension=BANDED_MASKS,
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


def _sees_every_key(module: Any, state: AttentionState | None, layer: int, q_pos: Tensor, k_pos: Tensor) -> bool:
    """Whether a few queries (a decoding step) see every key with plain attention: no extension, temperature,
    capture or log scaling, and a mask that hides no key from them (causal at the end of the cache does not)."""
    if q_pos.numel() > FOLD_MAX_QUERIES:
        return False
    if state is None:
        return not (getattr(module, "is_causal", False) and q_pos.numel() > 1)
    if state.temperatures is not None or query_temperature(state, layer, q_pos) is not None:
        return False
    return state.capture_layer != layer and bool(state.layer_mask(layer).allowed(q_pos, k_pos).all())


def _folded_attention(query: Tensor, key: Tensor, value: Tensor, scale: float) -> Tensor:
    """Attention of q (B, H, Lq, D) to every key of k, v (B, Hkv, Lk, D) with the query heads that share a
    key/value head folded into the query axis: one SDPA call on the cache as it is, without the (B, H, Lk, D)
    copies that expanding grouped-query heads makes (at 16k tokens those copies cost 10x the attention)."""
    B, H, Lq, D = query.shape
    Hkv = key.shape[1]
    folded = query.reshape(B, Hkv, (H // Hkv) * Lq, D)  # head h reads key/value head h // (H / Hkv)
    out = F.scaled_dot_product_attention(folded, key, value, scale=scale)
    return out.reshape(B, H, Lq, value.shape[-1])


def _extended(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    state: AttentionState,
    method: ExtensionMethod,
    layer: int,
    q_pos: Tensor,
    k_pos: Tensor,
    scale: float,
    scores: LayerScores,
) -> Tensor:
    """Un-rotated q (B, H, Lq, D), k and v (B, Hkv, Lk, D) under `state.extension`, rotated at its remapped
    positions, with the layer's softcap and sinks (`scores`: Gemma 2's, gpt-oss's). Every cached key is kept;
    methods with a bounded view (attention sinks, LM-Infinite) hide the keys their rule hides, which gives the
    logits an evicting cache gives. A decoding step (one query) folds the query heads that share a key/value head
    into the query axis, all at the step's position, so the cache is rotated per key/value head and never expanded
    (the sinks then given per folded row)."""
    if state.capture_layer == layer:
        raise ConfigError(
            f"analyses and alignment read rotated q and k, which extension {method.name!r} does not "
            "produce; run them without --extend"
        )
    if not _plain_causal(attention_mask, q_pos, k_pos):
        raise ConfigError(
            f"extension {method.name!r} runs on unpadded causal inputs; score prompts of one length "
            "together (padding masks are not supported under an extension)"
        )
    tau = query_temperature(state, layer, q_pos)
    rotary = state.rotaries[layer] if state.rotaries is not None else None
    B, H, Lq, D = query.shape
    groups = H // key.shape[1]
    if Lq == 1 and tau is None:
        folded = query.reshape(B, key.shape[1], groups, D)
        if scores.sinks is not None:  # query head h is row h % groups of key/value head h // groups
            scores = LayerScores(scores.softcap, scores.sinks.reshape(key.shape[1], groups))
        at = q_pos.repeat(groups)
        out = extended_attention(folded, key, value, rotary, method, at, k_pos, scale, None, None, scores)
        return out.reshape(B, H, 1, value.shape[-1])
    key, value = _repeat_kv(key, H), _repeat_kv(value, H)
    return extended_attention(query, key, value, rotary, method, q_pos, k_pos, scale, tau, None, scores)


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
