"""The attention seam's types: the call's `AttentionContext`, the `AttentionBackend` and `AttentionExtension`
interfaces, and the keyword options `attention(q, k, v, **options)` builds a context from.

Every backend computes `run(q, k, v, ctx)`: the context carries everything a call applies besides q, k and v
(scheme, mask, positions, scale, temperature, block size, sinks, softcap), the backend it asked for (`backend`,
"auto" by default) and the extension or wrapper it attends through (`extension`), checked and normalised once.
An extension (a training-free method's passes, S2-Attn) is a wrapper: it names the backend that computes a call
under it (`AttentionExtension.backend_for`), so one dispatch (`lextra.attention.backends.run_attention`) serves
plain and extended calls alike.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, TypedDict, Unpack

import torch
from torch import Tensor

from lextra.attention.layout import PositionLayout
from lextra.attention.masks import Mask, build_mask
from lextra.errors import ConfigError
from lextra.positions.base import PositionScheme


class AttentionOptions(TypedDict, total=False):
    """The keyword options of `attention(q, k, v, **options)` and `AttentionContext.build(q, k, **options)`.

    `temperature` divides the logits (scalar, (H,) or (H, Lq)); `scale` defaults to 1/sqrt(D); `backend` names a
    registered backend or "auto"; `layout` gives the positions' host-side facts where the caller knows them;
    `sinks` (H,) adds a learned logit per head to each softmax's denominator (gpt-oss); `softcap` caps the scores
    as tanh(s / c) c before the mask (Gemma 2)."""

    scheme: PositionScheme | None
    mask: Mask | str | None
    q_pos: Tensor | None
    k_pos: Tensor | None
    backend: str
    temperature: Tensor | float | None
    scale: float | None
    block_size: int | None
    extension: AttentionExtension | None
    layout: PositionLayout | None
    sinks: Tensor | None
    softcap: float | None


def default_positions(q: Tensor, k: Tensor, q_pos: Tensor | None, k_pos: Tensor | None) -> tuple[Tensor, Tensor]:
    """The positions `attention` uses: keys at 0..Lk-1 and queries the last Lq of them unless given; positions
    that do not match the lengths are a ConfigError."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    if k_pos is None:
        k_pos = torch.arange(Lk, device=q.device)
    if q_pos is None:
        q_pos = k_pos[Lk - Lq :] if Lq <= Lk else torch.arange(Lq, device=q.device)
    if q_pos.numel() != Lq or k_pos.numel() != Lk:
        raise ConfigError(
            f"positions do not match lengths: q_pos {q_pos.numel()} vs Lq {Lq}, k_pos {k_pos.numel()} vs Lk {Lk}"
        )
    return q_pos, k_pos


@dataclass(frozen=True)
class AttentionContext:
    """Everything one attention call applies besides q, k and v, checked and normalised once.

    `tau` is the temperature as a (H, Lq) -broadcastable fp32 tensor (a layer's log-n scaling folded in by the
    layer), or None for 1; `extension` the wrapper the call attends through (a training-free extension method,
    S2-Attn), or None; `backend` the backend the call asked for ("auto": the first of the device's order that
    applies). `device`, `dtype` and `head_dim` describe q, so a backend decides from the context alone.
    """

    scheme: PositionScheme | None
    mask: Mask
    q_pos: Tensor
    k_pos: Tensor
    scale: float
    tau: Tensor | None = None
    block_size: int | None = None
    extension: AttentionExtension | None = None
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    dtype: torch.dtype = torch.float32
    head_dim: int | None = None
    layout: PositionLayout | None = None
    #: learned sink logits (H,): one more term exp(sink_h) in each softmax's denominator (gpt-oss), or None
    sinks: Tensor | None = None
    #: logit softcapping: scores become tanh(s / softcap) softcap before the mask (Gemma 2), or None
    softcap: float | None = None
    #: the backend the call asked for: a registered name or "auto"
    backend: str = "auto"

    def __post_init__(self) -> None:
        if self.layout is None:  # one device read here, so that no backend decision reads positions again
            object.__setattr__(self, "layout", PositionLayout.of(self.q_pos, self.k_pos))

    @property
    def facts(self) -> PositionLayout:
        """The positions' host-side facts (`layout`, always set after construction)."""
        assert self.layout is not None  # set by __post_init__
        return self.layout

    @property
    def seq_len(self) -> int | None:
        """The largest position + 1 (what length-dependent scalings use), or None without positions."""
        return self.facts.seq_len

    @classmethod
    def build(cls, q: Tensor, k: Tensor, **options: Unpack[AttentionOptions]) -> AttentionContext:
        """The context of `attention(q, k, v, **options)`: default positions (keys at 0..Lk-1, queries the last Lq
        of them), scale 1/sqrt(D), the temperature normalised; mismatched lengths and bad temperatures, sinks or
        softcaps refused. Default positions need no `layout`; other positions are read once (`PositionLayout.of`)."""
        mask = build_mask(options.get("mask", "causal"))
        q_pos, k_pos, layout = options.get("q_pos"), options.get("k_pos"), options.get("layout")
        Lq, Lk = q.shape[-2], k.shape[-2]
        if layout is None and q_pos is None and k_pos is None:
            layout = PositionLayout.ranges(Lk - Lq if Lq <= Lk else 0, Lq, 0, Lk)
        q_pos, k_pos = default_positions(q, k, q_pos, k_pos)
        scale = options.get("scale")
        sinks, softcap = options.get("sinks"), options.get("softcap")
        if sinks is not None and tuple(sinks.shape) != (q.shape[1],):
            raise ConfigError(f"sinks must hold one logit per head ({q.shape[1]},), got shape {tuple(sinks.shape)}")
        if softcap is not None and not (math.isfinite(softcap) and softcap > 0):
            raise ConfigError(f"softcap must be a positive number, got {softcap!r}")
        return cls(
            options.get("scheme"),
            mask,
            q_pos,
            k_pos,
            1.0 / math.sqrt(q.shape[-1]) if scale is None else scale,
            _temperature(options.get("temperature"), q),
            options.get("block_size"),
            options.get("extension"),
            q.device,
            q.dtype,
            q.shape[-1],
            layout,
            sinks,
            softcap,
            options.get("backend", "auto"),
        )


def _temperature(temperature: Tensor | float | None, q: Tensor) -> Tensor | None:
    """Temperature as a (H, Lq) -broadcastable fp32 tensor, or None for 1."""
    if temperature is None:
        return None
    tau = torch.as_tensor(temperature, dtype=torch.float32, device=q.device)
    if tau.dim() == 1:
        tau = tau[:, None]
    if tau.dim() > 2:
        raise ConfigError(f"temperature must be a scalar, (H,) or (H, Lq); got shape {tuple(tau.shape)}")
    if bool((tau <= 0).any()):
        raise ConfigError("temperature must be positive")
    return tau


class AttentionBackend(ABC):
    """One way to compute attention: `applies(ctx)` says why it cannot compute a call exactly (None: it can),
    `run(q, k, v, ctx)` computes it. `declines(ctx)` is why `auto` passes it over although it applies (a cheaper
    path exists); an explicitly chosen backend runs whenever it applies."""

    name: ClassVar[str] = "backend"

    @abstractmethod
    def applies(self, ctx: AttentionContext) -> str | None:
        """None when this backend computes the call exactly, else a one-line reason naming the fix."""

    @abstractmethod
    def run(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        """softmax((rotate(q) . rotate(k) * scale + bias) / tau, masked) v for this context."""

    def declines(self, ctx: AttentionContext) -> str | None:
        """Why `auto` skips this backend although it applies (default: never)."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class AttentionExtension(ABC):
    """A wrapper a layer attends through instead of the plain backends: a training-free extension method's passes
    (`lextra.extend.ExtendedAttention`) or S2-Attn (`lextra.attention.s2.S2Attention`). `backend_for` names the
    backend that computes a call under it (from the call's `ctx.backend`); `retains` says which cached keys
    later queries still see."""

    #: the wrapper's name, for errors
    name: str = "extension"

    @abstractmethod
    def backend_for(self, ctx: AttentionContext) -> AttentionBackend:
        """The backend computing `ctx` under this wrapper for the backend the call asked for (`ctx.backend`);
        a ConfigError naming the ones it has when it has no such path."""

    def retains(self, k_pos: Tensor, next_query: int) -> Tensor | None:
        """Which cached keys a query at `next_query` or later can still see (None: all of them)."""
        return None
