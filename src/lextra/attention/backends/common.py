"""What the backends share: block sizes, rotation and temperature helpers, the one query-block walk
(`walk_blocks`) and the exact log-sum-exp merge of tiles (`merge_tiles`, `attention_with_lse`)."""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from lextra.attention.context import AttentionContext
from lextra.attention.masks import UNBOUNDED, Mask
from lextra.positions.base import PositionScheme

#: elements of one block's bias tensor (x batch broadcast); 2^24 fp32 = 64 MiB
BIAS_BUDGET = 1 << 24
MAX_BLOCK = 1024
#: query block for biases passed as strided table views (small blocks skip most of the masked triangle)
LEAN_BLOCK = 256
#: cap for blocks whose bias is gathered (learned tables under autograd: SDPA's math kernel)
TRAIN_BIAS_BLOCK: int | None = 256
MIN_BLOCK = 16
#: query block = key chunk of the tiled path
TILE = 1024
#: a query position far from the sequence start, where a mask's keys per query block are their steady number
FAR = 1 << 40
#: torch's CPU flash kernel, which also returns each row's log-sum-exp (what merging tiles exactly needs)
FLASH_WITH_LSE = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def contiguous(pos: Tensor) -> bool:
    """Whether positions go up by exactly 1 (an empty run does)."""
    n = pos.numel()
    return n == 0 or (int(pos[-1]) - int(pos[0]) == n - 1 and bool((pos.diff() == 1).all()))


def rotate(
    scheme: PositionScheme | None, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, seq_len: int | None = None
) -> tuple[Tensor, Tensor]:
    """q and k through the scheme's position transform (unchanged for schemes without one)."""
    if scheme is None or not scheme.transforms_qk:
        return q, k
    return scheme.rotate(q, k, q_pos, k_pos, seq_len)


def scaled_query(q: Tensor, tau: Tensor | None) -> Tensor:
    """q / tau (dividing the logits by tau), in fp32 and rounded to q's dtype once."""
    return q if tau is None else (q.float() / tau[..., None]).to(q.dtype)


def float_mask(mask: Tensor, q: Tensor) -> Tensor:
    """A float mask (a bias, 0 / -inf) in the dtype a kernel adds it in: fp32 on the CPU without autograd (the
    flash kernel's accumulation; a bf16 bias would keep 8 bits), else q's dtype."""
    if q.device.type == "cpu" and not torch.is_grad_enabled():
        return mask.float()
    return mask.to(q.dtype)


def masked_sdpa(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, scale: float) -> Tensor:
    """`scaled_dot_product_attention` outside autocast, which would cast a float mask to bf16."""
    with torch.autocast(q.device.type, enabled=False):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale)


def block_tau(tau: Tensor, start: int, stop: int) -> Tensor:
    """The temperature of queries start..stop - 1 ((H, 1) temperatures are every block's)."""
    return tau if tau.shape[-1] == 1 else tau[..., start:stop]


def block_sinks(sinks: Tensor, start: int, stop: int) -> Tensor:
    """The sinks of queries start..stop - 1: per head (H,) every block's, per row (H, Lq) sliced."""
    return sinks if sinks.dim() == 1 else sinks[:, start:stop]


def cap_scores(scores: Tensor, softcap: float) -> Tensor:
    """Gemma 2's logit softcap: tanh(s / c) c, bounding every score to (-c, c)."""
    return torch.tanh(scores / softcap) * softcap


def sink_softmax(logits: Tensor, sinks: Tensor | None) -> Tensor:
    """Softmax over the keys of (B, H, Lq, Lk) logits; learned sinks (H,) or (H, Lq) are one more column in the
    denominator whose probability is dropped (gpt-oss)."""
    if sinks is None:
        return torch.softmax(logits, dim=-1)
    column = sinks.float().reshape(1, sinks.shape[0], -1, 1).expand(*logits.shape[:-1], 1)
    return torch.softmax(torch.cat((logits, column), dim=-1), dim=-1)[..., :-1]


def row_factor(factor: Tensor | None, tau: Tensor | None, n_queries: int, device: torch.device) -> Tensor | None:
    """A per-query logit factor (Lq,) over the temperature as (1|H, Lq) fp32 rows, or None for 1."""
    if factor is None and tau is None:
        return None
    rows = torch.ones(1, n_queries, device=device) if factor is None else factor.float()[None]
    return rows if tau is None else rows / tau


def attention_logits(
    q: Tensor,
    k: Tensor,
    scheme: PositionScheme | None,
    q_pos: Tensor,
    k_pos: Tensor,
    scale: float | None = None,
    tau: Tensor | None = None,
    score_bias: Tensor | None = None,
) -> Tensor:
    """Pre-softmax, pre-mask logits (B, H, Lq, Lk) in fp32: (rotate(q) . rotate(k) * scale + bias) / tau, the
    bias the scheme's plus a materialised `score_bias`."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    qr, kr = rotate(scheme, q, k, q_pos, k_pos)
    logits = (qr.float() @ kr.float().transpose(-1, -2)) * scale
    if scheme is not None and scheme.has_bias:
        logits = logits + scheme.bias(q_pos, k_pos)
    if score_bias is not None:
        logits = logits + score_bias.float()
    if tau is not None:
        logits = logits / tau[..., None]
    return logits


def lse_kernel_applies(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether torch's CPU flash kernel with log-sum-exp runs here: no autograd, CPU, fp32 or bf16."""
    return (
        FLASH_WITH_LSE is not None
        and not torch.is_grad_enabled()
        and device.type == "cpu"
        and dtype in (torch.float32, torch.bfloat16)
    )


def merge_tiles(acc: Tensor | None, lse: Tensor | None, part: Tensor, part_lse: Tensor) -> tuple[Tensor, Tensor]:
    """Fold one tile's output and log-sum-exp into the running ones (fp32, in place); a row no tile lets see a
    key stays at 0 and -inf."""
    if acc is None or lse is None:
        return part.float(), part_lse
    total = torch.logaddexp(lse, part_lse)
    base = total.masked_fill(torch.isneginf(total), 0.0)
    acc.mul_(torch.exp(lse - base)[..., None]).addcmul_(part, torch.exp(part_lse - base)[..., None])
    return acc, total


def attention_with_lse(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scale: float,
    *,
    causal: bool = False,
    mask: Tensor | None = None,
    empty_rows: bool = True,
) -> tuple[Tensor, Tensor]:
    """One tile's softmax attention and its rows' log-sum-exp (B, H, Lq) fp32: torch's CPU flash kernel where
    `lse_kernel_applies`, else explicit fp32. `causal` is top-left aligned; `mask` float 0 / -inf; a row that sees
    no key gives 0 and -inf (`empty_rows=False`: no row of `mask` hides every key)."""
    if FLASH_WITH_LSE is not None and lse_kernel_applies(q.device, q.dtype):
        attn_mask = None if mask is None else float_mask(mask, q)
        out, lse = FLASH_WITH_LSE(q, k, v, 0.0, causal, attn_mask=attn_mask, scale=scale)
        if mask is not None and empty_rows:  # the kernel reports log-sum-exp 0 for a row it was given no key for
            lse = lse.masked_fill(torch.isneginf(mask).all(-1), float("-inf"))
        return out, lse.float()
    return scores_with_lse((q.float() @ k.float().transpose(-1, -2)) * scale, v, causal=causal, mask=mask)


def scores_with_lse(
    logits: Tensor, v: Tensor, *, causal: bool = False, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """`attention_with_lse`'s explicit fp32 path from scaled scores (B, H, Lq, Lk) already computed."""
    if causal:
        hidden = torch.ones(logits.shape[-2], logits.shape[-1], dtype=torch.bool, device=logits.device).triu(1)
        logits = logits.masked_fill(hidden, float("-inf"))
    if mask is not None:
        logits = logits + mask.float()
    empty = torch.isneginf(logits).all(-1, keepdim=True)  # rows without keys: finite logits, then weight 0
    logits = logits.masked_fill(empty, 0.0)
    lse = torch.logsumexp(logits, dim=-1, keepdim=True)
    weights = torch.exp(logits - lse).masked_fill(empty, 0.0)
    return (weights @ v.float()).to(v.dtype), lse.masked_fill(empty, float("-inf")).squeeze(-1)


def query_blocks(q_list: Sequence[int], block: int, period: int | None = None) -> list[tuple[int, int]]:
    """Index ranges of at most `block` queries, cut where sorted positions cross a multiple of `period`."""
    ranges, start, n = [], 0, len(q_list)
    while start < n:
        stop = min(start + block, n)
        if period:
            boundary = (q_list[start] // period + 1) * period
            stop = min(stop, bisect.bisect_left(q_list, boundary, start, stop))
        ranges.append((start, stop))
        start = stop
    return ranges


def budget_block(per_query: int) -> int:
    """Queries per block whose rows of `per_query` elements each fit `BIAS_BUDGET`, within `MIN_BLOCK`..`MAX_BLOCK`."""
    return int(min(MAX_BLOCK, max(MIN_BLOCK, BIAS_BUDGET // max(1, per_query))))


def blockwise(q: Tensor, v: Tensor, ranges: list[tuple[int, int]], attend: Callable[[int, int], Tensor]) -> Tensor:
    """The output (B, H, Lq, Dv) of `attend(start, stop)` over query ranges in order: written into one tensor
    without autograd, joined by one `cat` under it."""
    if torch.is_grad_enabled():
        outputs = [attend(start, stop).to(v.dtype) for start, stop in ranges]
        return outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=-2)
    out = q.new_empty(*q.shape[:-1], v.shape[-1])
    for start, stop in ranges:
        out[..., start:stop, :] = attend(start, stop)
    return out


@dataclass
class QueryBlock:
    """Queries start:stop of a walk (`walk_blocks`) with the keys their mask shows them, the mask inside the
    block (`Mask.within`), its temperature, the scheme whose bias it builds and the walk's shared buffers."""

    start: int
    stop: int
    q_pos: Tensor
    q: Tensor
    k_pos: Tensor
    k: Tensor
    v: Tensor
    mask: Mask
    tau: Tensor | None
    scheme: PositionScheme | None
    workspace: dict[str, Tensor]

    def bias(self, r0: int = 0, r1: int | None = None, c0: int = 0, c1: int | None = None) -> Tensor | None:
        """The scheme's score bias (H|1, rows, keys) of rows r0:r1 and keys c0:c1, or None; built into the walk's
        reused buffers (`PositionScheme.bias_into`), so valid until the next call."""
        if self.scheme is None or not self.scheme.has_bias:
            return None
        return self.scheme.bias_into(self.q_pos[r0:r1], self.k_pos[c0:c1], self.workspace)

    def allowed(self, r0: int = 0, r1: int | None = None, c0: int = 0, c1: int | None = None) -> Tensor | None:
        """The visible pairs (rows, keys) of rows r0:r1 and keys c0:c1, None where the mask hides nothing."""
        return None if self.mask.hides_nothing else self.mask.allowed(self.q_pos[r0:r1], self.k_pos[c0:c1])


def walk_blocks(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    ctx: AttentionContext,
    block: int,
    attend: Callable[[QueryBlock], Tensor],
    *,
    per_block: bool = False,
) -> Tensor:
    """Queries in blocks of `block` (cut at the mask's `period`), each given the keys its mask declares and
    computed by `attend`. The scheme rotates q and k once, or with `per_block` each block's own (at most the
    scheme's `rotate_span` long)."""
    scheme, mask, facts = ctx.scheme, ctx.mask, ctx.facts
    if not per_block:
        q, k = rotate(scheme, q, k, ctx.q_pos, ctx.k_pos)
    elif scheme is not None and scheme.rotate_span is not None:
        block = min(block, scheme.rotate_span)  # no block spans more positions than the rotation allows
    q_list = range(facts.q_first, facts.q_first + facts.n_q) if facts.q_contiguous else ctx.q_pos.tolist()
    workspace: dict[str, Tensor] = {}
    q_sorted = facts.q_contiguous or all(a <= b for a, b in itertools.pairwise(q_list))
    runs = facts.k_contiguous and q_sorted  # the mask's key spans are slices of the keys

    def one(start: int, stop: int) -> Tensor:
        first, last = q_list[start], q_list[stop - 1]
        qp, qc = ctx.q_pos[start:stop], q[..., start:stop, :]
        kp, kc, vc = key_block(mask, first, last, k, v, ctx.k_pos, runs)
        if per_block and scheme is not None:
            qc, kc = scheme.rotate(qc, kc, qp, kp, ctx.seq_len)
        local = mask.within(first, last) if runs else mask
        tau = None if ctx.tau is None else block_tau(ctx.tau, start, stop)
        return attend(QueryBlock(start, stop, qp, qc, kp, kc, vc, local, tau, scheme, workspace))

    return blockwise(q, v, query_blocks(q_list, block, mask.period if facts.q_contiguous else None), one)


def key_indices(mask: Mask, q_first: int, q_last: int, k0: int, n_keys: int) -> list[tuple[int, int]]:
    """Index ranges [lo, hi) into contiguous keys from position k0 holding every key visible to queries in
    [q_first, q_last] (the mask's `key_spans`, clipped and merged; one at least)."""
    ranges: list[tuple[int, int]] = []
    for first, last in sorted(mask.key_spans(q_first, q_last)):
        lo = max(0, min(n_keys, first - k0)) if first > -UNBOUNDED else 0
        hi = max(lo, min(n_keys, last - k0 + 1)) if last < UNBOUNDED else n_keys
        if ranges and lo <= ranges[-1][1]:
            ranges[-1] = (ranges[-1][0], max(ranges[-1][1], hi))
        elif hi > lo or not ranges:
            ranges.append((lo, hi))
    if len(ranges) > 1 and ranges[0][0] == ranges[0][1]:
        ranges.pop(0)
    return ranges


def masked_bias(bias: Tensor, tau: Tensor | None, allowed: Tensor | None) -> Tensor:
    """A score bias (H, c, n) over the temperature `tau`, -inf where `allowed` (c, n) hides a pair: in place
    without autograd (a `bias_into` buffer), new tensors under it."""
    if torch.is_grad_enabled():
        bias = bias if tau is None else bias / tau[..., None]
        return bias if allowed is None else bias.masked_fill(~allowed, float("-inf"))
    if tau is not None:
        bias.div_(tau[..., None])
    if allowed is not None:
        mask_in_place(bias, allowed)
    return bias


def mask_in_place(bias: Tensor, allowed: Tensor) -> None:
    """Set the disallowed entries of an (H, c, n) bias to -inf, touching only the key columns some query hides."""
    partial = (~allowed).any(0).nonzero()
    if partial.numel():
        lo, hi = int(partial[0]), int(partial[-1]) + 1
        bias[..., lo:hi].masked_fill_(~allowed[:, lo:hi], float("-inf"))


def typical_keys(mask: Mask, n_keys: int, block: int) -> int:
    """Keys one query block sees at most: sizes the bias budget (a window sees width + block keys)."""
    count = keys_per_block(mask, block)
    return n_keys if count is None else min(n_keys, count)


def keys_per_block(mask: Mask, block: int) -> int | None:
    """Keys a block of `block` queries far from the start can see, or None when that grows with the position."""
    far = FAR - FAR % mask.period if mask.period else FAR
    spans = mask.key_spans(far, far + block - 1)
    if any(first <= -UNBOUNDED or last >= UNBOUNDED for first, last in spans):
        return None
    count = sum(max(0, last - first + 1) for first, last in spans)
    return count if count < far else None


def key_block(
    mask: Mask, q_first: int, q_last: int, k: Tensor, v: Tensor, k_pos: Tensor, sorted_runs: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """The key positions, keys and values queries at q_first..q_last see (all keys unless `sorted_runs`)."""
    Lk = k_pos.numel()
    spans = key_indices(mask, q_first, q_last, int(k_pos[0]), Lk) if sorted_runs else [(0, Lk)]
    if len(spans) == 1:
        lo, hi = spans[0]
        return k_pos[lo:hi], k[..., lo:hi, :], v[..., lo:hi, :]
    index = torch.cat([torch.arange(lo, hi, device=k_pos.device) for lo, hi in spans])
    return k_pos[index], k.index_select(-2, index), v.index_select(-2, index)


def toeplitz_possible(scheme: PositionScheme | None, mask: Mask, q_pos: Tensor) -> bool:
    """Whether blocks get their bias (or without one their mask) as a strided view of a table."""
    local = mask.within(0, 0)  # BCA is causal within a query block that stays inside one of its blocks
    if local.allowed_distance(q_pos[:1]) is None:
        return False
    if scheme is None or not scheme.has_bias:
        return not local.hides_nothing  # nothing to mask: no mask at all
    frozen = not torch.is_grad_enabled() or not any(p.requires_grad for p in scheme.parameters())
    return frozen and scheme.distance_only(q_pos)
