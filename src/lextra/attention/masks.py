"""Attention masks (the fourth place position enters): causal, sliding window, blockwise causal, chunked, full.

A mask is a visibility rule, `visible(q, k)`, plus declarations the backends' fast paths read (`allowed_distance`,
`key_range`, `key_spans`, `period`, `within`, `band`, `causal`, `exactly_causal`, `hides_nothing`); each default
is the conservative answer, so a mask that declares nothing but `visible` is still exact."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from lextra.attention.layout import PositionLayout
from lextra.errors import ConfigError
from lextra.registry import Registry

UNBOUNDED = 1 << 62
#: query rows per step when counting visible keys densely (masks without a distance rule)
_COUNT_ROWS = 256


@dataclass(frozen=True)
class Pass:
    """One attention pass for a block of queries (an extension method's, or a mask's band): pair (m, n) is in it
    when `keys[0] <= n <= keys[1]` and `distance[0] <= m - n <= distance[1]` (inclusive); `q_at` and `k_at` map
    positions to those their rotation uses (long or float64)."""

    name: str
    q_at: Callable[[Tensor], Tensor]
    k_at: Callable[[Tensor], Tensor]
    distance: tuple[int, int] = (0, UNBOUNDED)
    keys: tuple[int, int] = (-UNBOUNDED, UNBOUNDED)

    def visible(self, m: Tensor, n: Tensor) -> Tensor:
        """Elementwise, broadcasting: True where query position m sees key position n in this pass."""
        d = m - n
        lo, hi = self.distance
        k_lo, k_hi = self.keys
        return (d >= lo) & (d <= hi) & (n >= k_lo) & (n <= k_hi)


def same_position(positions: Tensor) -> Tensor:
    """Rotate at the token's own position."""
    return positions


class Mask:
    """Base class of the mask registry: subclasses define `visible` or `allowed_distance`, and declare the rest."""

    name: ClassVar[str] = "mask"
    summary: ClassVar[str] = ""
    #: the option a bare `name:VALUE` spec sets, or None
    positional: ClassVar[str | None] = None
    #: no query sees a later key (k <= q wherever visible): a query block's keys stop at its last query
    causal: ClassVar[bool] = False
    #: the mask is plain causal attention (k <= q): fused kernels' `is_causal=True` and the tiled path apply
    exactly_causal: ClassVar[bool] = False
    #: every query sees every key (the full mask): no mask tensor is built or passed at all
    hides_nothing: ClassVar[bool] = False
    #: queries are cut at multiples of this many positions by the fast backends (BCA's blocks), or None
    period: int | None = None
    #: the positional option defaults to the training length over this (window, chunk: 1; BCA: 2), or None
    train_len_share: ClassVar[int | None] = None

    @classmethod
    def resolve_options(cls, options: dict[str, Any], train_len: int | None = None) -> dict[str, Any]:
        """The positional option's default from the training length (`train_len_share`), when the mask has one."""
        name, share = cls.positional, cls.train_len_share
        if name is None or share is None or name in options:
            return options
        if train_len is None or train_len < share:
            raise ConfigError(
                f"{cls.name} needs a {name}: use '{cls.name}:{name[0].upper()}' or give the training length"
            )
        options[name] = train_len // share
        return options

    def visible(self, q: Tensor, k: Tensor) -> Tensor:
        """Elementwise, broadcasting rule on position tensors: True where query position q may attend key k."""
        rule = self.allowed_distance(q - k)
        if rule is None:
            raise TypeError(f"mask {self.name!r} defines neither visible() nor allowed_distance()")
        return rule

    def allowed(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Boolean (Lq, Lk): True where the query at q_pos[i] may attend the key at k_pos[j] (the dense truth)."""
        return self.visible(q_pos[:, None], k_pos[None, :])

    def allowed_distance(self, distance: Tensor) -> Tensor | None:
        """Which distances d = m - n are visible, for masks that depend on d alone; None otherwise (BCA)."""
        if self.exactly_causal:
            return distance >= 0
        if self.hides_nothing:
            return torch.ones_like(distance, dtype=torch.bool)
        return None

    def key_range(self, q_first: int, q_last: int) -> tuple[int, int]:
        """Inclusive bounds of the key positions visible to any query position in [q_first, q_last]."""
        return (-UNBOUNDED, q_last) if self.causal else (-UNBOUNDED, UNBOUNDED)

    def key_spans(self, q_first: int, q_last: int) -> list[tuple[int, int]]:
        """Sorted, disjoint inclusive ranges holding every key visible to queries in [q_first, q_last]."""
        return [self.key_range(q_first, q_last)]

    def within(self, q_first: int, q_last: int) -> Mask:
        """An equivalent mask for queries in [q_first, q_last] over the keys `key_spans` gives them."""
        return self

    def band(self, q_first: int, q_last: int) -> tuple[tuple[int, int], tuple[int, int]] | None:
        """The exact rule for queries in [q_first, q_last] (inside one `period`) as ((k_lo, k_hi), (d_lo, d_hi)):
        query m sees key n iff k_lo <= n <= k_hi and d_lo <= m - n <= d_hi; None when the mask is no such rule there."""
        if self.exactly_causal:
            return (-UNBOUNDED, UNBOUNDED), (0, UNBOUNDED)
        if self.hides_nothing:
            return (-UNBOUNDED, UNBOUNDED), (-UNBOUNDED, UNBOUNDED)
        return None

    def shows_every_key(self, facts: PositionLayout) -> bool:
        """Whether every query sees every key at positions with these host-side facts (no device read)."""
        if self.hides_nothing:
            return True
        if facts.n_q == 0 or facts.n_k == 0:
            return False
        if self.period is not None and facts.q_min // self.period != facts.q_max // self.period:
            return False
        rule = self.band(facts.q_min, facts.q_max)
        if rule is None:
            return False
        (k_lo, k_hi), (d_lo, d_hi) = rule
        keys_in = k_lo <= facts.k_min and facts.k_max <= k_hi
        return keys_in and d_lo <= facts.q_min - facts.k_max and facts.q_max - facts.k_min <= d_hi

    def visible_keys(self, q_pos: Tensor, k_first: int, k_last: int) -> Tensor:
        """How many keys at contiguous positions k_first..k_last each query sees, at least 1 (log-n scalings' n)."""
        if q_pos.numel() == 0:
            return q_pos.clone()
        d_first = int(q_pos.min()) - k_last
        distance = torch.arange(d_first, int(q_pos.max()) - k_first + 1, device=q_pos.device)
        by_distance = self.allowed_distance(distance)
        if by_distance is not None:  # keys of query q lie at distances q - k_last .. q - k_first: a prefix sum
            seen = torch.cat((distance.new_zeros(1), by_distance.long().cumsum(0)))
            counts = seen[q_pos - k_first - d_first + 1] - seen[q_pos - k_last - d_first]
        else:
            keys = torch.arange(k_first, k_last + 1, device=q_pos.device)
            rows = [
                self.allowed(q_pos[i : i + _COUNT_ROWS], keys).sum(-1) for i in range(0, q_pos.numel(), _COUNT_ROWS)
            ]
            counts = torch.cat(rows)
        return counts.clamp(min=1)

    @property
    def options(self) -> dict[str, Any]:
        return {}

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v}" for k, v in self.options.items())
        return f"{self.name}({opts})"


def _causal_counts(q_pos: Tensor, k_first: int, k_last: int) -> Tensor:
    """Keys at or before each query among k_first..k_last, at least 1."""
    return (q_pos.clamp(max=k_last) - k_first + 1).clamp(min=1)


MASKS: Registry[Mask] = Registry("mask")


@MASKS.register("causal")
class CausalMask(Mask):
    """Each query sees itself and every earlier key."""

    summary = "each token attends to itself and all earlier tokens"
    causal = True
    exactly_causal = True

    def visible(self, q: Tensor, k: Tensor) -> Tensor:
        return k <= q

    def visible_keys(self, q_pos: Tensor, k_first: int, k_last: int) -> Tensor:
        return _causal_counts(q_pos, k_first, k_last)


@MASKS.register("window")
class WindowMask(Mask):
    """Sliding window: 0 <= m - n < width (each query sees itself and width - 1 earlier keys)."""

    summary = "sliding window: attend to the last `width` tokens (0 <= m - n < w)"
    causal = True
    positional = "width"
    derived_defaults: ClassVar[dict[str, str]] = {"width": "L_tr"}
    train_len_share = 1

    def __init__(self, *, width: int) -> None:
        if int(width) < 1:
            raise ConfigError(f"window: width must be >= 1, got {width}")
        self.width = int(width)

    def allowed_distance(self, distance: Tensor) -> Tensor:
        return (distance >= 0) & (distance < self.width)

    def visible_keys(self, q_pos: Tensor, k_first: int, k_last: int) -> Tensor:
        return _causal_counts(q_pos, k_first, k_last).clamp(max=self.width)

    def key_range(self, q_first: int, q_last: int) -> tuple[int, int]:
        return q_first - self.width + 1, q_last

    def band(self, q_first: int, q_last: int) -> tuple[tuple[int, int], tuple[int, int]] | None:
        return (-UNBOUNDED, UNBOUNDED), (0, self.width - 1)

    @property
    def options(self) -> dict[str, Any]:
        return {"width": self.width}


class BlockedMask(Mask):
    """Causal attention in blocks of `block` positions: a query sees, causally, its own block and the
    `lookback` blocks before it (BCA: 1, chunk: 0)."""

    causal = True
    lookback: ClassVar[int] = 0
    block: int

    def visible(self, q: Tensor, k: Tensor) -> Tensor:
        return (k <= q) & (k // self.block >= q // self.block - self.lookback)

    def _first_key(self, q_first: int) -> int:
        return (q_first // self.block - self.lookback) * self.block

    def key_range(self, q_first: int, q_last: int) -> tuple[int, int]:
        return self._first_key(q_first), q_last

    @property
    def period(self) -> int:  # type: ignore[override]
        return self.block

    def within(self, q_first: int, q_last: int) -> Mask:
        """Queries inside one block see their keys (from `key_range`'s first on) causally: the causal mask."""
        return CausalMask() if q_first // self.block == q_last // self.block else self

    def band(self, q_first: int, q_last: int) -> tuple[tuple[int, int], tuple[int, int]] | None:
        """Inside one block: the keys from `key_range`'s first on, causally."""
        if q_first // self.block != q_last // self.block:
            return None
        return (self._first_key(q_first), UNBOUNDED), (0, UNBOUNDED)

    def visible_keys(self, q_pos: Tensor, k_first: int, k_last: int) -> Tensor:
        first = ((q_pos // self.block - self.lookback) * self.block).clamp(min=k_first)
        return (q_pos.clamp(max=k_last) - first + 1).clamp(min=1)


@MASKS.register("bca")
class BlockCausalMask(BlockedMask):
    """Blockwise causal attention (Sun et al. 2022, arXiv 2212.10554; inference only): positions split into
    blocks of `block` (L_tr / 2); a query attends causally within its block and to the whole previous block."""

    summary = "blockwise causal (Sun 2022): own block causally + the previous block; block = L_tr/2"
    positional = "block"
    lookback = 1
    derived_defaults: ClassVar[dict[str, str]] = {"block": "L_tr / 2"}
    train_len_share = 2  # Sun et al. 2022

    def __init__(self, *, block: int) -> None:
        if int(block) < 1:
            raise ConfigError(f"bca: block must be >= 1, got {block}")
        self.block = int(block)

    @property
    def options(self) -> dict[str, Any]:
        return {"block": self.block}


@MASKS.register("chunk")
class ChunkMask(BlockedMask):
    """Chunked attention (Llama 4's `attention_chunk_size`, `create_chunked_causal_mask`): positions split into
    chunks of `size`; a query attends causally within its own chunk only, so no query sees more than `size` keys."""

    summary = "chunked: attend causally within your own chunk of `size` tokens (Llama 4)"
    positional = "size"
    lookback = 0
    derived_defaults: ClassVar[dict[str, str]] = {"size": "L_tr"}
    train_len_share = 1

    def __init__(self, *, size: int) -> None:
        if int(size) < 1:
            raise ConfigError(f"chunk: size must be >= 1, got {size}")
        self.block = int(size)

    @property
    def size(self) -> int:
        return self.block

    @property
    def options(self) -> dict[str, Any]:
        return {"size": self.block}


@MASKS.register("full")
class FullMask(Mask):
    """Bidirectional: every query sees every key (encoders)."""

    summary = "bidirectional: every token attends to every token (encoders)"
    hides_nothing = True

    def allowed(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return torch.ones(q_pos.numel(), k_pos.numel(), dtype=torch.bool, device=q_pos.device)

    def visible_keys(self, q_pos: Tensor, k_first: int, k_last: int) -> Tensor:
        return torch.full_like(q_pos, k_last - k_first + 1)


def build_mask(spec: str | Mask | None, train_len: int | None = None, **options: Any) -> Mask:
    """A mask from its spec, `name[:positional][,key=value...]`; keyword `options` override the spec's."""
    if isinstance(spec, Mask):
        return spec
    return MASKS.build(spec or "causal", context={"train_len": train_len}, **options)
