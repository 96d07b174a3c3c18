"""LongLoRA's shifted sparse attention, S2-Attn (Chen et al. 2023, arXiv 2309.12307), as a per-head mask.

Tokens attend causally within groups of G; heads H//2..H-1 have their groups shifted by G/2. Query i sees key j
when g(i) == g(j) and t(j) <= t(i), t a token's index in the shifted order, g = t // G. By default the authors'
`forward_flashattn` (t = i + G/2, half groups at the ends); with `wrap` their `forward_noflashattn` (t = (i - G/2)
mod L, whose first and last half groups see each other: LongLoRA issue 90). Positions rotate before the shift.
`S2Attention` is the wrapper a layer attends through while training; evaluation uses full causal attention."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lextra.attention.backends import reference_attention
from lextra.attention.context import AttentionBackend, AttentionContext, AttentionExtension
from lextra.attention.layout import PositionLayout
from lextra.attention.masks import FullMask
from lextra.positions import PositionScheme


def s2_visible(
    length: int, n_head: int, group: int, device: torch.device | str = "cpu", *, wrap: bool = False
) -> Tensor:
    """Boolean (H, L, L): True where query i of head h may attend key j under S2-Attn with groups of `group`
    (`wrap`: the shifted heads rolled, their last group wrapping around to the window's start)."""
    index = torch.arange(length, device=device)
    rolled = (index - group // 2) % length if wrap else index + group // 2

    def grouped_causal(t: Tensor) -> Tensor:
        return (t[:, None] // group == t[None, :] // group) & (t[None, :] <= t[:, None])

    plain, shifted = grouped_causal(index), grouped_causal(rolled)
    half = n_head // 2
    return torch.cat((plain.expand(half, -1, -1), shifted.expand(n_head - half, -1, -1)))


def shifted_sparse_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    group: int,
    scheme: PositionScheme | None,
    q_pos: Tensor,
    k_pos: Tensor,
    tau: Tensor | None = None,
    scale: float | None = None,
    *,
    wrap: bool = False,
    layout: PositionLayout | None = None,
) -> Tensor:
    """S2-Attn of q (B, H, L, D), k, v over one window (Lq == Lk), dense in fp32: the reference with `s2_visible`
    as its padding mask; (B, H, L, D) in v's dtype."""
    H, L = q.shape[1], q.shape[2]
    if k.shape[-2] != L or L % group:
        raise ValueError(f"S2-Attn needs one window whose length ({L}) the group ({group}) divides")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    visible = s2_visible(L, H, group, q.device, wrap=wrap)[None]  # the whole rule (wrapped groups see ahead)
    ctx = AttentionContext(scheme, FullMask(), q_pos, k_pos, scale, tau, layout=layout, padding=visible)
    out = reference_attention(q, k, v, ctx)
    assert isinstance(out, Tensor)  # no weights asked for
    return out


class S2Backend(AttentionBackend):
    """The dense S2-Attn pass over one window (`shifted_sparse_attention`)."""

    name = "s2"

    def __init__(self, group: int) -> None:
        self.group = group

    def applies(self, ctx: AttentionContext) -> str | None:
        if ctx.sinks is not None or ctx.softcap is not None:
            return "S2-Attn does not apply learned sinks or a softcap; train those layers without S2-Attn"
        n_q, n_k = ctx.facts.n_q, ctx.facts.n_k
        if n_q != n_k or n_q % self.group:
            return f"S2-Attn needs one window whose length ({n_q} queries, {n_k} keys) the group ({self.group}) divides"
        return None

    def run(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        args = (q, k, v, self.group, ctx.scheme, ctx.q_pos, ctx.k_pos, ctx.tau, ctx.scale)
        return shifted_sparse_attention(*args, layout=ctx.facts)


class S2Attention(AttentionExtension):
    """S2-Attn with groups of `group` tokens as a wrapper: every backend name runs `S2Backend` (its one path)."""

    def __init__(self, group: int) -> None:
        self.backend = S2Backend(group)
        self.name = f"s2_attn:{group}"

    def backend_for(self, ctx: AttentionContext) -> AttentionBackend:
        return self.backend
