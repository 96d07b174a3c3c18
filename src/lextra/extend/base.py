"""The interface of training-free extension methods: a distance remap, a visibility rule and up to three passes.

Every method here, per (query m, key n) pair with d = m - n, scores the pair as a rotary model would at a
*remapped* distance d'(m, n), over a visible set of pairs, with one softmax over all of them:

    out_m = softmax_n( s * (R_{a} q_m) . (R_{b} k_n) ), (m, n) visible, a - b = d'(m, n)

`remap(m, n)` states that formula elementwise (the ground truth the `reference` backend computes from).
`passes(q_first, q_last)` states the same thing as the fast path needs it: for a block of queries, up to three
passes, each rotating its queries at `q_at(m)` and its keys at `k_at(n)` over the pairs inside a key range and a
distance band. The passes' visible sets partition the method's; each pass is one tiled attention and their
partial results merge exactly by log-sum-exp (the `tiled` and `flex` backends, `lextra.attention.backends`). A
query block never straddles a multiple of `period` (Dual Chunk Attention's chunks), so each pass's rule is a band
and a key range there.

A method is the extension a layer attends through (`LayerInference.extension`, written by `InferenceSetup`), so
full forwards and cached decoding run the same passes: a new query at m runs them over the cached, un-rotated keys,
which is each author's decode rule with the full forward's numbers. Methods with a bounded view (sinks,
LM-Infinite) let the cache evict the keys no later query sees (`retains`).
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
    """Base class of the `EXTENSIONS` registry: a method bound to a model's training length L, and the extension a
    layer attends through (`attention(..., extension=method)`, `LayerInference.extension`): the backends run its
    `passes`, the dispatch checks a call with `check`, a cache evicts the keys `retains` drops.

    Subclasses take keyword-only options (the authors' defaults; None = derived from L), validate them with
    errors that name the fix, and define `remap` (the formula), `passes` (the fast path) and, where they have
    them, `query_scale`, `period`, `max_length` and `retains` (which cached keys later queries still see).
    """

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
        """Refuse a call the method cannot run: a scheme without a relative rotation (`check_scheme`), or more
        positions than `max_length()`."""
        check_scheme(scheme, self)
        self.check_length(n_positions)

    def retains(self, n: Tensor, next_query: int) -> Tensor:
        """Which cached keys at positions n a query at `next_query` or later can still see (default: all)."""
        return torch.ones_like(n, dtype=torch.bool)

    # --- description ------------------------------------------------------------------------------
    @property
    def options(self) -> dict[str, Any]:
        """The resolved options (defaults derived from L filled in)."""
        return {}

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v}" for k, v in self.options.items())
        return f"{self.name}(L={self.train_len}{', ' if opts else ''}{opts})"


EXTENSIONS: Registry[ExtensionMethod] = Registry("extension method", modules=("lextra.extend.methods",))


def check_scheme(scheme: PositionScheme | None, method: ExtensionMethod) -> None:
    """Refuse schemes an extension method cannot apply to: it remaps the positions a relative q/k rotation uses,
    so absolute schemes (nope, sinusoidal, learned) and score biases (alibi, t5, kerple, sandwich, fire) have none."""
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
    """A method from its spec, `NAME[,key=value...]` (or the older `NAME:key=value,...`; values typed by each
    option's annotation), for a model of training length `train_len`; keyword `options` override the spec's.
    Unknown names or options and values out of range raise ConfigError naming the fix."""
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
