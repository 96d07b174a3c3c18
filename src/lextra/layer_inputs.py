"""What a GPT layer receives besides its hidden states (`LayerInputs`) and what an observer sees of a layer just
before it attends (`AttentionInputs`, `LayerObserver`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from lextra.attention import PositionLayout
from lextra.attention.forget_bias import ForgetBias
from lextra.attention.masks import Mask
from lextra.kv_cache import KVCache
from lextra.positions import PositionScheme


@dataclass
class AttentionInputs:
    """What one attention layer is about to score, as an observer of `GPT.forward_layers` sees it: q (B, H, Lq, D)
    and k (B, H, Lk, Dk) before the position transform, the temperature (None, (H,) or (H, Lq)), mask, sinks and
    softcap."""

    layer: int
    q: Tensor
    k: Tensor
    scheme: PositionScheme
    q_pos: Tensor
    k_pos: Tensor
    mask: Mask
    temperature: Tensor | None
    sinks: Tensor | None = None
    softcap: float | None = None
    forget: ForgetBias | None = None  # FoX's forget bias (c at the queries and keys), or None


#: called with each layer's inputs just before it attends; it may raise to stop the forward pass there
LayerObserver = Callable[[AttentionInputs], None]


@dataclass(frozen=True)
class LayerInputs:
    """What a block needs besides its hidden states: scheme, positions, the call's mask (None: each layer's own),
    backend, cache, layer index, observer, `layout` (host-side facts of the positions) and `queries` (only the last
    that many rows are wanted)."""

    scheme: PositionScheme
    positions: Tensor
    mask: Mask | None
    backend: str = "auto"
    cache: KVCache | None = None
    layer: int = 0
    observer: LayerObserver | None = None
    layout: PositionLayout | None = None
    queries: int | None = None
