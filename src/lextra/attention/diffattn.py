"""Differential attention (Ye et al. 2024, arXiv 2410.05258): the difference of two softmax maps over one value.

Each head's q and k split into halves; the layer's attention runs on (q1, k1, v) and (q2, k2, v), and

    out_h = RMSNorm(A1 v - lambda A2 v) (1 - lambda_init),   lambda = exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init

with lambda_init = 0.8 - 0.6 exp(-0.3 depth). Both maps are calls of the layer's one `attention(...)`, so every
backend, mask, scheme and the KV cache apply. As the authors' code (microsoft/unilm, Diff-Transformer): depth is
the 0-based layer index; lambda one scalar per layer (vectors drawn N(0, 0.1)); each map two calls, one per half
of the value; scale (D/2)^-0.5; `subln` an RMSNorm over the head (eps 1e-5, one shared weight); a rotary scheme
rebuilt at width D/2 (`rope,layout=interleaved` is the authors' map). Each of n_head heads is one differential
head."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor, nn

from lextra.attention.pieces import PIECES, AttentionCall, AttentionPiece, head_rms_norm
from lextra.errors import ConfigError
from lextra.positions.base import HeadDims, PositionScheme, build_scheme

#: the authors' RMSNorm epsilon (`subln`)
SUBLN_EPS = 1e-5
#: the standard deviation of the lambda vectors' initialisation (the authors' `normal_(mean=0, std=0.1)`)
LAMBDA_STD = 0.1


def lambda_init_at(depth: int) -> float:
    """lambda_init = 0.8 - 0.6 exp(-0.3 depth) for the 0-based layer index `depth` (the authors' `lambda_init_fn`)."""
    return 0.8 - 0.6 * math.exp(-0.3 * depth)


def half_width_scheme(scheme: PositionScheme, width: int) -> PositionScheme:
    """`scheme` as it acts on heads of `width` channels: a scheme that transforms q and k rebuilt at that width
    with its options; any other (a score bias, NoPE) acts on scores and serves as it is."""
    if not scheme.transforms_qk:
        return scheme
    if scheme.key_dim() != scheme.dims.head_dim:
        raise ConfigError(
            f"diffattn splits q and k into halves of one width; scheme {scheme.name!r} projects keys of another "
            "width, so use rope (layout=interleaved is the authors'), xpos, a bias scheme or nope"
        )
    if any(True for _ in scheme.parameters()):
        raise ConfigError(
            f"diffattn rebuilds the q/k transform of scheme {scheme.name!r} at the half width, which a learned "
            "transform cannot be; use rope, xpos, a bias scheme or nope"
        )
    try:
        half = build_scheme(scheme.name, replace(scheme.dims, head_dim=width), **scheme.options)
    except ConfigError as err:
        raise ConfigError(f"diffattn rotates half-heads of width {width}: {err}") from None
    buffer = next(scheme.buffers(), None)
    return half if buffer is None else half.to(buffer.device)


@PIECES.register("diffattn")
class DifferentialAttention(AttentionPiece):
    """Differential attention (Ye et al. 2024, arXiv 2410.05258): A1 v - lambda A2 v per head from the halves of q
    and k, RMSNorm per head, times 1 - lambda_init; `lambda_init` None takes 0.8 - 0.6 exp(-0.3 depth)."""

    summary = "differential attention (Ye 2024): two softmax maps from q/k halves, A1 v - lambda A2 v, subln"
    transforms_in_attend = True

    def __init__(self, dims: HeadDims, *, lambda_init: float | None = None) -> None:
        super().__init__(dims)
        if dims.head_dim % 2:
            raise ConfigError(
                f"diffattn splits each head's q and k into two halves and needs an even head dimension, got "
                f"{dims.head_dim}; choose d_model / n_head even"
            )
        if lambda_init is not None and not (math.isfinite(lambda_init) and 0.0 <= lambda_init < 1.0):
            raise ConfigError(f"diffattn: lambda_init must be a number in [0, 1), got {lambda_init!r}")
        self.fixed_lambda_init = lambda_init
        width = dims.head_dim // 2
        self.lambda_q1 = nn.Parameter(torch.zeros(width).normal_(mean=0.0, std=LAMBDA_STD))
        self.lambda_k1 = nn.Parameter(torch.zeros(width).normal_(mean=0.0, std=LAMBDA_STD))
        self.lambda_q2 = nn.Parameter(torch.zeros(width).normal_(mean=0.0, std=LAMBDA_STD))
        self.lambda_k2 = nn.Parameter(torch.zeros(width).normal_(mean=0.0, std=LAMBDA_STD))
        self.subln_weight = nn.Parameter(torch.ones(dims.head_dim))
        #: the layer scheme's half-width form, built once per scheme instance (not a submodule: no state)
        self._halves: dict[tuple[int, str | None], tuple[PositionScheme, PositionScheme]] = {}

    def lambda_init(self, depth: int) -> float:
        """The layer's lambda_init: the fixed option, else the authors' function of the 0-based depth."""
        return lambda_init_at(depth) if self.fixed_lambda_init is None else self.fixed_lambda_init

    def lambda_full(self, depth: int) -> Tensor:
        """lambda = exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init, a scalar in fp32."""
        one = torch.exp((self.lambda_q1 * self.lambda_k1).sum().float())
        two = torch.exp((self.lambda_q2 * self.lambda_k2).sum().float())
        return one - two + self.lambda_init(depth)

    def _half_scheme(self, scheme: PositionScheme | None) -> PositionScheme | None:
        """The layer's scheme at the half width (`half_width_scheme`), kept per device."""
        if scheme is None:
            return None
        buffer = next(scheme.buffers(), None)
        key = (id(scheme), None if buffer is None else str(buffer.device))
        held = self._halves.get(key)
        if held is None or held[0] is not scheme:
            held = (scheme, half_width_scheme(scheme, self.dims.head_dim // 2))
            self._halves = {key: held}
        return held[1]

    def attend(self, q: Tensor, k: Tensor, v: Tensor, *, call: AttentionCall, layer: int, **options: Any) -> Tensor:
        """q (B, H, Lq, D), k (B, H, Lk, D) before the position transform, v (B, H, Lk, D) -> (B, H, Lq, D)."""
        half = self.dims.head_dim // 2
        options["scheme"] = self._half_scheme(options.get("scheme"))
        if q.shape[-1] != 2 * half or k.shape[-1] != 2 * half or v.shape[-1] != 2 * half:
            raise ConfigError(
                f"diffattn splits heads of width {2 * half}; got q, k, v of widths {q.shape[-1]}, {k.shape[-1]}, "
                f"{v.shape[-1]} (a scheme with another key width, such as coca, cannot take it)"
            )
        lam = self.lambda_full(layer)
        parts = []  # per half of the value: A1 v_c - lambda A2 v_c (B, H, Lq, D/2), one map's output freed at a time
        for cols in (slice(None, half), slice(half, None)):
            first = call(q[..., :half], k[..., :half], v[..., cols], **options)
            parts.append(first - lam.to(first.dtype) * call(q[..., half:], k[..., half:], v[..., cols], **options))
        diff = torch.cat(parts, -1)
        return head_rms_norm(diff, self.subln_weight, SUBLN_EPS) * (1.0 - self.lambda_init(layer))
