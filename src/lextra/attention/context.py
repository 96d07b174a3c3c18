"""The attention seam's types: the call's `AttentionContext`, the `AttentionBackend` and `AttentionExtension`
interfaces, and the keyword options `attention(q, k, v, **options)` builds a context from. Every backend computes
`run(q, k, v, ctx)`; an extension is a wrapper: a training-free method (a `PassExtension`, whose passes the
backends run) or S2-Attn, which names the backend computing a call under it (`AttentionExtension.backend_for`)."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import ClassVar, TypedDict, Unpack

import torch
from torch import Tensor

from lextra.attention.forget_bias import ForgetBias
from lextra.attention.layout import PositionLayout
from lextra.attention.masks import Mask, Pass, build_mask
from lextra.errors import ConfigError
from lextra.positions.base import PositionScheme


class AttentionOptions(TypedDict, total=False):
    """The keyword options of `attention(q, k, v, **options)` and `AttentionContext.build(q, k, **options)`.

    `temperature` divides the logits (scalar, (H,) or (H, Lq)); `sinks` (H,) add a learned logit per head to
    each denominator (gpt-oss); `softcap` caps scores as tanh(s / c) c (Gemma 2); `score_bias` is additive,
    broadcastable to (B, H, Lq, Lk) (T5); `padding` broadcastable to (B, 1|H, Lq, Lk), boolean (True: visible) or
    additive (0 visible)."""

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
    score_bias: Tensor | None
    padding: Tensor | None
    forget: ForgetBias | None


def default_positions(q: Tensor, k: Tensor, q_pos: Tensor | None, k_pos: Tensor | None) -> tuple[Tensor, Tensor]:
    """The positions `attention` uses unless given: keys at 0..Lk-1, queries the last Lq of them (checked)."""
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

    `tau` is the temperature as a (H, Lq) -broadcastable fp32 tensor, or None for 1; `device`, `dtype` and `head_dim`
    describe q, so a backend decides from the context alone. `score_bias` and `padding` are materialised (B|1, H|1,
    Lq|1, Lk) tensors, run only by backends that declare `takes_bias_and_padding`."""

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
    #: learned sink logits (H,) in each softmax's denominator (gpt-oss), per row (H, Lq) after `fold_heads`
    sinks: Tensor | None = None
    #: logit softcapping: scores become tanh(s / softcap) softcap before the mask (Gemma 2), or None
    softcap: float | None = None
    #: the backend the call asked for: a registered name or "auto"
    backend: str = "auto"
    #: an additive fp32 score tensor (B|1, H|1, Lq|1, Lk) added with the scheme's bias (T5's `position_bias`)
    score_bias: Tensor | None = None
    #: a boolean padding mask (B|1, H|1, Lq|1, Lk), True visible, joined to `mask`; a row it hides gives 0
    padding: Tensor | None = None
    #: FoX's forget bias c_i - c_j as c at the queries and keys (`lextra.attention.backends.forget` runs it)
    forget: ForgetBias | None = None

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

    @property
    def passes(self) -> PassExtension | None:
        """The extension whose passes the call runs instead of `mask` (None: plain attention)."""
        return self.extension if isinstance(self.extension, PassExtension) else None

    @property
    def materialised(self) -> bool:
        """Whether the call carries a materialised score bias or padding mask."""
        return self.score_bias is not None or self.padding is not None

    def allowed(self) -> Tensor:
        """The visible (query, key) pairs: the mask's (Lq, Lk), and with padding (B|1, H|1, Lq, Lk)."""
        allowed = self.mask.allowed(self.q_pos, self.k_pos)
        return allowed if self.padding is None else allowed & self.padding

    def rows(self, start: int, stop: int) -> AttentionContext:
        """The context of queries start..stop - 1 alone, its per-query tensors sliced to those rows."""
        tau = self.tau
        if tau is not None and tau.dim() > 0 and tau.shape[-1] != 1:
            tau = tau[..., start:stop]
        sinks = self.sinks
        if sinks is not None and sinks.dim() == 2:
            sinks = sinks[:, start:stop]
        return replace(
            self,
            q_pos=self.q_pos[start:stop],
            tau=tau,
            sinks=sinks,
            score_bias=_query_rows(self.score_bias, start, stop),
            padding=_query_rows(self.padding, start, stop),
            layout=None,
        )

    def fold_heads(self, heads: int, groups: int) -> AttentionContext:
        """The context with the query heads sharing a key/value head folded into its rows: q (B, heads, Lq, D) read
        as (B, heads / groups, groups x Lq, D), head h = j x groups + g at row g x Lq + i of key/value head j; the
        temperature and sinks become per row."""
        facts, n_q = self.facts, self.q_pos.numel()
        n = n_q * groups
        # the same first, last, smallest and largest positions; repeated runs are not contiguous
        layout = replace(facts, n_q=n, q_contiguous=n <= 1, same=False) if n != facts.n_k else None
        return replace(
            self,
            q_pos=self.q_pos.repeat(groups),
            tau=None if self.tau is None else _per_row(self.tau, heads, groups, n_q),
            sinks=None if self.sinks is None else _per_row(self.sinks.reshape(heads, -1), heads, groups, n_q),
            layout=layout,
        )

    @classmethod
    def build(cls, q: Tensor, k: Tensor, **options: Unpack[AttentionOptions]) -> AttentionContext:
        """The context of `attention(q, k, v, **options)`: defaults filled in, bad options refused."""
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
        score_bias = _score_bias(options.get("score_bias"), q, k)
        padding = _padding(options.get("padding"), q, k)
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
            score_bias,
            padding,
            options.get("forget"),
        )


def _check_pairs(name: str, tensor: Tensor, q: Tensor, k: Tensor) -> None:
    """A ConfigError unless `tensor` is 4-D and broadcastable to (B, H, Lq, Lk)."""
    target = (q.shape[0], q.shape[1], q.shape[-2], k.shape[-2])
    if tensor.dim() != 4 or any(n not in (1, t) for n, t in zip(tensor.shape, target, strict=True)):
        raise ConfigError(f"{name} must be broadcastable to (B, H, Lq, Lk) = {target}, got {tuple(tensor.shape)}")


def _score_bias(bias: Tensor | None, q: Tensor, k: Tensor) -> Tensor | None:
    """The score bias as an fp32 tensor on q's device (checked against the lengths), or None."""
    if bias is None:
        return None
    _check_pairs("score_bias", bias, q, k)
    return bias.to(device=q.device, dtype=torch.float32)


def _padding(padding: Tensor | None, q: Tensor, k: Tensor) -> Tensor | None:
    """A padding mask as a boolean `allowed` tensor: kept when boolean, an additive one visible where it is 0;
    other dtypes are a ConfigError."""
    if padding is None:
        return None
    _check_pairs("padding", padding, q, k)
    if padding.dtype == torch.bool:
        return padding.to(q.device)
    if not padding.is_floating_point():
        raise ConfigError(f"padding must be boolean or an additive float mask, got dtype {padding.dtype}")
    return (padding == 0).to(q.device)


def _per_row(values: Tensor, heads: int, groups: int, n_q: int) -> Tensor:
    """Per-head, per-query values (H|1, Lq|1) laid out as a fold's rows: (H / groups, groups x Lq)."""
    return values.expand(heads, n_q).reshape(heads // groups, groups * n_q)


def _query_rows(tensor: Tensor | None, start: int, stop: int) -> Tensor | None:
    """Rows start..stop - 1 of a (.., Lq|1, Lk) tensor (a broadcast query axis stays as it is)."""
    if tensor is None or tensor.shape[-2] == 1:
        return tensor
    return tensor[..., start:stop, :]


def _temperature(temperature: Tensor | float | None, q: Tensor) -> Tensor | None:
    """Temperature as an fp32 (1|H, 1|Lq) tensor (a scalar as (1, 1)), or None for 1."""
    if temperature is None:
        return None
    tau = torch.as_tensor(temperature, dtype=torch.float32, device=q.device)
    if tau.dim() < 2:
        tau = tau.reshape(-1, 1)
    if tau.dim() > 2:
        raise ConfigError(f"temperature must be a scalar, (H,) or (H, Lq); got shape {tuple(tau.shape)}")
    if bool((tau <= 0).any()):
        raise ConfigError("temperature must be positive")
    return tau


class AttentionBackend(ABC):
    """One way to compute attention: `applies(ctx)` says why it cannot compute a call exactly (None: it can),
    `run(q, k, v, ctx)` computes it, `declines(ctx)` is why `auto` passes it over although it applies."""

    name: ClassVar[str] = "backend"
    #: whether `run` applies a context's `score_bias` and `padding` (the dispatch checks)
    takes_bias_and_padding: ClassVar[bool] = False

    def applies(self, ctx: AttentionContext) -> str | None:
        """None when this backend computes the call exactly (default), else a one-line reason."""
        return None

    @abstractmethod
    def run(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        """softmax((rotate(q) . rotate(k) * scale + bias) / tau, masked) v for this context."""

    def declines(self, ctx: AttentionContext) -> str | None:
        """Why `auto` skips this backend although it applies (default: never)."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class AttentionExtension:
    """A wrapper a layer attends through: a training-free extension method (a `PassExtension`) or S2-Attn, which
    names the backend computing a call under it (`backend_for`); `retains` says which cached keys later queries see."""

    #: the wrapper's name, for errors
    name: str = "extension"
    #: whether it treats every head alike, so grouped query heads may be folded into rows (`fold_heads`)
    heads_alike: ClassVar[bool] = False

    def backend_for(self, ctx: AttentionContext) -> AttentionBackend | None:
        """The backend computing `ctx` under this wrapper, or None where the dispatch chooses."""
        return None

    def retains(self, k_pos: Tensor, next_query: int) -> Tensor | None:
        """Which cached keys a query at `next_query` or later can still see (None: all of them)."""
        return None


class PassExtension(AttentionExtension, ABC):
    """An extension whose passes the backends run (`lextra.extend.ExtensionMethod`): the formula (`remap`,
    `query_scale`) for the dense reference, and per block of queries inside one `period` the passes whose partial
    softmaxes merge by log-sum-exp. The call's mask must be causal."""

    heads_alike = True
    #: query blocks of the fast path are cut at multiples of this many positions, or None
    period: int | None = None

    @abstractmethod
    def remap(self, m: Tensor, n: Tensor) -> tuple[Tensor, Tensor]:
        """Elementwise, broadcasting over position tensors: (d' as float64, visible) for each pair."""

    @abstractmethod
    def passes(self, q_first: int, q_last: int) -> list[Pass]:
        """The passes for queries at positions q_first..q_last (inside one `period`); the first one holds d = 0."""

    def query_scale(self, m: Tensor) -> Tensor | None:
        """A factor on each query's logits (Lq,) in fp32, or None (1)."""
        return None

    @abstractmethod
    def check(self, scheme: PositionScheme | None, n_positions: int) -> None:
        """Refuse a call the extension cannot run (its scheme, its length) with an error naming the fix."""
