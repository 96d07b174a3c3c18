"""The forget bias of Forgetting Attention (Lin et al. 2025, arXiv 2503.02130) as two per-head vectors.

Score (i, j) gains D_ij = c_i - c_j = sum_{l=j+1..i} log f_l, c_t = sum_{l<=t} log f_l; a call carries c at its
queries (B, H, Lq) and keys (B, H, Lk), and a tile's bias is their outer difference. c is held in fp64 and a tile
subtracts it as two fp32 parts (`tile_difference`), so each difference is rounded about once."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

#: why a forget bias cannot join a mask that shows later keys
FULL_MASK_REASON = "fox: the forget bias is defined for keys at or before the query; use a causal mask, not 'full'"


def bias_scheme_reason(name: str) -> str:
    """Why a forget bias cannot join scheme `name`'s additive bias (one line naming the fix)."""
    return (
        f"fox: the forget gate already is the layer's additive bias; {name!r} adds a second one, a combination the "
        "authors' layer does not define (it takes RoPE or none); use nope or a rotary scheme"
    )


def cumulative_log_gates(log_f: Tensor, start: Tensor | None = None) -> Tensor:
    """c_t = start + sum_{l<=t} log f_l along the last axis of log f (B, H, L), in fp64 (module docstring);
    `start` (B, H) is the c of the last cached token."""
    c = torch.cumsum(log_f.double(), dim=-1)
    return c if start is None else c + start.double()[..., None]


def split_fp32(c: Tensor) -> tuple[Tensor, Tensor]:
    """c (fp64) as two fp32 tensors hi + lo: hi = c rounded, lo = what the rounding dropped."""
    hi = c.float()
    return hi, (c - hi.double()).float()


def tile_difference(cq: Tensor, ck: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """c_i - c_j for a tile's queries cq (B, H, c) and keys ck (B, H, n) as (B, H, c, n) in `dtype`, as
    (hi_i - hi_j) + (lo_i - lo_j) of `split_fp32`."""
    if dtype == torch.float64:
        return cq.double()[..., :, None] - ck.double()[..., None, :]
    (hq, lq), (hk, lk) = split_fp32(cq), split_fp32(ck)
    diff = hq[..., :, None] - hk[..., None, :]
    return diff.add_(lq[..., :, None]).sub_(lk[..., None, :]).to(dtype)


@dataclass(frozen=True)
class ForgetBias:
    """c at the call's queries (B, H, Lq) and keys (B, H, Lk), fp64: D_ij = queries_i - keys_j."""

    queries: Tensor
    keys: Tensor

    def rows(self, start: int, stop: int) -> ForgetBias:
        """The bias of queries start..stop - 1 alone."""
        return ForgetBias(self.queries[..., start:stop], self.keys)

    def pairs(self, q: slice = slice(None), k: slice | Tensor = slice(None)) -> Tensor:
        """D for the queries `q` and keys `k` (a slice or an index tensor): (B, H, lq, lk), rounded to fp32."""
        keys = self.keys[..., k] if isinstance(k, slice) else self.keys.index_select(-1, k)
        return (self.queries[..., q, None] - keys[..., None, :]).float()
