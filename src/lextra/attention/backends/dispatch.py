"""The shared dispatch: the registry of backends by name, `auto`'s order per device type, and the one entry
`run_attention(q, k, v, ctx)` every call goes through. Grouped-query keys and values are folded onto the query
heads for decoding steps (`folded_attention`), else expanded. Extension passes run on `reference`, `flex` or
`tiled` (`passes_path`); other wrappers name their backend; "auto" takes the first that applies (`choose_backend`)."""

from __future__ import annotations

from typing import Unpack

import torch
from torch import Tensor

from lextra.attention.backends.common import toeplitz_possible
from lextra.attention.backends.forget import forget_backend
from lextra.attention.backends.tiled import bands_apply, tiles_apply
from lextra.attention.content import content_backend
from lextra.attention.context import AttentionBackend, AttentionContext, AttentionOptions
from lextra.attention.masks import Mask
from lextra.errors import ConfigError
from lextra.positions.base import PositionScheme

#: at most this many queries of a grouped-query call are folded onto their key/value heads (`folds`)
FOLD_MAX_QUERIES = 64
#: the backends by name (`attention(..., backend=NAME)`), and the order `auto` asks them in per device type
REGISTERED: dict[str, AttentionBackend] = {}
AUTO_ORDER: dict[str, list[str]] = {"cpu": [], "cuda": []}


def register_backend(backend: AttentionBackend, *, auto: dict[str, int | None] | None = None) -> AttentionBackend:
    """Add `backend` under its name; `auto` maps device types to the place `auto` asks it at (0 = first,
    None = last). Registering a name again replaces that backend."""
    if not backend.name or backend.name == "auto":
        raise ConfigError(f"an attention backend needs a name other than 'auto', got {backend.name!r}")
    REGISTERED[backend.name] = backend
    for order in AUTO_ORDER.values():
        if backend.name in order:
            order.remove(backend.name)
    for device_type, place in (auto or {}).items():
        order = AUTO_ORDER.setdefault(device_type, [])
        order.insert(len(order) if place is None else place, backend.name)
    return backend


def unregister_backend(name: str) -> None:
    """Remove a registered backend (and its places in `auto`'s orders)."""
    REGISTERED.pop(name, None)
    for order in AUTO_ORDER.values():
        if name in order:
            order.remove(name)


def backend_names() -> tuple[str, ...]:
    """`auto` and every registered backend's name."""
    return ("auto", *REGISTERED)


def get_backend(name: str) -> AttentionBackend:
    """The registered backend called `name` (ConfigError listing the known ones otherwise)."""
    backend = REGISTERED.get(name)
    if backend is None:
        raise ConfigError(f"unknown attention backend {name!r}; choose one of {', '.join(backend_names())}")
    return backend


def applies(backend: AttentionBackend, ctx: AttentionContext) -> str | None:
    """Why `backend` cannot compute `ctx` exactly (None: it can), materialised tensors checked first."""
    if ctx.materialised and not backend.takes_bias_and_padding:
        return (
            f"the {backend.name} backend does not apply a materialised score bias or padding mask; "
            "use backend='reference', 'sdpa', 'chunked' or 'flex' (or 'auto')"
        )
    return backend.applies(ctx)


def choose_backend(ctx: AttentionContext) -> AttentionBackend:
    """What `auto` runs: the first backend of the device type's order that applies and does not decline."""
    if ctx.scheme is not None and ctx.scheme.content_dependent:
        return content_backend(ctx)
    tiled = REGISTERED.get("tiled")
    if tiled is not None and bands_apply(ctx.mask, ctx.device, ctx.dtype) and applies(tiled, ctx) is None:
        return tiled
    order = AUTO_ORDER.get(ctx.device.type) or AUTO_ORDER["cpu"]
    reasons = []
    for name in order:
        backend = REGISTERED[name]
        reason = applies(backend, ctx) or backend.declines(ctx)
        if reason is None:
            return backend
        reasons.append(f"{name}: {reason}")
    raise ConfigError(f"no attention backend applies on {ctx.device.type} ({'; '.join(reasons)}); use 'reference'")


def resolve_backend(ctx: AttentionContext) -> AttentionBackend:
    """The backend that computes `ctx`: its wrapper's choice, `auto`'s, or the named one if it applies."""
    if ctx.forget is not None:  # FoX's forget bias: each backend's forget path
        return forget_backend(ctx)
    if ctx.backend != "auto":
        get_backend(ctx.backend)  # an unknown name is refused before any wrapper routes it
    if ctx.scheme is not None and ctx.scheme.content_dependent:  # CoPE: only its own backends compute it
        chosen = content_backend(ctx)
    elif ctx.passes is not None:
        chosen = passes_backend(ctx)
    elif ctx.extension is not None and (wrapped := ctx.extension.backend_for(ctx)) is not None:
        chosen = wrapped
    elif ctx.backend == "auto":
        return choose_backend(ctx)
    else:
        chosen = get_backend(ctx.backend)
    reason = applies(chosen, ctx)
    if reason is not None:
        raise ConfigError(reason)
    return chosen


def passes_path(ctx: AttentionContext) -> str:
    """The backend an extension's passes run on: the named one for 'reference' and 'flex', 'tiled' for any other
    name; for 'auto' "flex" on CUDA where flex applies, else "tiled"."""
    if ctx.backend == "auto":
        return "flex" if ctx.device.type == "cuda" and get_backend("flex").applies(ctx) is None else "tiled"
    return ctx.backend if ctx.backend in ("reference", "flex") else "tiled"


def passes_backend(ctx: AttentionContext) -> AttentionBackend:
    """The backend running the context's extension passes (`passes_path`), once the call is checked."""
    method = ctx.passes
    assert method is not None
    name = method.name
    if not ctx.mask.exactly_causal:
        raise ConfigError(
            f"extension {name!r} sets its own visibility over causal attention; use mask='causal', not {ctx.mask!r}"
        )
    if ctx.materialised:
        raise ConfigError(f"extension {name!r} runs on unpadded causal inputs, without a score bias or padding mask")
    method.check(ctx.scheme, ctx.seq_len or 1)
    return get_backend(passes_path(ctx))


def run_attention(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
    """Attention for a built context; grouped-query keys and values folded (`folds`) or expanded."""
    groups = kv_groups(q, k, v)
    if groups > 1 and folds(ctx):
        return folded_attention(q, k, v, ctx, groups)
    if groups > 1:
        k, v = expand_kv(k, groups), expand_kv(v, groups)
    return resolve_backend(ctx).run(q, k, v, ctx)


def kv_groups(q: Tensor, k: Tensor, v: Tensor) -> int:
    """How many query heads each key/value head serves (H / Hkv), checked."""
    heads, kv_heads = q.shape[1], k.shape[1]
    if v.shape[1] != kv_heads or kv_heads == 0 or heads % kv_heads:
        raise ConfigError(
            f"keys and values need one number of heads dividing the queries' {heads}, got {kv_heads} and {v.shape[1]}"
        )
    return heads // kv_heads


def expand_kv(x: Tensor, groups: int) -> Tensor:
    """Grouped-query keys or values (B, Hkv, L, D) as (B, Hkv x groups, L, D), head j repeated in place."""
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def folds(ctx: AttentionContext) -> bool:
    """Whether a grouped-query call runs folded (`folded_attention`): at most `FOLD_MAX_QUERIES` queries that all
    see every key, a scheme that rotates each query and key alone, a wrapper that treats heads alike, no forget bias,
    score bias or padding."""
    scheme, extension = ctx.scheme, ctx.extension
    if scheme is not None and not scheme.rotates_keys_alone:
        return False
    if (extension is not None and not extension.heads_alike) or ctx.forget is not None or ctx.materialised:
        return False
    return ctx.facts.n_q <= FOLD_MAX_QUERIES and ctx.mask.shows_every_key(ctx.facts)


def folded_attention(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext, groups: int) -> Tensor:
    """q (B, H, Lq, D) over k, v (B, H / groups, Lk, D) with each key/value head's query heads folded into its
    rows (`AttentionContext.fold_heads`): one call without expanding k and v."""
    B, H, Lq, D = q.shape
    folded = ctx.fold_heads(H, groups)
    out = resolve_backend(folded).run(q.reshape(B, H // groups, groups * Lq, D), k, v, folded)
    return out.reshape(B, H, Lq, out.shape[-1])


def attention(q: Tensor, k: Tensor, v: Tensor, **options: Unpack[AttentionOptions]) -> Tensor:
    """Position-aware attention of q (B, H, Lq, D), k (B, Hkv, Lk, Dk), v (B, Hkv, Lk, Dv), Hkv dividing H:

        out = softmax((rotate(q) . rotate(k) * scale + bias) / tau, masked) v

    `options`: see `AttentionOptions` (mask causal, positions: keys at 0..Lk-1, queries the last Lq of them)."""
    return run_attention(q, k, v, AttentionContext.build(q, k, **options))


def auto_backend(
    scheme: PositionScheme | None,
    mask: Mask,
    q_pos: Tensor,
    k_pos: Tensor,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> str:
    """What `backend="auto"` runs for these positions under the current grad mode (`choose_backend`)."""
    ctx = AttentionContext(scheme, mask, q_pos, k_pos, 1.0, device=torch.device(device), dtype=dtype)
    return choose_backend(ctx).name


def attention_path(
    scheme: PositionScheme | None,
    mask: Mask,
    q_pos: Tensor,
    k_pos: Tensor,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> str:
    """How `backend="auto"` computes attention here (for benchmarks and logs): `sdpa`, `flex`, `tiled`,
    `chunked/strided` (bias a strided table view), `chunked/gathered` (bias built per block) or `chunked` (no bias)."""
    choice = auto_backend(scheme, mask, q_pos, k_pos, device, dtype)
    if choice in ("sdpa", "flex"):
        return choice
    if tiles_apply(scheme, mask, q_pos, k_pos, device, dtype):
        return "tiled"
    if scheme is None or not scheme.has_bias:
        return "chunked"
    return "chunked/strided" if toeplitz_possible(scheme, mask, q_pos) else "chunked/gathered"
