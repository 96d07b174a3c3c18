"""The interface of training-free extension methods: a distance remap, a visibility rule and up to three passes.

Per (query m, key n) pair with d = m - n, a method scores the pair at a remapped distance d'(m, n), over a
visible set of pairs, with one softmax over all of them:

    out_m = softmax_n( s * (R_{a} q_m) . (R_{b} k_n) ), (m, n) visible, a - b = d'(m, n)

`remap(m, n)` states that formula elementwise (the `reference` backend's ground truth); `passes(q_first, q_last)`
states it as up to three passes over a query block, whose visible sets partition the method's and whose results
merge by log-sum-exp. Full forwards and cached decoding run the same passes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import Tensor

from lextra.attention.backends import PassExtension
from lextra.attention.masks import Pass as Pass  # for method plugins
from lextra.attention.masks import same_position as same_position  # for method plugins
from lextra.errors import ConfigError, LengthError
from lextra.positions.base import PositionScheme
from lextra.registry import Registry
from lextra.validate import check_int


def constant_position(value: float) -> Callable[[Tensor], Tensor]:
    """Every position rotated at `value` (ReRoPE's rectified queries at w, keys at 0)."""

    def at(positions: Tensor) -> Tensor:
        return torch.full(positions.shape, value, dtype=torch.float64, device=positions.device)

    return at


class ExtensionMethod(PassExtension):
    """Base class of the `EXTENSIONS` registry: a method bound to a model's training length L. Subclasses take
    keyword-only options (None: derived from L), stored under their names, and define `remap`, `passes` and,
    where they have them, `period`, `max_length` and `retains` (which cached keys later queries still see)."""

    summary: ClassVar[str] = ""
    #: the option a bare `NAME:VALUE` spec sets, or None
    positional: ClassVar[str | None] = None
    #: how each option left at None is derived from L (what `lextra list` shows as its default)
    derived_defaults: ClassVar[dict[str, str]] = {}

    def __init__(self, train_len: int) -> None:
        self.train_len = check_int(f"{self.name}: training length", train_len, 2, hint="L of the model")

    # --- lengths and caches -------------------------------------------------------------------------
    def max_length(self) -> int | None:
        """The longest input (in positions) the method is valid for, or None when unbounded."""
        return None

    def check_length(self, n_positions: int) -> None:
        """Refuse inputs longer than `max_length()`, naming the number and the fix."""
        limit = self.max_length()
        if limit is not None and n_positions > limit:
            raise LengthError(
                f"{self!r} is valid up to {limit} tokens, got {n_positions}: {self.length_hint(n_positions)}"
            )

    def length_hint(self, n_positions: int) -> str:
        """How to make the method accept `n_positions` tokens (for `check_length`'s message)."""
        return "shorten the input"

    def check(self, scheme: PositionScheme | None, n_positions: int) -> None:
        """Refuse a scheme without a relative rotation, or more positions than `max_length()`."""
        check_scheme(scheme, self)
        self.check_length(n_positions)

    def retains(self, n: Tensor, next_query: int) -> Tensor:
        """Which cached keys at positions n a query at `next_query` or later can still see (default: all)."""
        return torch.ones_like(n, dtype=torch.bool)

    # --- description ------------------------------------------------------------------------------
    def query_scale(self, m: Tensor) -> Tensor | None:
        """max(1, log(m + 1)/log L) per query where the method's `log_scale` option is on, else None."""
        return log_scale(m, self.train_len) if getattr(self, "log_scale", False) else None

    @property
    def options(self) -> dict[str, Any]:
        """The resolved options (defaults derived from L filled in), read from the attributes of their names."""
        return {o.name: getattr(self, o.name) for o in EXTENSIONS.options(self.name) if hasattr(self, o.name)}

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v}" for k, v in self.options.items())
        return f"{self.name}(L={self.train_len}{', ' if opts else ''}{opts})"


EXTENSIONS: Registry[ExtensionMethod] = Registry("extension method", modules=("lextra.extend.methods",))


def check_scheme(scheme: PositionScheme | None, method: ExtensionMethod) -> None:
    """Refuse schemes without a relative q/k rotation for the method to remap (absolute schemes, score biases)."""
    if scheme is None or not scheme.transforms_qk:
        kind = "none" if scheme is None else scheme.name
        why = "has no q/k rotation to remap"
    elif scheme.has_bias or scheme.adds_embedding or not scheme.relative:
        kind, why = scheme.name, "adds position outside a relative q/k rotation"
    else:
        return
    raise ConfigError(
        f"extension {method.name!r} remaps the distances of a rotary scheme, but scheme {kind!r} {why}; "
        "use it with a rope, xpos or coca model"
    )


def build_extension(spec: str | ExtensionMethod, train_len: int, **options: Any) -> ExtensionMethod:
    """A method from its spec, `NAME[,key=value...]`, at training length `train_len`; `options` override the spec's."""
    if isinstance(spec, ExtensionMethod):
        if options:
            raise ConfigError(f"options {sorted(options)} given with an already built method {spec!r}")
        return spec
    return EXTENSIONS.build(str(spec), train_len, **options)


def log_scale(m: Tensor, train_len: int) -> Tensor:
    """max(1, log(m + 1) / log L) per query (Su 2023's and Jin et al. 2024's optional logit scaling), fp32."""
    return (torch.log(m.to(torch.float64) + 1) / math.log(train_len)).clamp(min=1.0).float()


def int_option(name: str, option: str, value: object, default: int, low: int, high: int, hint: str) -> int:
    """An integer option in [low, high]; `default` (derived from L) when None."""
    return check_int(f"{name}: {option}", default if value is None else value, low, high, hint=hint)
