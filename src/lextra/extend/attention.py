"""Attention under a training-free extension method: the dense reference, the fast tiled path, the model hook.

- `reference_extended_attention`: from the formula. Each pair's remapped distance d'(m, n) and visibility come
  from `method.remap`; the pair is scored with its query rotated at d' and its key at 0 (the schemes allowed are
  relative: that is the score at any a, b with a - b = d'); one softmax over the visible pairs. Dense (H, Lq, Lk).
- `extended_attention`: query blocks x the method's passes x key tiles. Each pass rotates the block's queries and
  each key tile at its positions on the fly (no rotated copy of q or k, no Lq x Lk tensor); each tile is one flash
  call that also returns its rows' log-sum-exp (`attention_with_lse`), and the tiles of all passes merge exactly
  (`merge_tiles`). Tiles a pass hides are skipped, tiles it shows in full run unmasked, the tile at a pass's lower
  distance edge is laid out exactly causal; a tile a band edge cuts is split into `SUB` x `SUB` pieces, of which
  hidden ones are skipped and only those the edge crosses get a float mask (cached by shape within a call).
- `flex_extended_attention` (backend='flex'; what `auto` runs on CUDA where flex applies): each pass is one
  FlexAttention call (`lextra.attention.flex.flex_band_attention`) over the whole query range, or per `period`
  block (DCA's chunks): q and all keys rotated at the pass's positions, its band as a mask_mod and a BlockMask from
  block position bounds (cached by host-side facts when positions are contiguous), the passes merged by their rows'
  log-sum-exp (a row a pass hides has -inf and adds nothing; under autograd the floor `LSE_FLOOR` keeps gradients
  finite). On CUDA compiled, forward and backward; on CPU eager (inductor's CPU kernel has no log-sum-exp output),
  forward only, Lq x Lk per pass: for checking on small inputs, CPU's `auto` keeps the tiled path.
- In all three a layer's softcap caps each pass's scores, its sinks join the merged denominator once (`scores`).
- `ExtendedAttention` / `apply_extension`: what a lextra model's attention layers attend through instead of the
  backends (`SelfAttention.extension`), so that full forwards and cached decoding use the same passes. Decoding
  needs no rule of its own: a new query at m runs the method's passes over the cached, un-rotated keys, which is
  each author's decode rule (keys rotated at -d'(m, n) against an unrotated query) with the full forward's
  numbers. Methods with a bounded view (sinks, LM-Infinite) let the cache evict keys no later query sees.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Unpack, cast

import torch
from torch import Tensor

from lextra.attention.backends import (
    TILE,
    AttentionBackend,
    AttentionContext,
    AttentionExtension,
    AttentionOptions,
    attention,
    choose_backend,
    default_positions,
    get_backend,
    merge_tiles,
)
from lextra.attention.flex import flex_band_attention, flex_unsupported
from lextra.attention.layout import PositionLayout
from lextra.attention.masks import Mask, build_mask
from lextra.errors import ConfigError
from lextra.extend.base import ExtensionMethod, Pass, build_extension, check_scheme, same_position
from lextra.extend.capsinks import PLAIN_SCORES, LayerScores
from lextra.extend.tiles import LSE_FLOOR, TileRun, contiguous_run, merge_out_of_place, query_blocks, tiled_passes
from lextra.model import GPT, Block
from lextra.positions.base import PositionScheme

#: query x key pairs per step of the dense reference (its per-pair rotated copies of q and k)
REFERENCE_PAIRS = 1 << 15


def _prepare(
    q: Tensor,
    k: Tensor,
    scheme: PositionScheme | None,
    method: ExtensionMethod,
    q_pos: Tensor | None,
    k_pos: Tensor | None,
    scale: float | None,
    temperature: Tensor | float | None,
    layout: PositionLayout | None = None,
) -> tuple[Tensor, Tensor, float, int, Tensor | None]:
    """Checked positions, the softmax scale, the sequence length (for length-dependent RoPE scalings; from
    `layout` when given, else read from the positions) and the per-row logit factor (Hx, Lq) (method's query
    scale over the temperature), or None."""
    check_scheme(scheme, method)
    q_pos, k_pos = default_positions(q, k, q_pos, k_pos)
    if layout is not None:
        seq_len = layout.seq_len or 1
    else:
        top = [int(p.max()) for p in (q_pos, k_pos) if p.numel()]
        seq_len = max(top) + 1 if top else 1
    method.check_length(seq_len)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return q_pos, k_pos, scale, seq_len, _row_factor(method.query_scale(q_pos), q_pos, temperature)


def _row_factor(factor: Tensor | None, q_pos: Tensor, temperature: Tensor | float | None) -> Tensor | None:
    """A per-query logit factor (Lq,) (a method's) divided by the temperature, as (1 or H, Lq) fp32, or None."""
    if factor is None and temperature is None:
        return None
    rows = torch.ones(1, q_pos.numel(), device=q_pos.device) if factor is None else factor.float()[None]
    if temperature is not None:
        tau = torch.as_tensor(temperature, dtype=torch.float32, device=q_pos.device)
        if tau.dim() > 2:
            raise ConfigError(f"temperature must be a scalar, (H,) or (H, Lq); got shape {tuple(tau.shape)}")
        rows = rows / (tau[:, None] if tau.dim() == 1 else tau)
    return rows


def reference_extended_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scheme: PositionScheme | None,
    method: ExtensionMethod,
    q_pos: Tensor | None = None,
    k_pos: Tensor | None = None,
    scale: float | None = None,
    temperature: Tensor | float | None = None,
    scores: LayerScores = PLAIN_SCORES,
) -> Tensor:
    """Dense attention of q (B, H, Lq, D), k (B, H, Lk, Dk), v under `method`, from its formula: each pair scored
    with the query rotated at d'(m, n) and the key at 0, capped by `scores.softcap`, one fp32 softmax over the
    visible pairs with `scores.sinks` in its denominator."""
    q_pos, k_pos, scale, seq_len, rows = _prepare(q, k, scheme, method, q_pos, k_pos, scale, temperature)
    assert scheme is not None  # `check_scheme` refused None
    B, H, Lq, D = q.shape
    Lk, Dk = k.shape[-2], k.shape[-1]
    remapped, visible = method.remap(q_pos[:, None], k_pos[None, :])
    remapped = remapped.to(torch.float64).expand(Lq, Lk)
    logits = torch.empty(B, H, Lq, Lk, dtype=torch.float32, device=q.device)
    step = max(1, REFERENCE_PAIRS // max(1, Lk))
    for start in range(0, Lq, step):
        stop = min(start + step, Lq)
        pairs = remapped[start:stop].reshape(-1)
        qe = q[..., start:stop, None, :].expand(B, H, stop - start, Lk, D).reshape(B, H, -1, D)
        ke = k[..., None, :, :].expand(B, H, stop - start, Lk, Dk).reshape(B, H, -1, Dk)
        qr, kr = scheme.rotate(qe, ke, pairs, torch.zeros_like(pairs), seq_len)
        logits[..., start:stop, :] = (qr.float() * kr.float()).sum(-1).view(B, H, stop - start, Lk)
    logits = logits * scale
    if rows is not None:
        logits = logits * rows[..., None]
    logits = scores.cap(logits).masked_fill(~visible.expand(Lq, Lk), float("-inf"))
    return (scores.softmax(logits) @ v.float()).to(v.dtype)


def extended_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scheme: PositionScheme | None,
    method: ExtensionMethod,
    q_pos: Tensor | None = None,
    k_pos: Tensor | None = None,
    scale: float | None = None,
    temperature: Tensor | float | None = None,
    block_size: int | None = None,
    scores: LayerScores = PLAIN_SCORES,
) -> Tensor:
    """Attention of q (B, H, Lq, D), k (B, H, Lk, Dk), v under `method`: query blocks x passes x key tiles,
    merged by log-sum-exp; equal to `reference_extended_attention` without its Lq x Lk tensors.

    Every query's own position must be among the keys' (each method shows a query itself, d = 0). Without
    autograd on CPU each tile is one flash kernel call; elsewhere an exact fp32 computation per tile.
    """
    q_pos, k_pos, scale, seq_len, rows = _prepare(q, k, scheme, method, q_pos, k_pos, scale, temperature)
    tiles = TileRun(scheme, method.passes, method.period, seq_len, repr(method), scores)
    return tiled_passes(q, k, v, tiles, q_pos, k_pos, scale, rows, block_size)


def flex_extended_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scheme: PositionScheme | None,
    method: ExtensionMethod,
    q_pos: Tensor | None = None,
    k_pos: Tensor | None = None,
    scale: float | None = None,
    temperature: Tensor | float | None = None,
    layout: PositionLayout | None = None,
    scores: LayerScores = PLAIN_SCORES,
) -> Tensor:
    """`extended_attention` with each pass one FlexAttention call (`lextra.attention.flex.flex_band_attention`):
    queries in as few blocks as the method's `period` allows (one block without one), each pass rotating the
    block's queries and all keys at its positions, its band as a BlockMask, merged by log-sum-exp. Forward only on
    CPU; on CUDA forward and backward. Refuses what flex cannot rotate in one call (xPos past its span). With
    `layout` (the positions' host-side facts) and contiguous queries, blocks, lengths and BlockMask keys come from
    it: only the check that every query sees a key reads the device."""
    q_pos, k_pos, scale, seq_len, rows = _prepare(q, k, scheme, method, q_pos, k_pos, scale, temperature, layout)
    reason = flex_unsupported(scheme, q_pos, k_pos, layout)
    if reason is not None:
        raise ConfigError(reason)
    B, H, Lq, _ = q.shape
    if Lq == 0 or k.shape[-2] == 0:
        return q.new_zeros(B, H, Lq, v.shape[-1])
    run = TileRun(scheme, method.passes, method.period, seq_len, repr(method), scores)
    q_list, k_first = _host_positions(q_pos, k_pos, layout)
    q_runs = isinstance(q_list, range)
    q_sorted = q_runs or all(a <= b for a, b in itertools.pairwise(q_list))
    outputs: list[Tensor] = []
    for start, stop in query_blocks(q_list, Lq if q_sorted else 1, run.period):
        block = q_list[start:stop]
        first = (block[0], k_first) if k_first is not None and (q_runs or contiguous_run(list(block))) else None
        factor = None if rows is None else rows[..., start:stop, None]
        queries = (q_pos[start:stop], q[..., start:stop, :], min(block), max(block))
        acc, lse = _flex_block(run, queries, k, v, k_pos, factor, scale, first)
        outputs.append(scores.finish(acc, lse, slice(start, stop)).to(v.dtype))
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=-2)


def _host_positions(
    q_pos: Tensor, k_pos: Tensor, layout: PositionLayout | None
) -> tuple[list[int] | range, int | None]:
    """The query positions on the host (a range when `layout` says they are contiguous, read from the device
    otherwise) and the first key position when the keys are contiguous, else None."""
    if layout is not None and layout.q_contiguous:
        q_list = range(layout.q_first, layout.q_first + q_pos.numel())
        return q_list, layout.k_first if layout.k_contiguous else None
    k_list = k_pos.tolist()
    return q_pos.tolist(), k_list[0] if contiguous_run(k_list) else None


def _flex_block(
    run: TileRun,
    queries: tuple[Tensor, Tensor, int, int],
    k: Tensor,
    v: Tensor,
    k_pos: Tensor,
    factor: Tensor | None,
    scale: float,
    first: tuple[int, int] | None,
) -> tuple[Tensor, Tensor]:
    """One query block's passes as FlexAttention calls merged by log-sum-exp (fp32; with the rows' log-sum-exp):
    `queries` = their positions, their q, the first and last position; `factor` their rows' logit factor."""
    qp, qc, m_lo, m_hi = queries
    grad = torch.is_grad_enabled()
    acc: Tensor | None = None
    lse: Tensor | None = None
    for p in run.passes(m_lo, m_hi):
        q_at = p.q_at(qp)
        qr = run.queries(qc, k, q_at)
        if factor is not None:
            qr = qr * factor.to(qr.dtype)
        kr = run.keys(qc, k, q_at, p.k_at(k_pos))
        part, part_lse = flex_band_attention(qr, kr, v, qp, k_pos, p.distance, p.keys, scale, first=first, **run.cap)
        if grad:
            acc, lse = merge_out_of_place(acc, lse, part, part_lse)
        else:
            acc, lse = merge_tiles(acc, lse, part, part_lse)
        del part, part_lse, qr, kr
    if acc is None or lse is None or bool((lse <= LSE_FLOOR).any()):
        raise ConfigError(f"{run.label}: queries at {m_lo}..{m_hi} see no key; their own positions must be keys")
    return acc, lse


def masked_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Mask | str,
    q_pos: Tensor | None = None,
    k_pos: Tensor | None = None,
    scale: float | None = None,
    temperature: Tensor | float | None = None,
    block_size: int | None = None,
) -> Tensor:
    """Attention of (already rotated, or position-free) q, k, v under a mask that states its rule per query block
    as a key range and a distance band (`Mask.band`: causal, window, BCA), through the tiles of the methods' fast
    path: tiles the mask hides are skipped, tiles it shows run unmasked, the diagonal tile causally, and only
    pieces an edge crosses get a float mask. Query blocks are `max(TILE, mask.period)` long by default, so that
    a BCA block is two flash calls (its causal square and the previous block) instead of many small ones.
    Exact; `masked_attention_applies` says when it runs the flash kernel (no autograd, CPU, fp32/bf16)."""
    mask = build_mask(mask)
    q_pos, k_pos = default_positions(q, k, q_pos, k_pos)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale

    def passes(q_first: int, q_last: int) -> list[Pass]:
        rule = mask.band(q_first, q_last)
        if rule is None:
            raise ConfigError(f"mask {mask!r} states no key range and distance band for queries {q_first}..{q_last}")
        keys, distance = rule
        return [Pass("mask", same_position, same_position, distance, keys)]

    tiles = TileRun(None, passes, mask.period, None, repr(mask))
    block = block_size or max(TILE, mask.period or 0)
    return tiled_passes(q, k, v, tiles, q_pos, k_pos, scale, _row_factor(None, q_pos, temperature), block)


def masked_attention_applies(mask: Mask, query: Tensor) -> bool:
    """Whether `masked_attention` is the faster exact path for `mask`: a mask that hides work (not causal, not
    full) and states its bands, on CPU without autograd in fp32 or bf16 (the flash kernel's log-sum-exp)."""
    return (
        not (mask.exactly_causal or mask.hides_nothing)
        and mask.band(0, 0) is not None
        and not torch.is_grad_enabled()
        and query.device.type == "cpu"
        and query.dtype in (torch.float32, torch.bfloat16)
    )


class _BandedBackend(AttentionBackend):
    """`masked_attention` as a backend: the tiles of a mask's bands, for plain calls (no scheme, bias, padding,
    sinks or softcap) on CPU without autograd in fp32 or bf16."""

    name = "banded"

    def applies(self, ctx: AttentionContext) -> str | None:
        plain = ctx.scheme is None and ctx.sinks is None and ctx.softcap is None and not ctx.materialised
        runs = not torch.is_grad_enabled() and ctx.device.type == "cpu" and ctx.dtype in (torch.float32, torch.bfloat16)
        if plain and runs and ctx.mask.band(0, 0) is not None:
            return None
        return "the banded tiles take plain calls on CPU without autograd (fp32, bf16) under a mask that states bands"

    def run(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        return masked_attention(q, k, v, ctx.mask, ctx.q_pos, ctx.k_pos, ctx.scale, ctx.tau, ctx.block_size)


_BANDED = _BandedBackend()


class BandedMasks(AttentionExtension):
    """The wrapper a Hugging Face layer attends through: under `auto`, a mask that hides work and states its bands
    (a window, BCA) runs as `masked_attention`'s tiles where they apply (one causal flash call on a BCA block's
    square and one unmasked call on the previous block: no flips or copies, 0.73x of causal SDPA's time against
    1.17x for the chunked path under CPU contention, benchmarks/README.md); every other call takes the dispatch's
    own choice."""

    name = "banded masks"
    heads_alike = True

    def backend_for(self, ctx: AttentionContext) -> AttentionBackend:
        if ctx.backend != "auto":
            return get_backend(ctx.backend)
        hides_work = not (ctx.mask.exactly_causal or ctx.mask.hides_nothing)
        if hides_work and _BANDED.applies(ctx) is None:
            return _BANDED
        return choose_backend(ctx)


#: the one `BandedMasks` wrapper (it holds no state)
BANDED_MASKS = BandedMasks()


class _PassesBackend(AttentionBackend):
    """A backend computing a call under an extension method's passes (`ExtendedAttention.backend_for`)."""

    def __init__(self, method: ExtensionMethod) -> None:
        self.method = method

    def applies(self, ctx: AttentionContext) -> str | None:
        return None


class ExtendedReference(_PassesBackend):
    """The method's dense reference (`reference_extended_attention`): what backend='reference' runs under it."""

    name = "reference"

    def run(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        args = (ctx.scheme, self.method, ctx.q_pos, ctx.k_pos, ctx.scale, ctx.tau, LayerScores.of(ctx))
        return reference_extended_attention(q, k, v, *args)


class ExtendedTiles(_PassesBackend):
    """Query blocks x passes x key tiles (`extended_attention`): the CPU's fastest exact path under a method."""

    name = "tiled"

    def run(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        args = (ctx.scheme, self.method, ctx.q_pos, ctx.k_pos, ctx.scale, ctx.tau, ctx.block_size, LayerScores.of(ctx))
        return extended_attention(q, k, v, *args)


class ExtendedFlex(_PassesBackend):
    """One FlexAttention call per pass (`flex_extended_attention`), where the flex backend applies."""

    name = "flex"

    def applies(self, ctx: AttentionContext) -> str | None:
        return get_backend("flex").applies(ctx)

    def run(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        args = (ctx.scheme, self.method, ctx.q_pos, ctx.k_pos, ctx.scale, ctx.tau, ctx.facts, LayerScores.of(ctx))
        return flex_extended_attention(q, k, v, *args)


class ExtendedAttention(AttentionExtension):
    """A layer's attention under `method` (`SelfAttention.extension`, `attention(..., extension=)`): a wrapper
    whose backends are the method's dense reference (backend 'reference'), its passes as FlexAttention calls
    ('flex'; what 'auto' runs on CUDA where flex applies) and its tiled passes (any other backend). The mask must
    be causal (the method sets its own visibility). Calling it takes `attention`'s keywords."""

    heads_alike = True

    def __init__(self, method: ExtensionMethod) -> None:
        self.method = method
        self.name = method.name
        self.backends: dict[str, AttentionBackend] = {
            backend.name: backend
            for backend in (ExtendedReference(method), ExtendedTiles(method), ExtendedFlex(method))
        }

    def backend_for(self, ctx: AttentionContext) -> AttentionBackend:
        if not ctx.mask.exactly_causal:
            raise ConfigError(
                f"extension {self.method.name!r} sets its own visibility over causal attention; "
                f"use mask='causal', not {ctx.mask!r}"
            )
        name = self.path(ctx) if ctx.backend == "auto" else ctx.backend
        return self.backends.get(name, self.backends["tiled"])

    def flex_reason(self, ctx: AttentionContext) -> str | None:
        """Why the passes cannot run as FlexAttention calls here (None: they can), from the context alone."""
        return self.backends["flex"].applies(ctx)

    def path(self, ctx: AttentionContext) -> str:
        """What backend='auto' runs: "flex" (one FlexAttention call per pass) on CUDA where flex applies, else
        "tiled" (query blocks x key tiles, one flash call each: the CPU's fastest exact path)."""
        if ctx.device.type == "cuda" and self.flex_reason(ctx) is None:
            return "flex"
        return "tiled"

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, **options: Unpack[AttentionOptions]) -> Tensor:
        """`attention(q, k, v, extension=self, **options)`."""
        options["extension"] = self
        return attention(q, k, v, **options)

    def retains(self, k_pos: Tensor, next_query: int) -> Tensor:
        """Which cached keys a query at `next_query` or later can still see (the cache evicts the others)."""
        return self.method.retains(k_pos, next_query)

    def __repr__(self) -> str:
        return f"ExtendedAttention({self.method!r})"


def apply_extension(
    model: GPT, method: ExtensionMethod | str | None, *, layers: list[int] | None = None, **options: Any
) -> ExtensionMethod | None:
    """Make the attention layers `layers` of `model` (default: all) attend under `method` (a built method or a spec
    such as 'self_extend:group=4', with `options` overriding), checked against each layer's scheme first, the
    other layers without one; None or "none" removes it. Returns the method. The model's KV cache then keeps
    un-rotated keys and, for bounded methods, evicts."""
    if method is None or method == "none":
        for block in model.blocks:
            cast(Block, block).attn._set_extension(None)
        return None
    built = build_extension(method, model.config.train_len, **options)
    chosen = set(range(model.config.n_layer) if layers is None else layers)
    for layer in sorted(chosen):
        check_scheme(model.scheme_for(layer), built)
    hook = ExtendedAttention(built)
    for layer, block in enumerate(model.blocks):
        cast(Block, block).attn._set_extension(hook if layer in chosen else None)
    return built
