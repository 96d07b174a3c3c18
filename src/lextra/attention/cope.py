"""CoPE's backends (Golovneva et al. 2024, arXiv 2405.18719; the scheme is `lextra.positions.cope`).

- `reference`: dense (B, H, Lq, Lk) scores, gates and counts in fp32, as the authors' module computes them.
- `chunked` (and `auto`): query blocks walking their key tiles from the diagonal leftwards, carrying each row's
  gate count, merged by an online softmax; under autograd on CPU blocks of `COPE_TRAIN_ROWS` are recomputed in
  the backward pass.
- `flex` and `sdpa` are refused: they see one score at a time and cannot carry the count.

Logits are (s + q . e(count) * scale') / tau with s = q . k * scale, scale' the scale or 1 (`nodiv`); softcap and
sinks as in the reference; no materialised score bias or padding."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from lextra.attention.backends.common import blockwise, cap_scores, key_indices
from lextra.attention.backends.reference import ReferenceBackend
from lextra.attention.content import CONTENT, ContentAttention
from lextra.attention.context import AttentionBackend, AttentionContext
from lextra.errors import ConfigError
from lextra.positions.cope import CoPE

#: query rows and keys of one tile: (B, H, 256, 256) fp32 is 256 KiB per head
COPE_TILE = 256
#: query rows of a block recomputed in the backward pass: its tiles' activations over all its keys are held at once
COPE_TRAIN_ROWS = 64


def _cope(ctx: AttentionContext) -> CoPE:
    """The call's scheme, which the router sends here only when it is CoPE."""
    scheme = ctx.scheme
    if not isinstance(scheme, CoPE):
        raise ConfigError(f"the CoPE backends compute the cope scheme alone, not {getattr(scheme, 'name', None)!r}")
    scheme.check_count(ctx.facts.n_k)
    return scheme


def _finish(logits: Tensor, ctx: AttentionContext, tau: Tensor | None, inplace: bool = False) -> Tensor:
    """Position-biased logits over the temperature, capped (the order of `reference_attention`); `inplace`
    overwrites `logits` (no autograd)."""
    if tau is not None:
        logits = logits.div_(tau[..., None]) if inplace else logits / tau[..., None]
    if ctx.softcap is None:
        return logits
    if inplace:
        return logits.div_(ctx.softcap).tanh_().mul_(ctx.softcap)
    return cap_scores(logits, ctx.softcap)


def cope_logits(q: Tensor, k: Tensor, ctx: AttentionContext, allowed: Tensor | None = None) -> Tensor:
    """Dense CoPE logits (B, H, Lq, Lk) in fp32 before the mask, as the authors' module computes them."""
    scheme = _cope(ctx)
    allowed = ctx.mask.allowed(ctx.q_pos, ctx.k_pos) if allowed is None else allowed
    scores = (q.float() @ k.float().transpose(-1, -2)) * ctx.scale
    gates = torch.sigmoid(scores) * allowed
    position, _ = scheme.position_logits(scheme.position_tables(q, scheme.position_scale(ctx.scale)), gates)
    return _finish(scores + position, ctx, ctx.tau)


def _key_tiles(ctx: AttentionContext, start: int, stop: int, tile: int) -> list[tuple[int, int]]:
    """Key index tiles a query block start..stop - 1 sees, from the right (its diagonal) to the left: the mask's
    key spans when positions are sorted runs, else every key."""
    facts = ctx.facts
    n_keys = facts.n_k
    spans = [(0, n_keys)]
    if facts.k_contiguous and facts.q_contiguous:
        spans = key_indices(ctx.mask, facts.q_first + start, facts.q_first + stop - 1, facts.k_first, n_keys)
    tiles = []
    for lo, hi in reversed(spans):
        tiles += [(max(lo, top - tile), top) for top in range(hi, lo, -tile)]
    return tiles


def _fully_visible(ctx: AttentionContext, q_index: int, hi: int) -> bool:
    """Whether every query from index `q_index` on sees every key before index `hi` (causal runs: no mask)."""
    facts = ctx.facts
    if ctx.mask.hides_nothing:
        return True
    aligned = ctx.mask.exactly_causal and facts.q_contiguous and facts.k_contiguous
    return aligned and facts.k_first + hi - 1 <= facts.q_first + q_index


def _query_block(q: Tensor, k: Tensor, v: Tensor, scheme: CoPE, ctx: AttentionContext, start: int, tile: int) -> Tensor:
    """One query block's CoPE attention (B, H, c, Dv) in fp32, walking its key tiles right to left (each tile's keys
    last first) with each row's gate count carried and an online softmax."""
    B, H, c, _ = q.shape
    qp = ctx.q_pos[start : start + c]
    tau = None if ctx.tau is None else (ctx.tau if ctx.tau.shape[-1] == 1 else ctx.tau[..., start : start + c])
    tables = scheme.position_tables(q, scheme.position_scale(ctx.scale))
    qs = q.float() * ctx.scale
    carried: Tensor | None = None
    top = qs.new_full((B, H, c), float("-inf"))
    denominator = qs.new_zeros(B, H, c)
    acc = qs.new_zeros(B, H, c, v.shape[-1])
    inplace = not torch.is_grad_enabled()  # then every (c, n) step overwrites one buffer
    for lo, hi in _key_tiles(ctx, start, start + c, tile):
        keys = k[..., lo:hi, :].flip(-2).float()
        scores = qs @ keys.transpose(-1, -2)
        gates = torch.sigmoid(scores)
        hidden = None if _fully_visible(ctx, start, hi) else ~ctx.mask.allowed(qp, ctx.k_pos[lo:hi].flip(0))
        if hidden is not None:
            gates = gates.masked_fill_(hidden, 0.0) if inplace else gates.masked_fill(hidden, 0.0)
        position, carried = scheme.position_logits(tables, gates, carried, reversed_keys=True, inplace=inplace)
        logits = _finish(position.add_(scores) if inplace else scores + position, ctx, tau, inplace)
        if hidden is not None:
            logits = (
                logits.masked_fill_(hidden, float("-inf")) if inplace else logits.masked_fill(hidden, float("-inf"))
            )
        new_top = torch.maximum(top, logits.amax(-1))
        base = new_top.masked_fill(torch.isneginf(new_top), 0.0)
        decay = torch.exp(top - base)
        weights = logits.sub_(base[..., None]).exp_() if inplace else torch.exp(logits - base[..., None])
        denominator = denominator * decay + weights.sum(-1)
        acc = acc * decay[..., None] + weights @ v[..., lo:hi, :].flip(-2).float()
        top = new_top
    if ctx.sinks is not None:  # one more column of logit sink_h whose weight is dropped
        sink = ctx.sinks.float().view(1, H, 1).expand(B, H, c)
        new_top = torch.maximum(top, sink)
        decay = torch.exp(top - new_top)
        denominator = denominator * decay + torch.exp(sink - new_top)
        acc = acc * decay[..., None]
    return acc / denominator[..., None]


def cope_tiled(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
    """CoPE attention in query blocks x key tiles (`_query_block`), recomputed in the backward on the CPU."""
    scheme = _cope(ctx)
    Lq = q.shape[-2]
    tile = max(1, int(ctx.block_size or COPE_TILE))
    if Lq == 0:
        return q.new_zeros(*q.shape[:-1], v.shape[-1])
    training = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, scheme.pos_emb))
    recompute = training and q.device.type == "cpu"
    rows = min(tile, COPE_TRAIN_ROWS) if recompute else tile

    def attend(start: int, stop: int) -> Tensor:
        args = (q[..., start:stop, :], k, v, scheme, ctx, start, tile)
        return checkpoint(_query_block, *args, use_reentrant=False) if recompute else _query_block(*args)

    return blockwise(q, v, [(start, min(start + rows, Lq)) for start in range(0, Lq, rows)], attend)


class CopeTiled(AttentionBackend):
    """Query blocks x key tiles walked leftwards with carried gate counts (`cope_tiled`)."""

    name = "chunked"

    def run(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        return cope_tiled(q, k, v, ctx)


@CONTENT.register("cope")
class CopeAttention(ContentAttention):
    """`reference` is the dense path, `chunked` and `auto` the tiled one; `flex` and `sdpa` are refused."""

    def backend_for(self, ctx: AttentionContext) -> AttentionBackend:
        if ctx.backend == "reference":
            return ReferenceBackend()
        if ctx.backend in ("auto", "chunked"):
            return CopeTiled()
        if ctx.backend == "flex":
            raise ConfigError(
                "cope: a flex score_mod sees one score at a time and cannot carry the reverse cumulative sum of "
                "gates along a query's keys; use backend chunked (tiled) or reference"
            )
        raise ConfigError(
            f"cope: backend {ctx.backend!r} cannot add gate-counted positions to its scores; use backend chunked "
            "(tiled) or reference"
        )

    def logits(self, q: Tensor, k: Tensor, ctx: AttentionContext) -> Tensor:
        return cope_logits(q, k, ctx)
