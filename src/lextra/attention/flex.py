"""The `flex` backend: one compiled FlexAttention call (Dong et al. 2024, arXiv 2412.05496) per attention.

The scheme's bias becomes the `score_mod` (a per-distance table, or the scheme's own per-query code), the mask the
`mask_mod` with a `BlockMask` built blockwise (never an L x L tensor). Lengths pad to `bucket(n)`, so one kernel
serves a bucket; at most `RECOMPILE_LIMIT` kernels per process. `flex_band_attention` runs one pass of an
extension method and returns its rows' log-sum-exp. No backward on CPU; a query that sees no key gets zeros.
"""

from __future__ import annotations

import functools
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from lextra.attention.context import AttentionContext
from lextra.attention.layout import PositionLayout
from lextra.attention.masks import UNBOUNDED, Mask
from lextra.errors import ConfigError
from lextra.positions.base import PositionScheme, QueryBias, ScoreLayout

#: FlexAttention's sparse block (query and key): the unit of skipping and of padding
BLOCK = 128
#: compiled kernels kept per process; one more raises `CompileBudgetError` rather than run uncompiled (L x L)
RECOMPILE_LIMIT = 256
#: cached BlockMasks (each O((L / BLOCK)^2) int32 numbers)
BLOCK_MASK_CACHE = 32
#: booleans evaluated per step when classifying blocks (rows of query blocks x their keys)
MASK_BUDGET = 1 << 24

ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]

_BLOCK_MASKS: OrderedDict[tuple, BlockMask] = OrderedDict()
#: what each BlockMask `flex_block_mask` returned was built for: (mask repr, query positions, key positions)
_BUILT: weakref.WeakKeyDictionary[BlockMask, tuple[str, Tensor, Tensor]] = weakref.WeakKeyDictionary()


def bucket(n: int) -> int:
    """The padded length for n positions: 1 for n = 1, else the smallest 128 x {1, 2, 3, 4, 6, 8, ...} >= n."""
    if n <= 1:
        return 1
    multiple = 1
    while BLOCK * multiple < n:  # 1, 2, 3, 4, 6, 8, 12, ...: a power of two, then 3/2 of it, then the next one
        power = multiple & (multiple - 1) == 0
        multiple = 2 if multiple == 1 else multiple * 3 // 2 if power else multiple * 4 // 3
    return BLOCK * multiple


def padded_lengths(n_queries: int, n_keys: int) -> tuple[int, int]:
    """(bucket(Lq), bucket(Lk)) with keys padded to at least one block: the shapes FlexAttention compiles for."""
    return bucket(n_queries), max(BLOCK, bucket(n_keys))


@dataclass(frozen=True)
class _Layout:
    """Real and padded lengths, and positions padded so every table index stays in range."""

    n_q: int
    n_k: int
    pad_q: int
    pad_k: int
    q_rows: Tensor  # (pad_q,) query positions, padded with the largest
    k_rows: Tensor  # (pad_k,) key positions, padded with the smallest
    lo: int  # smallest distance q - k
    n_distances: int  # distances lo .. lo + n_distances - 1


def _layout(q_pos: Tensor, k_pos: Tensor, facts: PositionLayout | None = None) -> _Layout:
    """Padded lengths and rows from the positions' host-side facts (read from them when not given)."""
    facts = facts if facts is not None else PositionLayout.of(q_pos, k_pos)
    n_q, n_k = q_pos.numel(), k_pos.numel()
    pad_q, pad_k = padded_lengths(n_q, n_k)
    q_lo, q_hi = facts.q_min, facts.q_max
    k_lo, k_hi = facts.k_min, facts.k_max
    q_rows = torch.cat((q_pos, q_pos.new_full((pad_q - n_q,), q_hi)))
    k_rows = torch.cat((k_pos, k_pos.new_full((pad_k - n_k,), k_lo)))
    return _Layout(n_q, n_k, pad_q, pad_k, q_rows, k_rows, q_lo - k_hi, (q_hi - q_lo) + (k_hi - k_lo) + 1)


def _mask_mod(mask: Mask, layout: _Layout, device: torch.device) -> Callable[..., Tensor]:
    """FlexAttention's mask_mod: real query and key, and the mask's rule on their positions."""
    q_rows, k_rows = layout.q_rows.to(device), layout.k_rows.to(device)
    n_q = torch.tensor(layout.n_q, device=device)
    n_k = torch.tensor(layout.n_k, device=device)
    if mask.hides_nothing:

        def real_pairs(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return (q_idx < n_q) & (kv_idx < n_k)

        return real_pairs

    def visible_pairs(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return (q_idx < n_q) & (kv_idx < n_k) & mask.visible(q_rows[q_idx], k_rows[kv_idx])

    return visible_pairs


def _sorted(pos: Tensor) -> bool:
    return pos.numel() < 2 or bool((pos.diff() >= 0).all())


def _classify_blocks(mask: Mask, layout: _Layout, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
    """(partial, full): boolean (query blocks, key blocks), which blocks hold some / only visible real pairs,
    from `Mask.allowed` a few query blocks at a time over the keys `Mask.key_spans` bounds (memory O(MASK_BUDGET))."""
    device = q_pos.device
    n_qb, n_kb = -(-layout.pad_q // BLOCK), layout.pad_k // BLOCK
    partial = torch.zeros(n_qb, n_kb, dtype=torch.bool, device=device)
    full = torch.zeros_like(partial)
    bounded = _sorted(q_pos) and _sorted(k_pos)
    rows = max(1, MASK_BUDGET // (BLOCK * layout.pad_k))
    for r0 in range(0, -(-layout.n_q // BLOCK), rows):
        qs, qe = r0 * BLOCK, min((r0 + rows) * BLOCK, layout.n_q)
        qp = q_pos[qs:qe]
        ks, ke = 0, layout.n_k
        if bounded:
            spans = mask.key_spans(int(qp[0]), int(qp[-1]))
            first, last = min(s[0] for s in spans), max(s[1] for s in spans)
            if first > -UNBOUNDED:
                ks = int((k_pos < first).sum())
            if last < UNBOUNDED:
                ke = int((k_pos <= last).sum())
        kb0, kb1 = ks // BLOCK, -(-ke // BLOCK)
        if kb1 <= kb0:
            continue
        ks, ke = kb0 * BLOCK, min(kb1 * BLOCK, layout.n_k)
        visible = mask.allowed(qp, k_pos[ks:ke])
        n_rows, n_cols = -(-(qe - qs) // BLOCK), kb1 - kb0
        visible = F.pad(visible, (0, n_cols * BLOCK - visible.shape[1], 0, n_rows * BLOCK - visible.shape[0]))
        tiles = visible.view(n_rows, BLOCK, n_cols, BLOCK)
        some, every = tiles.any(3).any(1), tiles.all(3).all(1)
        partial[r0 : r0 + n_rows, kb0:kb1] = some & ~every
        full[r0 : r0 + n_rows, kb0:kb1] = every
    return partial, full


def _ordered(dense: Tensor) -> tuple[Tensor, Tensor]:
    """A (query blocks, key blocks) boolean as BlockMask's (1, 1, nq) counts and (1, 1, nq, nk) indices."""
    as_int = dense.to(torch.int32)
    counts = as_int.sum(-1, dtype=torch.int32)
    indices = torch.argsort(as_int, dim=-1, descending=True, stable=True).to(torch.int32)
    return counts[None, None].contiguous(), indices[None, None].contiguous()


def flex_block_mask(
    mask: Mask,
    q_pos: Tensor,
    k_pos: Tensor,
    device: torch.device | str | None = None,
    layout: PositionLayout | None = None,
) -> BlockMask:
    """The BlockMask `flex_attention_forward` uses for these positions (padded to their buckets), cached when
    both position runs are contiguous (keyed by `layout`, read from the positions when not given)."""
    device = torch.device(device) if device is not None else q_pos.device
    q_pos, k_pos = q_pos.to(device), k_pos.to(device)
    facts = layout if layout is not None else PositionLayout.of(q_pos, k_pos)
    key = None
    if facts.q_contiguous and facts.k_contiguous and facts.n_q and facts.n_k:
        key = (type(mask), repr(mask), facts.n_q, facts.n_k, facts.q_first, facts.k_first, str(device))

    def build() -> BlockMask:
        padded = _layout(q_pos, k_pos, facts)
        partial, full = _classify_blocks(mask, padded, q_pos, k_pos)
        block_mask = _from_blocks(partial, full, _mask_mod(mask, padded, device), (padded.pad_q, padded.pad_k))
        _BUILT[block_mask] = (repr(mask), q_pos, k_pos)
        return block_mask

    return _cached(_BLOCK_MASKS, key, build)


def _from_blocks(partial: Tensor, full: Tensor, mask_mod: Any, seq_lengths: tuple[int, int]) -> BlockMask:
    """A BlockMask from (query blocks, key blocks) booleans: `partial` blocks run `mask_mod`, `full` ones do not."""
    counts, indices = _ordered(partial)
    full_counts, full_indices = _ordered(full)
    return BlockMask.from_kv_blocks(
        counts, indices, full_counts, full_indices, BLOCK_SIZE=BLOCK, mask_mod=mask_mod, seq_lengths=seq_lengths
    )


def _cached(cache: OrderedDict[tuple, BlockMask], key: tuple | None, build: Callable[[], BlockMask]) -> BlockMask:
    """The BlockMask cached under `key` (marked most recently used), else `build()`'s, cached under a key that is
    not None (the least recently used dropped beyond `BLOCK_MASK_CACHE` entries)."""
    found = None if key is None else cache.get(key)
    if key is not None and found is not None:
        cache.move_to_end(key)
        return found
    block_mask = build()
    if key is not None:
        cache[key] = block_mask
        while len(cache) > BLOCK_MASK_CACHE:
            cache.popitem(last=False)
    return block_mask


def _table_bias(table: Tensor, q_shift: Tensor, k_rows: Tensor) -> QueryBias:
    """Bias read from a per-distance table (H, n): table[h, (q_pos[q] - lo) - k_pos[kv]]."""

    def table_bias(h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return table[h, q_shift[q_idx] - k_rows[kv_idx]]

    return table_bias


def _bias_mod(bias: QueryBias, tau: Tensor | None) -> ScoreMod:
    """The score plus the bias, over a per-query temperature `tau` (H, padded Lq) where given."""

    def add_bias(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        value = bias(h, q_idx, kv_idx)
        return (score + (value if tau is None else value / tau[h, q_idx])).to(score.dtype)

    return add_bias


def flex_unsupported(
    scheme: PositionScheme | None, q_pos: Tensor, k_pos: Tensor, layout: PositionLayout | None = None
) -> str | None:
    """Why `flex` cannot compute this scheme at these positions (a one-line reason with the fix), or None."""
    if scheme is None:
        return None
    if scheme.rotate_span is not None and q_pos.numel() and k_pos.numel():
        span = (layout if layout is not None else PositionLayout.of(q_pos, k_pos)).span
        if span > scheme.rotate_span:
            return (
                f"backend='flex' rotates all queries and keys in one call and {scheme.name} is exact within "
                f"{scheme.rotate_span} positions, not {span}; use backend='chunked' (or 'auto')"
            )
    if scheme.has_bias and not scheme.distance_only(q_pos) and not scheme.has_query_bias_mod:
        return (
            f"backend='flex' has no score modifier for {scheme.name}'s per-query bias; "
            "use backend='chunked' (or 'auto')"
        )
    limit = scheme.query_bias_limit() if scheme.has_bias else None
    if limit is not None:
        return f"backend='flex' {limit}; use backend='chunked' (or 'auto')"
    return None


@functools.cache
def _compiled_flex() -> Callable[..., Tensor]:
    """`flex_attention` compiled once per process, static shapes (one kernel per bucket; module docstring)."""
    return torch.compile(flex_attention, dynamic=False)


def _pad_rows(x: Tensor, rows: int) -> Tensor:
    return x if x.shape[-2] == rows else F.pad(x, (0, 0, 0, rows - x.shape[-2]))


def _check_block_mask(block_mask: BlockMask, mask: Mask, q_pos: Tensor, k_pos: Tensor) -> None:
    """A caller's BlockMask must be `flex_block_mask`'s for this mask and these positions, on their device."""
    built = _BUILT.get(block_mask)
    if built is None:
        raise ConfigError(
            "block_mask was not built by lextra.attention.flex.flex_block_mask (lextra pads lengths to flex "
            "buckets and hides the padding in its own masks); build it with flex_block_mask(mask, q_pos, k_pos) "
            "or pass none"
        )
    name, bq, bk = built
    same = name == repr(mask) and bq.device == q_pos.device and bq.shape == q_pos.shape and bk.shape == k_pos.shape
    if not (same and torch.equal(bq, q_pos) and torch.equal(bk, k_pos)):
        raise ConfigError(
            f"block_mask was built for {name} over {bq.numel()} queries and {bk.numel()} keys on {bq.device}, "
            f"but this call is {mask!r} over {q_pos.numel()} queries and {k_pos.numel()} keys on {q_pos.device}; "
            "build it with flex_block_mask(mask, q_pos, k_pos) for these positions or pass none"
        )


def flex_attention_forward(
    q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext, *, block_mask: BlockMask | None = None, eager: bool = False
) -> Tensor:
    """softmax((rotate(q) . rotate(k) * scale + bias) / tau, masked) v through one FlexAttention call; q (B, H,
    Lq, D), k (B, H, Lk, Dk), v (B, H, Lk, Dv). `block_mask` (optional) is `flex_block_mask(ctx.mask, ctx.q_pos,
    ctx.k_pos)`; `eager` runs uncompiled (the full score matrix: small inputs only)."""
    scheme, mask, tau = ctx.scheme, ctx.mask, ctx.tau
    device = q.device
    Lq, Lk = q.shape[-2], k.shape[-2]
    if Lq == 0 or Lk == 0:
        return q.new_zeros(*q.shape[:-1], v.shape[-1])
    q_pos, k_pos = ctx.q_pos.to(device), ctx.k_pos.to(device)
    facts = ctx.facts
    reason = flex_unsupported(scheme, q_pos, k_pos, facts)
    if reason is not None:
        raise ConfigError(reason)
    padded = _layout(q_pos, k_pos, facts)
    if block_mask is None:
        block_mask = flex_block_mask(mask, q_pos, k_pos, device, facts)
    else:
        _check_block_mask(block_mask, mask, q_pos, k_pos)
    if ctx.padding is not None:
        block_mask = _with_padding(block_mask, ctx.padding, padded)
    if scheme is not None and scheme.transforms_qk:
        q, k = scheme.rotate(q, k, q_pos, k_pos, facts.seq_len)
    if tau is not None:
        q = q / tau[..., None].to(q.dtype)
    score_mod, captured = _score_mod(scheme, tau, padded, q_pos, q.shape[1], ctx.softcap, ctx.score_bias)
    _refuse_cpu_training(q, k, v, *captured)
    qp, kp, vp = _pad_rows(q, padded.pad_q), _pad_rows(k, padded.pad_k), _pad_rows(v, padded.pad_k)
    if ctx.sinks is not None:
        out, lse = _flex_with_lse(
            qp, kp, vp, Lq, eager or device.type == "cpu", score_mod=score_mod, block_mask=block_mask, scale=ctx.scale
        )
        return with_sinks(out, lse, ctx.sinks)
    out = flex_call(qp, kp, vp, eager, score_mod=score_mod, block_mask=block_mask, scale=ctx.scale)
    return out[..., :Lq, :]


def _score_mod(
    scheme: PositionScheme | None,
    tau: Tensor | None,
    padded: _Layout,
    q_pos: Tensor,
    n_heads: int,
    softcap: float | None,
    score_bias: Tensor | None = None,
) -> tuple[ScoreMod | None, list[Tensor]]:
    """The call's score_mod (None: plain scores) and the tensors it captures: the scheme's bias and the score
    bias over the temperature (a per-head one is divided into the table), capped by `softcap`."""
    per_query_tau = tau is not None and tau.dim() == 2 and tau.shape[-1] != 1
    head_tau = None if tau is None or per_query_tau else tau.reshape(-1, 1).expand(n_heads, 1).to(q_pos.device)
    score_mod, captured = None, [] if tau is None else [tau]
    if scheme is not None and scheme.has_bias:
        bias, tensors = _bias(scheme, padded, q_pos, head_tau)
        captured += tensors
        padded_tau = None
        if tau is not None and per_query_tau:
            n_q = padded.n_q
            padded_tau = F.pad(tau.to(q_pos.device).expand(n_heads, n_q), (0, padded.pad_q - n_q), value=1.0)
        score_mod = _bias_mod(bias, padded_tau)
    if score_bias is not None:
        tempered = score_bias if tau is None else score_bias / tau.to(score_bias.device)[..., None]
        table = _padded_pairs(tempered, padded, 0.0)
        captured.append(table)
        score_mod = _tensor_bias_mod(score_mod, _pair_reader(table))
    if softcap is not None:
        score_mod = _capped_mod(score_mod, softcap)
    return score_mod, captured


def _bias(
    scheme: PositionScheme, padded: _Layout, q_pos: Tensor, head_tau: Tensor | None
) -> tuple[QueryBias, list[Tensor]]:
    """The scheme's bias as FlexAttention indexes it (a per-distance table, else the scheme's `query_bias_mod`),
    and the tensors it captures."""
    device = q_pos.device
    n_table = max(padded.pad_q + padded.pad_k, bucket(padded.n_distances))  # one length per pair of buckets
    if scheme.distance_only(q_pos):
        distance = torch.arange(padded.lo, padded.lo + padded.n_distances, device=device)
        table = scheme.distance_bias(distance).to(device)
        if head_tau is not None:
            table = table / head_tau
        table = F.pad(table, (0, n_table - table.shape[1]))
        return _table_bias(table, (padded.q_rows - padded.lo).to(device), padded.k_rows.to(device)), [table]
    rows = ScoreLayout(padded.q_rows.to(device), padded.k_rows.to(device), padded.lo, padded.n_distances, n_table)
    return scheme.query_bias_mod(rows, head_tau)


def _refuse_cpu_training(*tensors: Tensor) -> None:
    """FlexAttention has no backward on CPU: refuse a call autograd would differentiate there."""
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
    if needs_grad and tensors[0].device.type == "cpu":
        raise ConfigError(
            "backend='flex' cannot train on CPU: FlexAttention has no backward on CPU; use backend='chunked' "
            "(or 'auto'), or run on CUDA"
        )


def _flex_with_lse(
    qp: Tensor, kp: Tensor, vp: Tensor, n_queries: int, eager: bool, **kwargs: Any
) -> tuple[Tensor, Tensor]:
    """The first `n_queries` rows of a FlexAttention call on padded q, k, v (0 where a row saw no key) and their
    log-sum-exp (fp32, -inf there); eager on CPU, whose inductor flex kernel returns no log-sum-exp."""
    out, aux = flex_call(qp, kp, vp, eager, **kwargs, **_lse_request())
    lse = (aux if isinstance(aux, Tensor) else aux.lse)[..., :n_queries].float()
    return out[..., :n_queries, :].masked_fill(torch.isneginf(lse)[..., None], 0.0), lse


def _padded_pairs(pairs: Tensor, padded: _Layout, fill: float | bool) -> Tensor:
    """A (B|1, H|1, Lq|1, Lk|1) tensor over padded queries and keys: keys expanded to Lk and padded to the key
    bucket, real queries padded to the query bucket (a broadcast query axis stays 1), new entries `fill`."""
    pairs = pairs.expand(*pairs.shape[:-1], padded.n_k)
    rows = 1 if pairs.shape[-2] == 1 else padded.pad_q
    out = pairs.new_full((*pairs.shape[:-2], rows, padded.pad_k), fill)
    out[..., : pairs.shape[-2], : padded.n_k] = pairs
    return out


def _pair_reader(pairs: Tensor) -> Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]:
    """Reads a padded (B|1, H|1, Lq|1, Lk) tensor at (b, h, q_idx, kv_idx), broadcast axes at index 0."""
    per_b, per_h, per_q = pairs.shape[0] > 1, pairs.shape[1] > 1, pairs.shape[2] > 1

    def read(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return pairs[b if per_b else 0, h if per_h else 0, q_idx if per_q else 0, kv_idx]

    return read


def _tensor_bias_mod(inner: ScoreMod | None, read: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]) -> ScoreMod:
    """`inner` (or the plain score) plus a materialised score bias read per pair."""

    def add_pair_bias(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        value = score if inner is None else inner(score, b, h, q_idx, kv_idx)
        return (value + read(b, h, q_idx, kv_idx)).to(score.dtype)

    return add_pair_bias


def _with_padding(block_mask: BlockMask, padding: Tensor, padded: _Layout) -> BlockMask:
    """`block_mask` with a boolean padding mask (B|1, H|1, Lq|1, Lk), True visible, joined to its mask_mod."""
    visible = _pair_reader(_padded_pairs(padding, padded, False))
    base = block_mask.mask_mod

    def padded_pairs(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return base(b, h, q_idx, kv_idx) & visible(b, h, q_idx, kv_idx)

    blocks = block_mask.to_dense()[0, 0].bool()
    return _from_blocks(blocks, torch.zeros_like(blocks), padded_pairs, block_mask.seq_lengths)


def _capped_mod(inner: ScoreMod | None, cap: float) -> ScoreMod:
    """Gemma 2's softcap on top of `inner` (or the plain score): tanh(s / cap) cap."""

    def capped(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        value = score if inner is None else inner(score, b, h, q_idx, kv_idx)
        return (torch.tanh(value / cap) * cap).to(score.dtype)

    return capped


def with_sinks(out: Tensor, lse: Tensor, sinks: Tensor) -> Tensor:
    """Softmax output `out` (B, H, L, D) of rows with log-sum-exp `lse` (B, H, L) re-normalised with one more
    term exp(sink_h) in each denominator: out x sigmoid(lse - sink_h) (exact: a row's weights are e^s / Z, and Z
    becomes Z + e^sink). Sinks are per head (H,) or per row (H, L). A row that saw no key (lse -inf) stays 0."""
    factor = torch.sigmoid(lse.float() - sinks.float().reshape(sinks.shape[0], -1))
    return (out.float() * factor[..., None]).to(out.dtype)


class CompileBudgetError(ConfigError):
    """FlexAttention would need more compiled kernels than `RECOMPILE_LIMIT` in this process."""


def _budget_settings() -> dict[str, object]:
    """Dynamo settings for lextra's budget, under the installed torch's names (2.7's or 2.5/2.6's)."""
    config = torch._dynamo.config
    new = hasattr(config, "fail_on_recompile_limit_hit")
    limit, total, fail = (
        ("recompile_limit", "accumulated_recompile_limit", "fail_on_recompile_limit_hit")
        if new
        else ("cache_size_limit", "accumulated_cache_size_limit", "fail_on_cache_limit_hit")
    )
    return {limit: RECOMPILE_LIMIT, total: max(getattr(config, total), 4 * RECOMPILE_LIMIT), fail: True}


def flex_call(q: Tensor, k: Tensor, v: Tensor, eager: bool, **kwargs: Any) -> Any:
    """One FlexAttention call: `eager` uncompiled (the full score matrix), else compiled (`_run_compiled`)."""
    if not eager:
        return _run_compiled(q, k, v, **kwargs)
    with warnings.catch_warnings():  # eager on purpose: "called without torch.compile()"
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return flex_attention(q, k, v, **kwargs)


def _run_compiled(q: Tensor, k: Tensor, v: Tensor, **kwargs: Any) -> Any:
    """The compiled flex call under lextra's recompile budget; a call past it raises `CompileBudgetError`."""
    names = ("FailOnRecompileLimitHit", "FailOnCacheLimitHit")  # torch >= 2.7, 2.5 and 2.6
    limit_hit = next(getattr(torch._dynamo.exc, name) for name in names if hasattr(torch._dynamo.exc, name))
    try:
        with torch._dynamo.config.patch(_budget_settings()):
            return _compiled_flex()(q, k, v, **kwargs)
    except limit_hit as err:
        raise CompileBudgetError(
            f"FlexAttention has compiled lextra.attention.flex.RECOMPILE_LIMIT = {RECOMPILE_LIMIT} kernels in this "
            "process (one per length bucket, mask, score modifier, dtype and shape) and would need another; rather "
            "than run it uncompiled (the full L x L scores), this call stops: raise RECOMPILE_LIMIT, or call "
            "torch._dynamo.reset() between independent runs"
        ) from err


#: stands for "no position" in the per-block bounds of padding (far inside int64, so differences never overflow)
_FAR_POSITION = 1 << 60
_BAND_MASKS: OrderedDict[tuple, BlockMask] = OrderedDict()


def _block_bounds(pos: Tensor, n_blocks: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per block of `BLOCK` positions: the smallest and largest real position, whether it holds any real
    position and whether it holds only real ones (padding past `pos.numel()`)."""
    n, size = pos.numel(), n_blocks * BLOCK
    pos = pos.long()
    lo = F.pad(pos, (0, size - n), value=_FAR_POSITION).view(n_blocks, BLOCK).amin(1)
    hi = F.pad(pos, (0, size - n), value=-_FAR_POSITION).view(n_blocks, BLOCK).amax(1)
    starts = torch.arange(n_blocks, device=pos.device) * BLOCK
    return lo, hi, starts < n, starts + BLOCK <= n


def band_block_mask(
    q_pos: Tensor,
    k_pos: Tensor,
    distance: tuple[int, int],
    keys: tuple[int, int],
    *,
    first: tuple[int, int] | None = None,
) -> BlockMask:
    """The BlockMask of a band pass: pair (m, n) visible when `keys[0] <= n <= keys[1]` and `distance[0] <= m - n
    <= distance[1]` (inclusive), over queries and keys padded to `padded_lengths`; blocks classified from each
    block's smallest and largest position, no host sync. `first`: the first query and key positions of contiguous
    runs, by which the mask is cached."""
    device = q_pos.device
    n_q, n_k = q_pos.numel(), k_pos.numel()
    pad_q, pad_k = padded_lengths(n_q, n_k)
    key = None if first is None else (n_q, n_k, *first, *distance, *keys, str(device))

    def build() -> BlockMask:
        partial, every = _band_blocks(q_pos, k_pos, pad_q, pad_k, distance, keys)
        mask_mod = _band_mod(q_pos, k_pos, pad_q, pad_k, distance, keys)
        return _from_blocks(partial, every, mask_mod, (pad_q, pad_k))

    return _cached(_BAND_MASKS, key, build)


def _band_blocks(
    q_pos: Tensor, k_pos: Tensor, pad_q: int, pad_k: int, distance: tuple[int, int], keys: tuple[int, int]
) -> tuple[Tensor, Tensor]:
    """(partial, full): boolean (query blocks, key blocks), the blocks the band shows in part and in full."""
    n_qb, n_kb = -(-pad_q // BLOCK), pad_k // BLOCK
    m_lo, m_hi, q_real, q_whole = _block_bounds(q_pos, n_qb)
    n_lo, n_hi, k_real, k_whole = _block_bounds(k_pos, n_kb)
    (d_lo, d_hi), (k_lo, k_hi) = distance, keys
    m_lo, m_hi, q_real, q_whole = m_lo[:, None], m_hi[:, None], q_real[:, None], q_whole[:, None]
    hidden = (n_hi < k_lo) | (n_lo > k_hi) | (m_hi - n_lo < d_lo) | (m_lo - n_hi > d_hi)
    some = q_real & k_real & ~hidden
    shown = (k_lo <= n_lo) & (n_hi <= k_hi) & (m_lo - n_hi >= d_lo) & (m_hi - n_lo <= d_hi)
    every = some & q_whole & k_whole & shown
    return some & ~every, every


def _band_mod(
    q_pos: Tensor, k_pos: Tensor, pad_q: int, pad_k: int, distance: tuple[int, int], keys: tuple[int, int]
) -> Callable[..., Tensor]:
    """The band's mask_mod; its bounds a captured tensor, so every band shares one compiled kernel."""
    device = q_pos.device
    q_rows = F.pad(q_pos.long(), (0, pad_q - q_pos.numel()))
    k_rows = F.pad(k_pos.long(), (0, pad_k - k_pos.numel()))
    bounds = torch.tensor([*distance, *keys], dtype=torch.long, device=device)
    real_q, real_k = torch.tensor(q_pos.numel(), device=device), torch.tensor(k_pos.numel(), device=device)

    def band_pairs(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        m, n = q_rows[q_idx], k_rows[kv_idx]
        d = m - n
        real = (q_idx < real_q) & (kv_idx < real_k)
        return real & (d >= bounds[0]) & (d <= bounds[1]) & (n >= bounds[2]) & (n <= bounds[3])

    return band_pairs


def _lse_request() -> dict[str, Any]:
    """FlexAttention's keyword for each row's log-sum-exp (`return_aux` where torch has it, else `return_lse`)."""
    aux_request = getattr(torch.nn.attention.flex_attention, "AuxRequest", None)
    return {"return_lse": True} if aux_request is None else {"return_aux": aux_request(lse=True)}


def flex_band_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    q_pos: Tensor,
    k_pos: Tensor,
    distance: tuple[int, int],
    keys: tuple[int, int],
    scale: float,
    *,
    first: tuple[int, int] | None = None,
    eager: bool | None = None,
    softcap: float | None = None,
) -> tuple[Tensor, Tensor]:
    """One FlexAttention call over a band pass of already rotated q (B, H, Lq, D), k, v: the pass's output
    (B, H, Lq, Dv) and its rows' log-sum-exp (B, H, Lq) fp32 (-inf, output 0, for a row the pass hides), for
    merging passes (`merge_tiles`). Compiled on CUDA; eager on CPU (forward only, small inputs) unless `eager`."""
    _refuse_cpu_training(q, k, v)
    block_mask = band_block_mask(q_pos, k_pos, distance, keys, first=first)
    pad_q, pad_k = block_mask.seq_lengths
    qp, kp, vp = _pad_rows(q, pad_q), _pad_rows(k, pad_k), _pad_rows(v, pad_k)
    eager = q.device.type == "cpu" if eager is None else eager
    capped = {} if softcap is None else {"score_mod": _capped_mod(None, softcap)}
    return _flex_with_lse(qp, kp, vp, q.shape[-2], eager, block_mask=block_mask, scale=scale, **capped)
