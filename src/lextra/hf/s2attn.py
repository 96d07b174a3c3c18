"""LongLoRA's shifted sparse attention (S2-Attn, Chen et al. 2023, arXiv 2309.12307) for Hugging Face decoders
while training: groups of G tokens attend causally within themselves, half the heads over groups shifted by G/2;
by default without wrap-around (the authors' `forward_flashattn`), with `roll` rolled (`forward_noflashattn`).
`check_s2_layers` refuses layers where grouped SDPA is not the layer's attention."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from lextra.attention import expand_kv
from lextra.errors import ConfigError
from lextra.hf.families import attention_kinds

S2_ATTENTION = "lextra_s2"
#: LongLoRA's default group: a quarter of the training window
DEFAULT_GROUP_RATIO = 4


def check_group(group: int, window: int) -> int:
    """`group` when it is even and divides `window` into at least two groups, else a one-line error."""
    if isinstance(group, bool) or not isinstance(group, int) or group < 2 or group % 2:
        raise ConfigError(f"--s2-attn {group}: the group size must be an even integer >= 2 (half of it is the shift)")
    if window % group or window == group:
        raise ConfigError(
            f"--s2-attn {group} does not divide the {window}-token window into two or more groups; "
            f"use a divisor such as {window // DEFAULT_GROUP_RATIO}"
        )
    return group


def _roll_half(x: Tensor, shift: int) -> Tensor:
    """`x` (B, H, L, ...) with the second half of the heads rolled by `shift` along L."""
    half = x.shape[1] // 2
    return torch.cat([x[:, :half], x[:, half:].roll(shift, dims=2)], dim=1)


def s2_attention(
    module: Any,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """q (B, H, L, D), k and v (B, Hkv, L, D) -> ((B, L, H, D), None): S2-Attn while the module trains, else causal."""
    H, L = query.shape[1:3]
    groups = H // key.shape[1]  # grouped-query attention: every query head gets its key/value head
    key, value = expand_kv(key, groups), expand_kv(value, groups)
    p = dropout if module.training else 0.0
    if not module.training:
        mask = attention_mask
        if mask is None and L > 1:  # causal, the queries being the last L of the keys (a cache holds the rest)
            Lk = key.shape[2]
            mask = torch.ones(L, Lk, dtype=torch.bool, device=query.device).tril(Lk - L)
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling)
        return out.transpose(1, 2).contiguous(), None
    if key.shape[2] != L or not _unpadded(attention_mask, L, getattr(module, "lextra_s2_window", None)):
        raise ConfigError("S2-Attn trains on whole unpadded windows without a cache; pass no attention mask")
    group = check_group(int(module.lextra_s2_group), L)
    if getattr(module, "lextra_s2_roll", False):
        rolled = tuple(_roll_half(x, -(group // 2)) for x in (query, key, value))
        out = _roll_half(_grouped_causal(rolled, group, p, scaling), group // 2)
    else:
        out = _shifted_groups(query, key, value, group, p, scaling)
    return out.transpose(1, 2).contiguous(), None


def _unpadded(mask: Tensor | None, length: int, window: int | None) -> bool:
    """Whether `mask` hides nothing but what the layer's own causal (sliding `window`) mask hides."""
    if mask is None:
        return True
    if window is None or mask.dtype != torch.bool:
        return False
    i = torch.arange(length, device=mask.device)
    band = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < window)
    return bool((mask == band).all())


def _grouped_causal(qkv: tuple[Tensor, ...], size: int, dropout: float, scale: float | None) -> Tensor:
    """Causal attention within consecutive blocks of `size` tokens: q, k, v (B, h, L, D) -> (B, h, L, D)."""
    B, h, L, D = qkv[0].shape
    q, k, v = (x.reshape(B, h, L // size, size, D) for x in qkv)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout, scale=scale)
    return out.reshape(B, h, L, D)


def _shifted_groups(q: Tensor, k: Tensor, v: Tensor, group: int, dropout: float, scale: float | None) -> Tensor:
    """S2-Attn without wrap-around (the authors' `forward_flashattn`): heads 0..H//2-1 in groups 0..G-1, G..2G-1,
    ...; the others in the half group 0..G/2-1, groups G/2..3G/2-1, ..., and the half group L-G/2..L-1."""
    half, shift, L = q.shape[1] // 2, group // 2, q.shape[2]
    plain = _grouped_causal((q[:, :half], k[:, :half], v[:, :half]), group, dropout, scale)
    qs, ks, vs = q[:, half:], k[:, half:], v[:, half:]
    middle = _grouped_causal((qs[:, :, shift:-shift], ks[:, :, shift:-shift], vs[:, :, shift:-shift]), group,
                             dropout, scale)  # fmt: skip
    ends = [torch.cat((x[:, :, :shift], x[:, :, L - shift :]), 2) for x in (qs, ks, vs)]
    edge = _grouped_causal((ends[0], ends[1], ends[2]), shift, dropout, scale)  # the two half groups
    shifted = torch.cat((edge[:, :, :shift], middle, edge[:, :, shift:]), dim=2)
    return torch.cat((plain, shifted), dim=1)


def _s2_refusal(mask: str, pieces: dict[str, Any], group: int) -> str | None:
    """Why S2-Attn in groups of `group` would not be this layer's attention restricted to the groups (None: it is)."""
    if "sinks" in pieces:
        return "has learned attention sinks"
    if "softcap" in pieces:
        return "softcaps its attention logits"
    if mask.startswith("chunk:"):
        return f"attends in chunks of {mask.split(':')[1]} tokens, which the shifted groups cross"
    if mask.startswith("window:") and int(mask.split(":")[1]) < group:
        return f"slides a window of {mask.split(':')[1]} tokens, narrower than the group of {group}"
    return None


def check_s2_layers(model: Any, group: int) -> None:
    """Refuse S2-Attn (one line) on a model with a layer where the grouped attention is not exact (module doc)."""
    modules = [layer.self_attn for layer in model.model.layers]
    for index, (mask, pieces) in enumerate(attention_kinds(model.config, modules)):
        reason = _s2_refusal(mask, pieces, group)
        if reason is not None:
            hint = "use a group no wider than the window" if reason.startswith("slides") else "drop --s2-attn"
            raise ConfigError(
                f"--s2-attn {group}: {model.config.model_type} layer {index} {reason}, so S2-Attn's grouped causal "
                f"attention would not be its attention; {hint}"
            )


def register_s2() -> None:
    """Make `attn_implementation="lextra_s2"` known to transformers (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(S2_ATTENTION, s2_attention)
    AttentionMaskInterface.register(S2_ATTENTION, sdpa_mask)


def enable_s2(model: Any, group: int, *, roll: bool = False) -> None:
    """Train `model` (before any peft wrapping) with S2-Attn in groups of `group` tokens; `disable_s2` undoes it."""
    register_s2()
    model.set_attn_implementation(S2_ATTENTION)
    layers = model.model.layers
    kinds = attention_kinds(model.config, [layer.self_attn for layer in layers])
    for layer, (mask, _) in zip(layers, kinds, strict=True):
        layer.self_attn.lextra_s2_group = group
        layer.self_attn.lextra_s2_roll = bool(roll)
        #: a sliding layer's window, whose mask Hugging Face hands the attention function
        layer.self_attn.lextra_s2_window = int(mask.split(":")[1]) if mask.startswith("window:") else None


def disable_s2(model: Any) -> None:
    """Back to Hugging Face's SDPA attention (what the saved model runs with)."""
    if getattr(model.config, "_attn_implementation", None) == S2_ATTENTION:
        model.set_attn_implementation("sdpa")
