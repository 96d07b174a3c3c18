"""The interface every position scheme implements: the four places position can enter attention.

A scheme fills only the places it uses; the attention layer composes them without asking which scheme it is:
  1. `embed(x, positions)`            token embedding (absolute schemes)
  2. `rotate(q, k, q_pos, k_pos)`     q/k transform (rotary family, CoCA)
  3. `bias(q_pos, k_pos)`             additive score modifier (ALiBi, T5, KERPLE, Sandwich, FIRE)
  4. masks live in `lextra.attention.masks`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from lextra.errors import ConfigError
from lextra.registry import Registry

#: a per-query score bias as compiled FlexAttention code: (head, query index, key index) -> bias
QueryBias = Callable[[Tensor, Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class ScoreLayout:
    """Where a compiled score modifier reads positions: `q_rows` and `k_rows` per padded row index; distances run
    from `lo` over `n_distances` values, tables padded to `n_table` entries."""

    q_rows: Tensor
    k_rows: Tensor
    lo: int
    n_distances: int
    n_table: int


@dataclass(frozen=True)
class HeadDims:
    """Shapes a scheme needs to know: heads, per-head width, model width and the training length."""

    n_heads: int
    head_dim: int
    d_model: int
    train_len: int


class PositionScheme(nn.Module):
    """Base class: a scheme that adds nothing (NoPE behaviour). Subclasses override the places they use."""

    name: ClassVar[str] = "base"
    summary: ClassVar[str] = ""
    #: scores depend on positions only through m - n (translation invariant)
    relative: ClassVar[bool] = True
    #: which of the four places the scheme fills
    adds_embedding: ClassVar[bool] = False
    transforms_qk: ClassVar[bool] = False
    has_bias: ClassVar[bool] = False
    #: the bias depends on the query position m itself, not only on m - n (FIRE)
    bias_per_query: ClassVar[bool] = False
    #: one instance serves every layer of a model (T5 computes its bias once per stack)
    shared_across_layers: ClassVar[bool] = False
    #: the rotation's numerics are only safe when queries in one call span at most this many positions
    rotate_span: int | None = None
    #: a per-query bias (`bias_per_query`) the scheme can state as compiled score-modifier code (`query_bias_mod`)
    has_query_bias_mod: ClassVar[bool] = False
    #: the option a bare `name:VALUE` spec sets, or None
    positional: ClassVar[str | None] = None
    #: the scores read q and k beyond their product (CoPE): only `lextra.attention.content`'s backends compute it
    content_dependent: ClassVar[bool] = False

    def __init__(self, dims: HeadDims) -> None:
        super().__init__()
        self.dims = dims
        self.options: dict[str, Any] = {}

    # --- place 1: token embedding -------------------------------------------------------------
    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        """Add the absolute position signal to token embeddings `x` (B, L, d_model)."""
        return x

    # --- place 2: q/k transform ---------------------------------------------------------------
    def key_dim(self) -> int:
        """Width of the key projection per head (CoCA projects D/2 non-negative coefficients)."""
        return self.dims.head_dim

    def rotate(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, seq_len: int | None = None
    ) -> tuple[Tensor, Tensor]:
        """Transform q (..., Lq, D) and k (..., Lk, Dk) by their positions (1-D long tensors). `seq_len` is the
        current sequence length for length-dependent scalings (default: the largest position + 1)."""
        return q, k

    @property
    def rotates_keys_alone(self) -> bool:
        """Whether `rotate` is the scheme's whole effect and a key's transform depends on its own position only
        (not on the queries or the sequence length), so a KV cache may hold keys already transformed."""
        return False

    # --- place 3: additive score bias ---------------------------------------------------------
    def distance_bias(self, distance: Tensor) -> Tensor:
        """Bias as a function of d = m - n only: returns (H, *distance.shape) in fp32."""
        raise TypeError(f"scheme {self.name!r} has no distance bias")

    def distance_only(self, q_pos: Tensor) -> bool:
        """Whether, for these query positions, the bias is `distance_bias(m - n)` (fast Toeplitz paths)."""
        return self.has_bias and not self.bias_per_query

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Additive bias (H, Lq, Lk) for these positions, built from a per-distance table."""
        distance = q_pos[:, None] - k_pos[None, :]
        lo = int(distance.min())
        hi = int(distance.max())
        table = self.distance_bias(torch.arange(lo, hi + 1, device=q_pos.device))
        if table.requires_grad:
            # learned tables: the gather's backward sums up to Lq x Lk gradients per entry; do it in fp64
            return table.double()[:, distance - lo].float()
        return table[:, distance - lo]

    def bias_into(self, q_pos: Tensor, k_pos: Tensor, workspace: dict[str, Tensor]) -> Tensor:
        """`bias(q_pos, k_pos)` without autograd, which the caller may modify in place: a scheme may build it in
        buffers kept in `workspace` (FIRE); the default returns a fresh `bias`."""
        return self.bias(q_pos, k_pos)

    def query_bias_mod(self, layout: ScoreLayout, tau: Tensor | None) -> tuple[QueryBias, list[Tensor]]:
        """The per-query bias as traceable score_mod code over the per-head temperature `tau` (H, 1), and the tensors it
        captures (schemes declaring `has_query_bias_mod`: FIRE)."""
        raise TypeError(f"scheme {self.name!r} has no per-query score modifier")

    def query_bias_limit(self) -> str | None:
        """Why this scheme's bias cannot be a compiled score modifier (a one-line reason), or None."""
        return None

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.options.items())


SCHEMES: Registry[PositionScheme] = Registry(
    "position scheme",
    modules=(
        "lextra.positions.absolute",
        "lextra.positions.rotary",
        "lextra.positions.bias",
        "lextra.positions.coca",
        "lextra.positions.cope",
    ),
)
register_scheme = SCHEMES.register


def split_scheme_spec(spec: str, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """A scheme spec `rope,base=500000` -> ("rope", {"base": 500000.0}), typed; `options` (e.g. from
    `--scheme-option K=V`) are checked and override the spec's."""
    name, parsed = SCHEMES.parse(spec)
    extra = dict(options or {})
    SCHEMES.check_options(name, extra)
    return name, {**parsed, **extra}


def build_scheme(name: str, dims: HeadDims, **options: Any) -> PositionScheme:
    """Instantiate a registered scheme from its name or spec (`rope,base=500000`) with validated options; keyword
    `options` override the spec's (clear error on unknown names or options, or values of the wrong type)."""
    cls, options = SCHEMES.resolve(name, **options)
    for key, value in options.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{cls.name}: option {key} must be a finite number, got {value}")
    try:
        scheme = cls(dims, **options)
    except (TypeError, ValueError, ArithmeticError) as err:
        if isinstance(err, ConfigError):
            raise
        raise ConfigError(f"{cls.name}: invalid option value ({err}); see `lextra list` for the options") from None
    scheme.options = dict(options)
    return scheme
