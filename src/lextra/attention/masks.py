"""Attention masks (the fourth place position enters): causal, sliding window, blockwise causal, full.

Each mask answers two questions: which (query, key) position pairs may attend (`allowed`, the dense truth),
and which key positions a run of queries can see at all (`key_range`), so fast backends only touch those keys.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from lextra.errors import ConfigError
from lextra.registry import Registry

UNBOUNDED = 1 << 62


class Mask:
    """Base class of the mask registry."""

    name: ClassVar[str] = "mask"
    summary: ClassVar[str] = ""
    causal: ClassVar[bool] = True

    def allowed(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Boolean (Lq, Lk): True where the query at q_pos[i] may attend the key at k_pos[j]."""
        raise TypeError(f"mask {self.name!r} does not define allowed()")

    def key_range(self, q_first: int, q_last: int) -> tuple[int, int]:
        """Inclusive bounds of the key positions visible to any query position in [q_first, q_last]."""
        return -UNBOUNDED, q_last

    #: queries are cut at multiples of this many positions by the fast backends (BCA's blocks), or None
    period: int | None = None

    def allowed_distance(self, distance: Tensor) -> Tensor | None:
        """Which distances d = m - n are visible, for masks that depend on d alone; None otherwise (BCA)."""
        return None

    def within(self, q_first: int, q_last: int) -> Mask:
        """An equivalent mask for queries in [q_first, q_last] over the keys `key_range` gives them."""
        return self

    def visible_keys(self, q_pos: Tensor, k_first: int, k_last: int) -> Tensor:
        """How many keys at contiguous positions k_first..k_last each query sees (log-n scalings' n)."""
        return (torch.minimum(q_pos, torch.tensor(k_last)) - k_first + 1).clamp(min=1)

    @property
    def options(self) -> dict[str, Any]:
        return {}

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v}" for k, v in self.options.items())
        return f"{self.name}({opts})"


MASKS: Registry[Mask] = Registry("mask")


@MASKS.register("causal")
class CausalMask(Mask):
    """Each query sees itself and every earlier key."""

    summary = "each token attends to itself and all earlier tokens"

    def allowed(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return k_pos[None, :] <= q_pos[:, None]

    def allowed_distance(self, distance: Tensor) -> Tensor:
        return distance >= 0


@MASKS.register("window")
class WindowMask(Mask):
    """Sliding window: 0 <= m - n < width (each query sees itself and width - 1 earlier keys)."""

    summary = "sliding window: attend to the last `width` tokens (0 <= m - n < w)"

    def __init__(self, *, width: int) -> None:
        if int(width) < 1:
            raise ConfigError(f"window: width must be >= 1, got {width}")
        self.width = int(width)

    def allowed(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return self.allowed_distance(q_pos[:, None] - k_pos[None, :])

    def allowed_distance(self, distance: Tensor) -> Tensor:
        return (distance >= 0) & (distance < self.width)

    def visible_keys(self, q_pos: Tensor, k_first: int, k_last: int) -> Tensor:
        return super().visible_keys(q_pos, k_first, k_last).clamp(max=self.width)

    def key_range(self, q_first: int, q_last: int) -> tuple[int, int]:
        return q_first - self.width + 1, q_last

    @property
    def options(self) -> dict[str, Any]:
        return {"width": self.width}


@MASKS.register("bca")
class BlockCausalMask(Mask):
    """Blockwise causal attention (Sun et al. 2022, inference only): positions split into blocks of
    `block` (L_tr / 2); a query attends causally within its block and to the whole previous block."""

    summary = "blockwise causal (Sun 2022): own block causally + the previous block; block = L_tr/2"

    def __init__(self, *, block: int) -> None:
        if int(block) < 1:
            raise ConfigError(f"bca: block must be >= 1, got {block}")
        self.block = int(block)

    def allowed(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        q_block = (q_pos // self.block)[:, None]
        k_block = (k_pos // self.block)[None, :]
        return (k_pos[None, :] <= q_pos[:, None]) & (k_block >= q_block - 1)

    def key_range(self, q_first: int, q_last: int) -> tuple[int, int]:
        return (q_first // self.block - 1) * self.block, q_last

    @property
    def period(self) -> int:  # type: ignore[override]
        return self.block

    def within(self, q_first: int, q_last: int) -> Mask:
        """Queries inside one block see keys from the previous block's start on, causally: the causal mask."""
        return CausalMask() if q_first // self.block == q_last // self.block else self

    def visible_keys(self, q_pos: Tensor, k_first: int, k_last: int) -> Tensor:
        first = ((q_pos // self.block - 1) * self.block).clamp(min=k_first)
        return (torch.minimum(q_pos, torch.tensor(k_last)) - first + 1).clamp(min=1)

    @property
    def options(self) -> dict[str, Any]:
        return {"block": self.block}


@MASKS.register("full")
class FullMask(Mask):
    """Bidirectional: every query sees every key (encoders)."""

    summary = "bidirectional: every token attends to every token (encoders)"
    causal = False

    def allowed(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return torch.ones(q_pos.numel(), k_pos.numel(), dtype=torch.bool, device=q_pos.device)

    def allowed_distance(self, distance: Tensor) -> Tensor:
        return torch.ones_like(distance, dtype=torch.bool)

    def visible_keys(self, q_pos: Tensor, k_first: int, k_last: int) -> Tensor:
        return torch.full_like(q_pos, k_last - k_first + 1)

    def key_range(self, q_first: int, q_last: int) -> tuple[int, int]:
        return -UNBOUNDED, UNBOUNDED


def build_mask(spec: str | Mask | None, train_len: int | None = None, **options: Any) -> Mask:
    """A mask from its name (`causal`, `window`, `bca`, `full`) or a spec like `window:256` / `bca:64`.

    Defaults tied to the training length: window width = L_tr, BCA block = L_tr / 2 (Sun et al. 2022).
    """
    if isinstance(spec, Mask):
        return spec
    name, _, arg = (spec or "causal").partition(":")
    cls = MASKS.get(name)
    MASKS.check_options(name, options)
    if name == "window":
        if arg:
            options.setdefault("width", _int_arg(name, arg))
        if "width" not in options:
            if train_len is None:
                raise ConfigError("window needs a width: use 'window:W' or pass width=W")
            options["width"] = train_len
    elif name == "bca":
        if arg:
            options.setdefault("block", _int_arg(name, arg))
        if "block" not in options:
            if train_len is None or train_len < 2:
                raise ConfigError("bca needs a block size: use 'bca:B' or give the training length")
            options["block"] = train_len // 2
    elif arg:
        raise ConfigError(f"mask {name!r} takes no argument, got {spec!r}")
    return cls(**options)


def _int_arg(name: str, arg: str) -> int:
    try:
        return int(arg)
    except ValueError:
        raise ConfigError(f"mask {name!r}: expected an integer after ':', got {arg!r}") from None
