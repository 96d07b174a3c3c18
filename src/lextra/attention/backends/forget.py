"""Forgetting Attention (Lin et al. 2025, arXiv 2503.02130) in every backend: calls carrying a forget bias
(`AttentionContext.forget`) run here.

    out = softmax((rotate(q) . rotate(k) * scale + c_i - c_j) / tau, masked) v

`reference` adds the dense bias; `chunked` (and `auto` on CPU) runs `TiledForgetAttention`; `sdpa` takes it as a
float mask (`auto`: single queries only); `flex` (and `auto` on CUDA) reads c in a score_mod. Later keys,
extensions, S2-Attn, additive-bias schemes, sinks, softcaps and materialised biases are ConfigErrors."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from lextra.attention.backends.common import key_indices, masked_sdpa, rotate, scaled_query
from lextra.attention.backends.forget_tiled import FORGET_BLOCK, FORGET_KEY_CHUNK, TiledForgetAttention
from lextra.attention.backends.reference import ReferenceBackend
from lextra.attention.context import AttentionBackend, AttentionContext
from lextra.attention.flex import flex_block_mask, flex_call, padded_lengths
from lextra.attention.forget_bias import FULL_MASK_REASON, ForgetBias, bias_scheme_reason, split_fp32
from lextra.errors import ConfigError


def forget_reason(ctx: AttentionContext) -> str | None:
    """Why a forget bias cannot join this call (a one-line ConfigError text naming the fix), or None."""
    if ctx.extension is not None:
        return (
            f"fox: the forget bias c_i - c_j is undefined under {ctx.extension.name!r} (it remaps or regroups "
            "positions); drop the extension method or S2-Attn on FoX layers"
        )
    if ctx.scheme is not None and ctx.scheme.has_bias:
        return bias_scheme_reason(ctx.scheme.name)
    if ctx.mask.hides_nothing:
        return FULL_MASK_REASON
    if ctx.sinks is not None or ctx.softcap is not None:
        return "fox: sinks and softcaps are not defined with the forget bias; drop the sinks / softcap piece"
    if ctx.materialised:
        return "fox: a materialised score bias or padding mask cannot join the forget bias; pass neither"
    return None


def _inverse_tau(ctx: AttentionContext, forget: ForgetBias) -> Tensor | None:
    """1 / tau as (1, H, Lq) fp32 (the bias is divided by the temperature, as the scheme's is), or None."""
    if ctx.tau is None:
        return None
    H, Lq = forget.queries.shape[1], forget.queries.shape[-1]
    return (1.0 / ctx.tau).expand(H, Lq)[None]


class ForgetSdpa(AttentionBackend):
    """One SDPA call with the masked forget bias as its float mask (materialises the (B, H, Lq, Lk) bias)."""

    name = "sdpa"

    def declines(self, ctx: AttentionContext) -> str | None:
        return None if ctx.q_pos.numel() == 1 else "the float mask would hold the L x L forget bias"

    def run(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        assert ctx.forget is not None
        qr, kr = rotate(ctx.scheme, q, k, ctx.q_pos, ctx.k_pos, ctx.seq_len)
        bias = ctx.forget.pairs()
        if ctx.tau is not None:
            bias = bias / ctx.tau[..., None]
        bias = bias.masked_fill(~ctx.allowed(), float("-inf"))
        qs = scaled_query(qr, ctx.tau)
        dtype = torch.float32 if q.device.type == "cpu" else q.dtype
        out = masked_sdpa(qs.to(dtype), kr.to(dtype), v.to(dtype), bias.to(dtype), ctx.scale)
        return out.to(v.dtype)


class ForgetChunked(AttentionBackend):
    """Query blocks x key chunks (`TiledForgetAttention`), each tile's bias from slices of c; trains in O(L)."""

    name = "chunked"

    def run(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        assert ctx.forget is not None
        forget, q_pos, k_pos = ctx.forget, ctx.q_pos, ctx.k_pos
        qr, kr = rotate(ctx.scheme, q, k, q_pos, k_pos, ctx.seq_len)
        qs = scaled_query(qr, ctx.tau)
        block = int(ctx.block_size or FORGET_BLOCK)
        chunk = max(block, FORGET_KEY_CHUNK) if ctx.block_size is None else block
        tiling = (ctx.scale, block, chunk, _key_ranges(ctx), _tile_mask(ctx))
        return TiledForgetAttention.apply(qs, kr, v, forget.queries, forget.keys, _inverse_tau(ctx, forget), *tiling)


def _key_ranges(ctx: AttentionContext) -> Callable[[int, int], list[tuple[int, int]]]:
    """The key index ranges a query block sees: the mask's declared spans over sorted, contiguous keys, else all."""
    q_pos, k_pos, mask = ctx.q_pos, ctx.k_pos, ctx.mask
    n_keys = k_pos.numel()
    if not (ctx.facts.q_contiguous and ctx.facts.k_contiguous) or n_keys == 0:
        return lambda start, stop: [(0, n_keys)]
    k0 = ctx.facts.k_first
    q_first = [int(p) for p in q_pos.tolist()]
    return lambda start, stop: key_indices(mask, q_first[start], q_first[stop - 1], k0, n_keys)


def _tile_mask(ctx: AttentionContext) -> Callable[[int, int, int, int], Tensor | None]:
    """A tile's visible pairs (c, n), or None where the mask shows the whole tile (asked first by distance)."""
    mask, q_pos, k_pos = ctx.mask, ctx.q_pos, ctx.k_pos
    facts = ctx.facts
    runs = facts.q_contiguous and facts.k_contiguous and facts.n_q > 0 and facts.n_k > 0
    q0, k0 = (facts.q_first, facts.k_first) if runs else (0, 0)
    empty = torch.zeros(0, 0, dtype=torch.bool)

    def tile(start: int, stop: int, lo: int, hi: int) -> Tensor | None:
        if runs:
            span = torch.arange((q0 + start) - (k0 + hi - 1), (q0 + stop - 1) - (k0 + lo) + 1)
            seen = mask.allowed_distance(span)
            if seen is not None and bool(seen.all()):
                return None
            if seen is not None and not bool(seen.any()):
                return empty
        allowed = mask.allowed(q_pos[start:stop], k_pos[lo:hi])
        return None if bool(allowed.all()) else allowed

    return tile


class ForgetFlex(AttentionBackend):
    """FlexAttention whose score_mod adds (c_q[b, h, i] - c_k[b, h, j]) / tau; compiled on CUDA, eager on CPU
    (forward only there, as every flex call)."""

    name = "flex"

    def applies(self, ctx: AttentionContext) -> str | None:
        forget = ctx.forget
        training = forget is not None and (forget.queries.requires_grad or forget.keys.requires_grad)
        if ctx.device.type == "cpu" and torch.is_grad_enabled() and training:
            return "backend='flex' cannot train on CPU (no FlexAttention backward there); use 'chunked'"
        return None

    def declines(self, ctx: AttentionContext) -> str | None:
        return "a single query: the chunked path needs no compiled kernel" if ctx.q_pos.numel() == 1 else None

    def run(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        assert ctx.forget is not None
        Lq, Lk = q.shape[-2], k.shape[-2]
        pad_q, pad_k = padded_lengths(Lq, Lk)
        qr, kr = rotate(ctx.scheme, q, k, ctx.q_pos, ctx.k_pos, ctx.seq_len)
        qs = scaled_query(qr, ctx.tau)
        (hq, lq), (hk, lk) = (
            split_fp32(F.pad(c, (0, n - c.shape[-1])))
            for c, n in ((ctx.forget.queries, pad_q), (ctx.forget.keys, pad_k))
        )
        rows = _inverse_tau(ctx, ctx.forget)
        inverse = None if rows is None else F.pad(rows, (0, pad_q - Lq), value=1.0)

        def score_mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            diff = (hq[b, h, q_idx] - hk[b, h, kv_idx]) + (lq[b, h, q_idx] - lk[b, h, kv_idx])
            return score + (diff if inverse is None else diff * inverse[0, h, q_idx])

        block_mask = flex_block_mask(ctx.mask, ctx.q_pos, ctx.k_pos, q.device, ctx.facts)
        qp, kp, vp = (F.pad(t, (0, 0, 0, n - t.shape[-2])) for t, n in ((qs, pad_q), (kr, pad_k), (v, pad_k)))
        eager = q.device.type == "cpu"  # inductor's CPU flex path is not used here
        out = flex_call(qp, kp, vp, eager, score_mod=score_mod, block_mask=block_mask, scale=ctx.scale)
        assert isinstance(out, Tensor)
        return out[..., :Lq, :]


#: the forget-bias path of each backend name; `auto` asks these in order per device type
FORGET_BACKENDS: dict[str, AttentionBackend] = {
    b.name: b for b in (ReferenceBackend(), ForgetSdpa(), ForgetChunked(), ForgetFlex())
}
FORGET_AUTO = {"cpu": ("sdpa", "chunked"), "cuda": ("sdpa", "flex", "chunked")}


def forget_backend(ctx: AttentionContext) -> AttentionBackend:
    """The backend computing a call with a forget bias: the named one's forget path, or `auto`'s choice."""
    reason = forget_reason(ctx)
    if reason is not None:
        raise ConfigError(reason)
    if ctx.backend != "auto":
        backend = FORGET_BACKENDS.get(ctx.backend)
        if backend is None:
            raise ConfigError(
                f"fox: backend {ctx.backend!r} has no forget-bias path; use one of {', '.join(FORGET_BACKENDS)}"
            )
        why = backend.applies(ctx)
        if why is not None:
            raise ConfigError(why)
        return backend
    for name in FORGET_AUTO.get(ctx.device.type, FORGET_AUTO["cpu"]):
        backend = FORGET_BACKENDS[name]
        if backend.applies(ctx) is None and backend.declines(ctx) is None:
            return backend
    return FORGET_BACKENDS["chunked"]
