"""The functional attention call and its backends: `reference`, `sdpa`, `chunked`, `flex`, and `auto`.

`attention(q, k, v, scheme=..., mask=..., q_pos=..., k_pos=...)` applies a position scheme's q/k transform
and score bias, a mask and an optional temperature, then softmax-attends:

    out = softmax((rotate(q) . rotate(k) * scale + bias) / tau, masked) v

- `reference`: dense (H, Lq, Lk) scores with every modifier applied as a tensor: slow, obvious, ground truth.
- `sdpa`: one fused `scaled_dot_product_attention` call (is_causal / no mask); only for schemes without a bias,
  a mask that is exactly causal or hides nothing, and queries aligned with keys, or one query at or after every
  key under a causal mask (a cached decoding step: no mask at all).
- `chunked`: queries in blocks; each block sees only the keys its mask declares (`Mask.key_spans`: a window's
  block touches width + block keys) and its bias is built for that block alone from the scheme's per-distance
  table, then one SDPA call per block. Memory O(H x block x keys) per step, never H x L x L; forward and
  backward on any device. Without autograd the blocks write into one preallocated output (no list of block
  outputs and no `cat`).
- `tiled` (inside `chunked`, no autograd, CPU, an exactly causal mask, no per-distance bias): query blocks x key
  chunks, each tile one flash call that also returns its log-sum-exp, merged exactly as flash attention merges
  its tiles. Rotary schemes rotate one tile's queries and keys at a time, so no rotated copy of q or k is ever
  held in full.
- `flex`: one compiled FlexAttention call (`lextra.attention.flex`): biases as score modifiers read from the
  per-distance tables, masks as a mask_mod and a cached BlockMask, lengths padded to a few buckets; forward on
  CPU, forward and backward on CUDA.
- `auto`: on CPU, `sdpa` when it applies, else `chunked`. Rotary schemes at long lengths without autograd take
  `chunked` (tiled): the fused call would need rotated copies of all of q and k on top of SDPA's own working
  memory. On CUDA (`cuda_backend`), `sdpa` (flash) when it applies, else `flex`, else `chunked`. A single query
  that `sdpa` cannot take (a decoding step with a bias, a window or BCA) goes to `chunked`, not `flex`: flex would
  compile a kernel for every key-length bucket the cache grows through (20 up to 128k per mask and score
  modifier, out of `RECOMPILE_LIMIT`) and build a BlockMask per step (its blocks move with the step), where the
  chunked path runs one small SDPA call over the keys the mask declares, exactly, with nothing compiled. Calls
  under an extension method run its passes (`lextra.extend.attention`: on CUDA one FlexAttention call per pass).

Each backend is an `AttentionBackend` (`applies(ctx)`: None or why not; `run(q, k, v, ctx)`) registered by name
(`register_backend`); `auto` asks the backends of the device type's order (`AUTO_ORDER`) in turn and runs the
first that applies and does not decline. `attention(...)` builds the call's frozen `AttentionContext` (scheme,
mask, positions, scale, temperature with any log-n scaling folded in, block size, extension, device) once; a
call under a training-free extension method (`AttentionExtension`) runs its passes instead.

The backends ask a mask only what it declares (`lextra.attention.masks.Mask`), never which mask it is, and a
scheme only its interface (`lextra.positions.base.PositionScheme`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, cast

import torch
import torch.nn.functional as F
from torch import Tensor

from lextra.attention.flex import flex_attention_forward, flex_unsupported, with_sinks
from lextra.attention.layout import PositionLayout
from lextra.attention.masks import UNBOUNDED, CausalMask, Mask, build_mask
from lextra.errors import ConfigError
from lextra.positions.base import PositionScheme

#: the built-in backends' names (`backend_names()` adds any registered later)
BACKENDS = ("auto", "reference", "sdpa", "chunked", "flex")
#: elements of one block's bias tensor (x batch broadcast); 2^24 fp32 = 64 MiB
BIAS_BUDGET = 1 << 24
MAX_BLOCK = 1024
#: query block for biases passed as strided table views: small blocks skip most of the masked upper triangle,
#: which SDPA would otherwise compute and discard (benchmarks/README.md compares 256 with 1024)
LEAN_BLOCK = 256
#: cap for blocks whose bias is gathered (learned tables under autograd): SDPA then runs its math kernel, which
#: computes the whole (block x keys) rectangle, so smaller blocks skip more of the masked triangle
TRAIN_BIAS_BLOCK: int | None = 256
MIN_BLOCK = 16
#: query block = key chunk of the tiled path: the size that balances the flash kernel's per-call efficiency
#: against per-tile memory (see benchmarks/README.md)
TILE = 1024
#: FIRE's tiles (bias per query and key): query block x key chunk, a (H, 256, 2048) fp32 bias is 16 MiB
BIAS_TILE = 256
BIAS_KEY_CHUNK = 2048
#: the tiled path replaces the fused call for rotary schemes from this many (query, key) pairs on (4k x 4k)
TILED_MIN_PAIRS = 4096 * 4096
#: a query position far from the sequence start, where a mask's keys per query block are their steady number
_FAR = 1 << 40
#: torch's CPU flash kernel, which also returns each row's log-sum-exp (what merging tiles exactly needs)
_FLASH_WITH_LSE = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def default_positions(q: Tensor, k: Tensor, q_pos: Tensor | None, k_pos: Tensor | None) -> tuple[Tensor, Tensor]:
    """The positions `attention` uses: keys at 0..Lk-1 and queries the last Lq of them unless given; positions
    that do not match the lengths are a ConfigError."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    if k_pos is None:
        k_pos = torch.arange(Lk, device=q.device)
    if q_pos is None:
        q_pos = k_pos[Lk - Lq :] if Lq <= Lk else torch.arange(Lq, device=q.device)
    if q_pos.numel() != Lq or k_pos.numel() != Lk:
        raise ConfigError(
            f"positions do not match lengths: q_pos {q_pos.numel()} vs Lq {Lq}, k_pos {k_pos.numel()} vs Lk {Lk}"
        )
    return q_pos, k_pos


@dataclass(frozen=True)
class AttentionContext:
    """Everything one attention call applies besides q, k and v, checked and normalised once.

    `tau` is the temperature as a (H, Lq) -broadcastable fp32 tensor (a layer's log-n scaling folded in by the
    layer), or None for 1; `extension` a training-free extension method the call attends through instead of the
    backends. `device`, `dtype` and `head_dim` describe q, so a backend decides from the context alone.
    """

    scheme: PositionScheme | None
    mask: Mask
    q_pos: Tensor
    k_pos: Tensor
    scale: float
    tau: Tensor | None = None
    block_size: int | None = None
    extension: AttentionExtension | None = None
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    dtype: torch.dtype = torch.float32
    head_dim: int | None = None
    layout: PositionLayout | None = None
    #: learned sink logits (H,): one more term exp(sink_h) in each softmax's denominator (gpt-oss), or None
    sinks: Tensor | None = None
    #: logit softcapping: scores become tanh(s / softcap) softcap before the mask (Gemma 2), or None
    softcap: float | None = None

    @property
    def core(self) -> tuple[PositionScheme | None, Mask, Tensor, Tensor, float, Tensor | None]:
        """(scheme, mask, q_pos, k_pos, scale, tau): the leading arguments of every backend's function."""
        return self.scheme, self.mask, self.q_pos, self.k_pos, self.scale, self.tau

    @property
    def pieces(self) -> dict[str, Tensor | float | None]:
        """The layer-plan pieces a backend applies itself: `sinks` and `softcap`, as keyword arguments."""
        return {"sinks": self.sinks, "softcap": self.softcap}

    def __post_init__(self) -> None:
        if self.layout is None:  # one device read here, so that no backend decision reads positions again
            object.__setattr__(self, "layout", PositionLayout.of(self.q_pos, self.k_pos))

    @property
    def facts(self) -> PositionLayout:
        """The positions' host-side facts (`layout`, always set after construction)."""
        assert self.layout is not None  # set by __post_init__
        return self.layout

    @classmethod
    def build(
        cls,
        q: Tensor,
        k: Tensor,
        *,
        scheme: PositionScheme | None = None,
        mask: Mask | str | None = "causal",
        q_pos: Tensor | None = None,
        k_pos: Tensor | None = None,
        temperature: Tensor | float | None = None,
        scale: float | None = None,
        block_size: int | None = None,
        extension: AttentionExtension | None = None,
        layout: PositionLayout | None = None,
        sinks: Tensor | None = None,
        softcap: float | None = None,
    ) -> AttentionContext:
        """The context of `attention(q, k, v, ...)`: default positions (keys at 0..Lk-1, queries the last Lq of
        them), scale 1/sqrt(D), the temperature normalised; mismatched lengths and bad temperatures refused.
        `layout`: the positions' host-side facts where the caller knows them (e.g. `PositionLayout.ranges`);
        default positions need none, other positions are read once (`PositionLayout.of`)."""
        mask = build_mask(mask)
        Lq, Lk = q.shape[-2], k.shape[-2]
        if layout is None and q_pos is None and k_pos is None:
            layout = PositionLayout.ranges(Lk - Lq if Lq <= Lk else 0, Lq, 0, Lk)
        q_pos, k_pos = default_positions(q, k, q_pos, k_pos)
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        tau = _temperature(temperature, q)
        if sinks is not None and tuple(sinks.shape) != (q.shape[1],):
            raise ConfigError(f"sinks must hold one logit per head ({q.shape[1]},), got shape {tuple(sinks.shape)}")
        if softcap is not None and not (math.isfinite(softcap) and softcap > 0):
            raise ConfigError(f"softcap must be a positive number, got {softcap!r}")
        return cls(
            scheme,
            mask,
            q_pos,
            k_pos,
            scale,
            tau,
            block_size,
            extension,
            q.device,
            q.dtype,
            q.shape[-1],
            layout,
            sinks,
            softcap,
        )


class AttentionBackend(ABC):
    """One way to compute attention: `applies(ctx)` says why it cannot compute a call exactly (None: it can),
    `run(q, k, v, ctx)` computes it. `declines(ctx)` is why `auto` passes it over although it applies (a cheaper
    path exists); an explicitly chosen backend runs whenever it applies."""

    name: ClassVar[str] = "backend"

    @abstractmethod
    def applies(self, ctx: AttentionContext) -> str | None:
        """None when this backend computes the call exactly, else a one-line reason naming the fix."""

    @abstractmethod
    def run(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        """softmax((rotate(q) . rotate(k) * scale + bias) / tau, masked) v for this context."""

    def declines(self, ctx: AttentionContext) -> str | None:
        """Why `auto` skips this backend although it applies (default: never)."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class AttentionExtension(ABC):
    """What a layer attends through instead of the backends: a training-free extension method's passes
    (`lextra.extend.ExtendedAttention`). `retains` says which cached keys later queries still see."""

    #: the method's name, for errors
    name: str = "extension"

    @abstractmethod
    def run(
        self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext, *, reference: bool = False, backend: str = "auto"
    ) -> Tensor:
        """Attention under the extension (`reference`, or backend 'reference': its dense ground truth instead of
        the fast path; `backend` the name the call asked for, which the extension may route by)."""

    def retains(self, k_pos: Tensor, next_query: int) -> Tensor | None:
        """Which cached keys a query at `next_query` or later can still see (None: all of them)."""
        return None


class ReferenceBackend(AttentionBackend):
    """Dense scores with every modifier applied as a tensor: slow, obvious, ground truth."""

    name = "reference"

    def applies(self, ctx: AttentionContext) -> str | None:
        return None

    def run(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        return cast(Tensor, reference_attention(q, k, v, *ctx.core, **ctx.pieces))  # type: ignore[arg-type]


class SdpaBackend(AttentionBackend):
    """One fused `scaled_dot_product_attention` call."""

    name = "sdpa"

    def applies(self, ctx: AttentionContext) -> str | None:
        if ctx.softcap is not None:
            return f"the sdpa backend runs one fused call and cannot cap its scores (softcap); {_SDPA_FIX}"
        if ctx.sinks is not None and not _lse_kernel_applies(ctx.device, ctx.dtype):
            return (
                "the sdpa backend applies sinks through the CPU flash kernel's log-sum-exp, without autograd, in "
                f"fp32 or bf16; {_SDPA_FIX}"
            )
        return _sdpa_reason(ctx.scheme, ctx.mask, ctx.q_pos, ctx.k_pos, ctx.facts)

    def declines(self, ctx: AttentionContext) -> str | None:
        scheme = ctx.scheme
        if (
            scheme is not None
            and scheme.transforms_qk
            and ctx.q_pos.numel() * ctx.k_pos.numel() >= TILED_MIN_PAIRS
            and _tiles_apply(scheme, ctx.mask, ctx.q_pos, ctx.k_pos, ctx.device, ctx.dtype)
        ):
            return "a rotary scheme at long lengths: the tiled path holds no rotated copies of all of q and k"
        return None

    def run(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        return _sdpa_attention(
            q, k, v, ctx.scheme, ctx.mask, ctx.q_pos, ctx.k_pos, ctx.scale, ctx.tau, ctx.facts, ctx.sinks
        )


class ChunkedBackend(AttentionBackend):
    """Query blocks, each attending only the keys its mask allows (the tiled path inside); any call."""

    name = "chunked"

    def applies(self, ctx: AttentionContext) -> str | None:
        return None

    def run(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        return chunked_attention(q, k, v, *ctx.core, ctx.block_size, **ctx.pieces)  # type: ignore[arg-type]


#: FlexAttention's kernels on CUDA need a head dimension of at least this
FLEX_MIN_HEAD_DIM = 16


class FlexBackend(AttentionBackend):
    """One compiled FlexAttention call (`lextra.attention.flex`)."""

    name = "flex"

    def applies(self, ctx: AttentionContext) -> str | None:
        reason = flex_unsupported(ctx.scheme, ctx.q_pos, ctx.k_pos, ctx.facts)
        if reason is not None:
            return reason
        if ctx.device.type == "cuda" and ctx.head_dim is not None and ctx.head_dim < FLEX_MIN_HEAD_DIM:
            return (
                f"backend='flex' on CUDA needs a head dimension of at least {FLEX_MIN_HEAD_DIM}, not "
                f"{ctx.head_dim}; use backend='chunked' (or 'auto')"
            )
        return None

    def declines(self, ctx: AttentionContext) -> str | None:
        if ctx.q_pos.numel() == 1:
            return (
                "a single query (a decoding step): the chunked path computes it exactly over the keys its mask "
                "declares, with no compiled kernel per key-length bucket and no BlockMask to build per step"
            )
        return None

    def run(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        return flex_attention_forward(q, k, v, *ctx.core, layout=ctx.facts, **ctx.pieces)  # type: ignore[arg-type]


#: the backends by name (`attention(..., backend=NAME)`), and the order `auto` asks them in per device type
REGISTERED: dict[str, AttentionBackend] = {}
AUTO_ORDER: dict[str, list[str]] = {"cpu": [], "cuda": []}


def register_backend(backend: AttentionBackend, *, auto: dict[str, int | None] | None = None) -> AttentionBackend:
    """Add `backend` under its name; `auto` maps device types to the place `auto` asks it at (0 = first, None
    = last; a device type not named does not consult it). Registering a name again replaces that backend."""
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


register_backend(ReferenceBackend())
register_backend(SdpaBackend(), auto={"cpu": None, "cuda": None})
register_backend(ChunkedBackend(), auto={"cpu": None, "cuda": None})
register_backend(FlexBackend(), auto={"cuda": 1})  # on CUDA between sdpa and chunked


def backend_names() -> tuple[str, ...]:
    """`auto` and every registered backend's name."""
    return ("auto", *REGISTERED)


def get_backend(name: str) -> AttentionBackend:
    """The registered backend called `name` (ConfigError listing the known ones otherwise)."""
    backend = REGISTERED.get(name)
    if backend is None:
        raise ConfigError(f"unknown attention backend {name!r}; choose one of {', '.join(backend_names())}")
    return backend


def choose_backend(ctx: AttentionContext) -> AttentionBackend:
    """What `auto` runs: the first backend of the device type's order that applies and does not decline."""
    order = AUTO_ORDER.get(ctx.device.type) or AUTO_ORDER["cpu"]
    reasons = []
    for name in order:
        backend = REGISTERED[name]
        reason = backend.applies(ctx) or backend.declines(ctx)
        if reason is None:
            return backend
        reasons.append(f"{name}: {reason}")
    raise ConfigError(f"no attention backend applies on {ctx.device.type} ({'; '.join(reasons)}); use 'reference'")


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    scheme: PositionScheme | None = None,
    mask: Mask | str | None = "causal",
    q_pos: Tensor | None = None,
    k_pos: Tensor | None = None,
    backend: str = "auto",
    temperature: Tensor | float | None = None,
    scale: float | None = None,
    block_size: int | None = None,
    extension: AttentionExtension | None = None,
    layout: PositionLayout | None = None,
    sinks: Tensor | None = None,
    softcap: float | None = None,
) -> Tensor:
    """Position-aware attention of q (B, H, Lq, D), k (B, H, Lk, Dk), v (B, H, Lk, Dv).

    Positions are 1-D integer tensors (default: keys at 0..Lk-1, queries the last Lq of them). `temperature`
    divides the logits (scalar, per head (H,), or per head and query (H, Lq)). `scale` defaults to
    1/sqrt(D) of the query's head dimension. Under an `extension` the call runs its passes (its dense
    reference for backend='reference'). `sinks` (H,) adds a learned logit per head to each softmax's
    denominator (gpt-oss); `softcap` caps the scores as tanh(s / c) c before the mask (Gemma 2). Builds an
    `AttentionContext` and runs it (`run_attention`).
    """
    ctx = AttentionContext.build(
        q,
        k,
        scheme=scheme,
        mask=mask,
        q_pos=q_pos,
        k_pos=k_pos,
        temperature=temperature,
        scale=scale,
        block_size=block_size,
        extension=extension,
        layout=layout,
        sinks=sinks,
        softcap=softcap,
    )
    return run_attention(q, k, v, ctx, backend)


def run_attention(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext, backend: str = "auto") -> Tensor:
    """Attention for a built context: through its extension, the named backend (ConfigError with its reason
    when that backend does not apply), or `auto`'s choice."""
    chosen = None if backend == "auto" else get_backend(backend)
    if ctx.extension is not None:
        return ctx.extension.run(q, k, v, ctx, reference=backend == "reference", backend=backend)
    if chosen is None:
        chosen = choose_backend(ctx)
    else:
        reason = chosen.applies(ctx)
        if reason is not None:
            raise ConfigError(reason)
    return chosen.run(q, k, v, ctx)


def _temperature(temperature: Tensor | float | None, q: Tensor) -> Tensor | None:
    """Temperature as a (H, Lq) -broadcastable fp32 tensor, or None for 1."""
    if temperature is None:
        return None
    tau = torch.as_tensor(temperature, dtype=torch.float32, device=q.device)
    if tau.dim() == 1:
        tau = tau[:, None]
    if tau.dim() > 2:
        raise ConfigError(f"temperature must be a scalar, (H,) or (H, Lq); got shape {tuple(tau.shape)}")
    if bool((tau <= 0).any()):
        raise ConfigError("temperature must be positive")
    return tau


def _contiguous(pos: Tensor) -> bool:
    n = pos.numel()
    return n == 0 or (int(pos[-1]) - int(pos[0]) == n - 1 and bool((pos.diff() == 1).all()))


#: why `sdpa` does not apply, with its fix
_SDPA_FIX = "use backend='chunked' or 'auto'"


def _sdpa_reason(
    scheme: PositionScheme | None, mask: Mask, q_pos: Tensor, k_pos: Tensor, layout: PositionLayout | None = None
) -> str | None:
    """Why one fused SDPA call cannot compute this exactly (None: it can); decided from `layout` (read from the
    positions when not given)."""
    facts = layout if layout is not None else PositionLayout.of(q_pos, k_pos)
    if scheme is not None and scheme.has_bias:
        return f"the sdpa backend runs one fused call: it cannot apply score biases ({scheme.name}'s); {_SDPA_FIX}"
    if not (mask.exactly_causal or mask.hides_nothing):
        return f"the sdpa backend runs one fused call and cannot apply the mask {mask!r}; {_SDPA_FIX}"
    if facts.n_q == 0 or facts.n_k == 0:
        return f"the sdpa backend needs at least one query and one key; {_SDPA_FIX}"
    if scheme is not None and scheme.rotate_span is not None and facts.span > scheme.rotate_span:
        return (
            f"the sdpa backend rotates all queries and keys in one call and {scheme.name} is exact within "
            f"{scheme.rotate_span} positions, not {facts.span}; {_SDPA_FIX}"
        )
    if mask.hides_nothing or _decoding_step(mask, facts):
        return None
    if facts.same and facts.q_contiguous:
        return None
    return (
        "the sdpa backend's causal call needs queries at the keys' own contiguous positions, or one query after "
        f"every key; {_SDPA_FIX}"
    )


def _decoding_step(mask: Mask, facts: PositionLayout) -> bool:
    """One query under a causal mask at or after every key (a cached decoding step): it sees all the keys, so
    one SDPA call without a mask is exact (whatever the keys' positions, e.g. an evicted cache)."""
    return mask.exactly_causal and facts.n_q == 1 and facts.n_k > 0 and facts.k_max <= facts.q_first


def _sdpa_applies(
    scheme: PositionScheme | None, mask: Mask, q_pos: Tensor, k_pos: Tensor, layout: PositionLayout | None = None
) -> bool:
    return _sdpa_reason(scheme, mask, q_pos, k_pos, layout) is None


def auto_backend(
    scheme: PositionScheme | None,
    mask: Mask,
    q_pos: Tensor,
    k_pos: Tensor,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> str:
    """What `backend="auto"` runs for these positions under the current grad mode (`choose_backend`): "sdpa" or
    "chunked" on CPU, `cuda_backend`'s choice on CUDA."""
    ctx = AttentionContext(scheme, mask, q_pos, k_pos, 1.0, device=torch.device(device), dtype=dtype)
    return choose_backend(ctx).name


def cuda_backend(scheme: PositionScheme | None, mask: Mask, q_pos: Tensor, k_pos: Tensor) -> str:
    """`auto` on CUDA: the fused flash kernel where one SDPA call is exact (no bias, causal or full, aligned
    positions, or a causal decoding step), else `flex` (biases, windows, BCA, offset queries), else `chunked`
    (what flex refuses: xPos past its span; single-query steps flex declines). Decides from declarations and
    position values (no CUDA tensor is needed)."""
    return auto_backend(scheme, mask, q_pos, k_pos, "cuda")


def attention_path(
    scheme: PositionScheme | None,
    mask: Mask,
    q_pos: Tensor,
    k_pos: Tensor,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> str:
    """How `backend="auto"` computes attention here, under the current grad mode (for benchmarks and logs):
    `sdpa` (one fused call), `flex` (one FlexAttention call, CUDA), `tiled` (query x key tiles merged by
    log-sum-exp), `chunked/strided` (query blocks, bias a strided view of a per-distance table),
    `chunked/gathered` (bias built per block), `chunked` (no bias)."""
    choice = auto_backend(scheme, mask, q_pos, k_pos, device, dtype)
    if choice in ("sdpa", "flex"):
        return choice
    if _tiles_apply(scheme, mask, q_pos, k_pos, device, dtype):
        return "tiled"
    if scheme is None or not scheme.has_bias:
        return "chunked"
    return "chunked/strided" if _toeplitz_possible(scheme, mask, q_pos) else "chunked/gathered"


def _rotate(scheme: PositionScheme | None, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, seq_len=None):
    if scheme is None or not scheme.transforms_qk:
        return q, k
    return scheme.rotate(q, k, q_pos, k_pos, seq_len)


def _scaled_query(q: Tensor, tau: Tensor | None) -> Tensor:
    """Dividing the logits by tau is dividing q by tau (per head, and per query when tau is (H, Lq))."""
    return q if tau is None else q / tau[..., None].to(q.dtype)


def attention_logits(
    q: Tensor,
    k: Tensor,
    scheme: PositionScheme | None,
    q_pos: Tensor,
    k_pos: Tensor,
    scale: float | None = None,
    tau: Tensor | None = None,
) -> Tensor:
    """Pre-softmax, pre-mask logits (B, H, Lq, Lk) in fp32: (rotate(q) . rotate(k) * scale + bias) / tau."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    qr, kr = _rotate(scheme, q, k, q_pos, k_pos)
    logits = (qr.float() @ kr.float().transpose(-1, -2)) * scale
    if scheme is not None and scheme.has_bias:
        logits = logits + scheme.bias(q_pos, k_pos)
    if tau is not None:
        logits = logits / tau[..., None]
    return logits


def reference_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scheme: PositionScheme | None,
    mask: Mask,
    q_pos: Tensor,
    k_pos: Tensor,
    scale: float,
    tau: Tensor | None = None,
    return_weights: bool = False,
    *,
    sinks: Tensor | None = None,
    softcap: float | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Dense scores with every modifier applied as a tensor, in fp32: the ground truth for tests.

    `softcap` caps the scores (tanh(s / c) c, Gemma 2's eager order: after scaling, before the mask); `sinks`
    (H,) are concatenated to the masked scores as one more column, whose probability is dropped after the
    softmax (gpt-oss's `eager_attention_forward`)."""
    logits = attention_logits(q, k, scheme, q_pos, k_pos, scale, tau)
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap
    logits = logits.masked_fill(~mask.allowed(q_pos, k_pos), float("-inf"))
    if sinks is None:
        weights = torch.softmax(logits, dim=-1)
    else:
        column = sinks.float().reshape(1, -1, 1, 1).expand(*logits.shape[:-1], 1)
        weights = torch.softmax(torch.cat((logits, column), dim=-1), dim=-1)[..., :-1]
    out = (weights @ v.float()).to(v.dtype)
    return (out, weights) if return_weights else out


def _sdpa_attention(
    q, k, v, scheme, mask, q_pos, k_pos, scale, tau, layout: PositionLayout | None = None, sinks=None
) -> Tensor:
    facts = layout if layout is not None else PositionLayout.of(q_pos, k_pos)
    qr, kr = _rotate(scheme, q, k, q_pos, k_pos, facts.seq_len)
    causal = mask.exactly_causal and not _decoding_step(mask, facts)  # is_causal is top-left aligned
    if sinks is None:
        return F.scaled_dot_product_attention(_scaled_query(qr, tau), kr, v, is_causal=causal, scale=scale)
    assert _FLASH_WITH_LSE is not None  # `_lse_kernel_applies` checked it
    out, lse = _FLASH_WITH_LSE(_scaled_query(qr, tau), kr, v, 0.0, causal, scale=scale)
    return with_sinks(out, lse, sinks)


def _lse_kernel_applies(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether torch's CPU flash kernel with log-sum-exp runs here: no autograd, CPU, fp32 or bf16."""
    return (
        _FLASH_WITH_LSE is not None
        and not torch.is_grad_enabled()
        and device.type == "cpu"
        and dtype in (torch.float32, torch.bfloat16)
    )


def _block_size(scheme: PositionScheme | None, n_keys: int, n_heads: int, requested: int | None) -> int:
    if requested is not None:
        return max(1, int(requested))
    if scheme is None or not scheme.has_bias:
        size = MAX_BLOCK
    else:
        # FIRE past its threshold evaluates its MLP as linear pieces per (query, key) pair: under autograd in fp64
        # (gathered slopes and intercepts, their product and the input: about 5 fp32 words per head); without,
        # the bias, an offset, the input and its piece index
        if not scheme.bias_per_query:
            per_pair = n_heads
        elif torch.is_grad_enabled():
            per_pair = 5 * n_heads + 3
        else:
            per_pair = 2 * n_heads + 3
        size = BIAS_BUDGET // max(1, n_keys * per_pair)
        if TRAIN_BIAS_BLOCK:
            size = min(size, TRAIN_BIAS_BLOCK)
    if scheme is not None and scheme.rotate_span is not None:
        size = min(size, scheme.rotate_span)
    return int(min(MAX_BLOCK, max(MIN_BLOCK, size)))


def chunked_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scheme: PositionScheme | None,
    mask: Mask,
    q_pos: Tensor,
    k_pos: Tensor,
    scale: float,
    tau: Tensor | None = None,
    block_size: int | None = None,
    *,
    sinks: Tensor | None = None,
    softcap: float | None = None,
) -> Tensor:
    """Query blocks, each attending only the keys its mask allows, with its bias built on the fly. Sinks and a
    softcap: the tiled path merges the sinks as one more tile (causal, no softcap), else `scored_attention`."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    if Lq == 0:
        return q.new_zeros(*q.shape[:-1], v.shape[-1])
    if softcap is None and _tiles_apply(scheme, mask, q_pos, k_pos, q.device, q.dtype):
        return tiled_causal_attention(q, k, v, scheme, q_pos, k_pos, scale, tau, block_size, sinks=sinks)
    if sinks is not None or softcap is not None:
        return scored_attention(q, k, v, scheme, mask, q_pos, k_pos, scale, tau, block_size, sinks, softcap)
    # rotate each block's queries and keys where that is needed (xPos's span) or cheap and lean (without autograd,
    # a window's or BCA's block sees ~width + block keys): no rotated copies of all of q and k
    bounded = _keys_per_block(mask, MAX_BLOCK) is not None
    rotate_per_block = (
        scheme is not None
        and scheme.transforms_qk
        and (scheme.rotate_span is not None or (bounded and not torch.is_grad_enabled()))
    )
    seq_len = max(int(q_pos.max()), int(k_pos.max())) + 1 if Lk else None  # one length for every block
    if not rotate_per_block:
        q, k = _rotate(scheme, q, k, q_pos, k_pos)
    keys_sorted = _contiguous(k_pos)
    queries_sorted = bool((q_pos.diff() >= 0).all()) if Lq > 1 else True
    has_bias = scheme is not None and scheme.has_bias
    window = _typical_keys(mask, Lk, block_size or MAX_BLOCK)
    lean = _toeplitz_possible(scheme, mask, q_pos)  # biases and masks as strided views of one table
    block = LEAN_BLOCK if lean and block_size is None else _block_size(scheme, window, q.shape[1], block_size)
    # without autograd each block writes into one output tensor; under autograd a list and one cat
    out = None if torch.is_grad_enabled() else q.new_empty(*q.shape[:-1], v.shape[-1])
    outputs: list[Tensor] = []
    workspace: dict[str, Tensor] = {}  # per-block bias buffers, reused (`PositionScheme.bias_into`)
    for start, stop in _query_blocks(q_pos, block, mask, queries_sorted):
        qp = q_pos[start:stop]
        spans = [(0, Lk)]
        if keys_sorted and queries_sorted:
            spans = _key_indices(mask, int(qp[0]), int(qp[-1]), int(k_pos[0]), Lk)
        qc = q[..., start:stop, :]
        if len(spans) == 1:
            lo, hi = spans[0]
            kp, kc, vc = k_pos[lo:hi], k[..., lo:hi, :], v[..., lo:hi, :]
        else:  # keys in separate runs (sinks + a window): gathered into one block of keys
            index = torch.cat([torch.arange(lo, hi, device=k_pos.device) for lo, hi in spans])
            kp, kc, vc = k_pos[index], k.index_select(-2, index), v.index_select(-2, index)
        if rotate_per_block and scheme is not None:
            qc, kc = scheme.rotate(qc, kc, qp, kp, seq_len)
        tau_block = None if tau is None else _block_tau(tau, start, stop)
        local = mask.within(int(qp[0]), int(qp[-1])) if keys_sorted and queries_sorted else mask
        toeplitz = _toeplitz_bias(scheme, local, qp, kp, tau_block) if lean or has_bias else None
        if toeplitz is not None:
            # rows reversed so that the bias is a stride-(1, 1) view of one table: no (H, Lq, Lk) tensor is built
            flipped = _scaled_query(qc, tau_block).flip(-2)
            result = F.scaled_dot_product_attention(flipped, kc, vc, attn_mask=toeplitz.to(qc.dtype), scale=scale)
            _emit(out, outputs, result.flip(-2), start, stop)
            continue
        allowed = None if local.hides_nothing else local.allowed(qp, kp)
        attn_mask: Tensor | None
        if has_bias and scheme is not None:
            if not torch.is_grad_enabled():
                bias = scheme.bias_into(qp, kp, workspace)  # possibly a reused buffer: modified in place below
                if tau_block is not None:
                    bias.div_(tau_block[..., None])
                if allowed is not None:
                    _mask_in_place(bias, allowed)
            else:
                bias = scheme.bias(qp, kp)
                if tau_block is not None:
                    bias = bias / tau_block[..., None]
                if allowed is not None:
                    bias = bias.masked_fill(~allowed, float("-inf"))
            attn_mask = bias.to(qc.dtype)[None]  # 4-D: the flash kernel
        else:
            attn_mask = allowed
        result = F.scaled_dot_product_attention(_scaled_query(qc, tau_block), kc, vc, attn_mask=attn_mask, scale=scale)
        _emit(out, outputs, result, start, stop)
    return out if out is not None else torch.cat(outputs, dim=-2)


def _key_indices(mask: Mask, q_first: int, q_last: int, k0: int, n_keys: int) -> list[tuple[int, int]]:
    """Index ranges [lo, hi) into sorted, contiguous keys starting at position k0 that hold every key visible to
    queries in [q_first, q_last], from the mask's `key_spans`: clipped, merged where they touch, one at least."""
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


def _emit(out: Tensor | None, outputs: list[Tensor], block: Tensor, start: int, stop: int) -> None:
    """Store one query block's result: into the preallocated output, or (under autograd) onto the list."""
    if out is None:
        outputs.append(block)
    else:
        out[..., start:stop, :] = block


def _mask_in_place(bias: Tensor, allowed: Tensor) -> None:
    """Set the disallowed entries of an (H, c, n) bias to -inf, touching only the key columns some query of the
    block may not see (a causal block's last c columns), not the whole (H, c, n) tensor."""
    partial = (~allowed).any(0).nonzero()
    if partial.numel():
        lo, hi = int(partial[0]), int(partial[-1]) + 1
        bias[..., lo:hi].masked_fill_(~allowed[:, lo:hi], float("-inf"))


def _tiles_apply(
    scheme: PositionScheme | None,
    mask: Mask,
    q_pos: Tensor,
    k_pos: Tensor,
    device: torch.device | str,
    dtype: torch.dtype = torch.float32,
) -> bool:
    """Whether `tiled_causal_attention` computes this call: no autograd, CPU, an exactly causal mask, contiguous
    positions with every query's own position among the keys, and no bias or one that is not a per-distance
    table (FIRE past its threshold; per-distance tables are cheaper as strided views), in a dtype the CPU flash
    kernel's log-sum-exp variant accepts (fp32, bf16)."""
    if _FLASH_WITH_LSE is None or torch.is_grad_enabled() or torch.device(device).type != "cpu":
        return False
    if dtype not in (torch.float32, torch.bfloat16):
        return False
    if not mask.exactly_causal:
        return False
    if q_pos.numel() == 0 or k_pos.numel() == 0 or not (_contiguous(q_pos) and _contiguous(k_pos)):
        return False
    if scheme is not None and scheme.has_bias and _toeplitz_possible(scheme, mask, q_pos):
        return False
    return int(k_pos[0]) <= int(q_pos[0]) and int(q_pos[-1]) <= int(k_pos[-1])


def tiled_causal_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scheme: PositionScheme | None,
    q_pos: Tensor,
    k_pos: Tensor,
    scale: float,
    tau: Tensor | None = None,
    block_size: int | None = None,
    *,
    sinks: Tensor | None = None,
) -> Tensor:
    """Causal attention as query blocks x key chunks, without autograd (CPU): exact, and lean for rotary schemes.

    Each query block attends its diagonal square (one causal flash call) and every earlier key chunk (unmasked
    flash calls); each call returns its rows' log-sum-exp, and the partial outputs are merged exactly:
    out = sum_j out_j exp(lse_j - lse), lse = logaddexp_j lse_j. Every row sees at least its own key in the
    diagonal tile, so no tile has a fully masked row. A rotary scheme rotates each tile's queries and keys on the
    fly (xPos anchored at the query block, as in `chunked`), so extra memory is the output plus O(tile) buffers,
    where the fused call needs rotated copies of all of q and k. A bias (FIRE's, per query and key) is built
    per tile into reused buffers and passed as the tile's float mask, the causal square's masked in. Learned
    `sinks` (H,) are one more tile of log-sum-exp sink_h and output 0 (`with_sinks`).
    """
    assert _FLASH_WITH_LSE is not None  # `_tiles_apply` checked it
    Lq = q.shape[-2]
    has_bias = scheme is not None and scheme.has_bias
    block = max(1, int(block_size or (BIAS_TILE if has_bias else TILE)))
    key_chunk = max(block, BIAS_KEY_CHUNK) if has_bias and block_size is None else block
    if scheme is not None and scheme.rotate_span is not None:
        block = key_chunk = min(block, scheme.rotate_span)
    workspace: dict[str, Tensor] = {}
    seq_len = max(int(q_pos[-1]), int(k_pos[-1])) + 1
    k0 = int(k_pos[0])
    out = q.new_empty(*q.shape[:-1], v.shape[-1])
    for start in range(0, Lq, block):
        stop = min(start + block, Lq)
        qp = q_pos[start:stop]
        first, last = int(qp[0]) - k0, int(qp[-1]) - k0 + 1  # key indices of the diagonal square
        qc = q[..., start:stop, :]
        tau_block = None if tau is None else _block_tau(tau, start, stop)
        tiles = [(first, last, True)] + [(lo, min(lo + key_chunk, first), False) for lo in range(0, first, key_chunk)]
        acc = lse = qs = None
        for lo, hi, causal in tiles:
            if qs is None:  # the diagonal tile: rotate the query block once for all its tiles
                qr, kr = _rotate(scheme, qc, k[..., lo:hi, :], qp, k_pos[lo:hi], seq_len)
                qs = _scaled_query(qr, tau_block)
            else:  # keys alone (one query row passed along: xPos anchors its scales at the block's first query)
                _, kr = _rotate(scheme, qc[..., :1, :], k[..., lo:hi, :], qp[:1], k_pos[lo:hi], seq_len)
            if has_bias and scheme is not None:
                bias = _tile_bias(scheme, qp, k_pos[lo:hi], tau_block, causal, workspace)
                part, part_lse = _FLASH_WITH_LSE(
                    qs, kr, v[..., lo:hi, :], 0.0, False, attn_mask=bias.to(qs.dtype), scale=scale
                )
            else:
                part, part_lse = _FLASH_WITH_LSE(qs, kr, v[..., lo:hi, :], 0.0, causal, scale=scale)
            acc, lse = merge_tiles(acc, lse, part, part_lse)
        assert acc is not None and lse is not None  # every query block has its diagonal tile
        out[..., start:stop, :] = acc if sinks is None else with_sinks(acc, lse, sinks)
    return out


def scored_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scheme: PositionScheme | None,
    mask: Mask,
    q_pos: Tensor,
    k_pos: Tensor,
    scale: float,
    tau: Tensor | None,
    block_size: int | None,
    sinks: Tensor | None,
    softcap: float | None,
) -> Tensor:
    """Query blocks with their scores written out (fp32), for what no fused kernel applies: a softcap (tanh on
    every score) and learned sinks under autograd. Each block sees only the keys its mask declares, as in
    `chunked_attention`. Under autograd a block's scores are one (B, H, block, keys) tensor (`BIAS_BUDGET`);
    without, they are cache-sized tiles of `SCORED_TILE` x `SCORED_KEY_TILE`, each tile's softmax merged by its
    log-sum-exp (`merge_tiles`), the operations in place."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    grad = torch.is_grad_enabled()
    keys_sorted = _contiguous(k_pos)
    queries_sorted = bool((q_pos.diff() >= 0).all()) if Lq > 1 else True
    window = _typical_keys(mask, Lk, block_size or MAX_BLOCK)
    block = block_size or int(min(MAX_BLOCK, max(MIN_BLOCK, BIAS_BUDGET // max(1, window * q.shape[1]))))
    if not grad and block_size is None:
        block = SCORED_TILE
    per_block = scheme is not None and scheme.transforms_qk and scheme.rotate_span is not None
    if per_block and scheme is not None and scheme.rotate_span is not None:
        block = min(block, scheme.rotate_span)
    seq_len = max(int(q_pos.max()), int(k_pos.max())) + 1 if Lk else None
    if not per_block:
        q, k = _rotate(scheme, q, k, q_pos, k_pos)
    out = None if grad else q.new_empty(*q.shape[:-1], v.shape[-1])
    outputs: list[Tensor] = []
    for start, stop in _query_blocks(q_pos, block, mask, queries_sorted):
        qp, qc = q_pos[start:stop], q[..., start:stop, :]
        spans = [(0, Lk)]
        if keys_sorted and queries_sorted:
            spans = _key_indices(mask, int(qp[0]), int(qp[-1]), int(k_pos[0]), Lk)
        if len(spans) == 1:
            lo, hi = spans[0]
            kp, kc, vc = k_pos[lo:hi], k[..., lo:hi, :], v[..., lo:hi, :]
        else:
            index = torch.cat([torch.arange(lo, hi, device=k_pos.device) for lo, hi in spans])
            kp, kc, vc = k_pos[index], k.index_select(-2, index), v.index_select(-2, index)
        if per_block and scheme is not None:
            qc, kc = scheme.rotate(qc, kc, qp, kp, seq_len)
        local = mask.within(int(qp[0]), int(qp[-1])) if keys_sorted and queries_sorted else mask
        tau_block = None if tau is None else _block_tau(tau, start, stop)
        if grad:
            scores = (qc.float() @ kc.float().transpose(-1, -2)) * scale
            if scheme is not None and scheme.has_bias:
                scores = scores + scheme.bias(qp, kp)
            if tau_block is not None:
                scores = scores / tau_block[..., None]
            if softcap is not None:
                scores = torch.tanh(scores / softcap) * softcap
            if not local.hides_nothing:
                scores = scores.masked_fill(~local.allowed(qp, kp), float("-inf"))
            lse = torch.logsumexp(scores, dim=-1)
            result = torch.exp(scores - lse.masked_fill(torch.isneginf(lse), 0.0)[..., None]) @ vc.float()
        else:
            result, lse = _scored_tiles(qc.float(), kc, vc, scheme, local, qp, kp, scale, tau_block, softcap)
        if sinks is not None:
            result = with_sinks(result, lse, sinks)
        _emit(out, outputs, result.to(v.dtype), start, stop)
    return out if out is not None else torch.cat(outputs, dim=-2)


#: the no-autograd scored path's tile: query block x key chunk, (B, H, 128, 512) fp32 = 2 MiB at 8 heads
SCORED_TILE = 128
SCORED_KEY_TILE = 512
#: softcaps up to this bound scores so that their exponentials sum without overflow (`_scored_tiles`)
BOUNDED_CAP = 60.0


def _scored_tiles(
    qc: Tensor,
    kc: Tensor,
    vc: Tensor,
    scheme: PositionScheme | None,
    local: Mask,
    qp: Tensor,
    kp: Tensor,
    scale: float,
    tau: Tensor | None,
    softcap: float | None,
) -> tuple[Tensor, Tensor]:
    """One query block's output and log-sum-exp over its keys in chunks of `SCORED_KEY_TILE`, without autograd:
    each tile's scores scaled, biased, tempered and capped in place, masked where the mask hides some of them,
    normalised by the tile's log-sum-exp and merged exactly (`merge_tiles`). A softcap of at most `BOUNDED_CAP`
    bounds every score by the cap, so exp(score) cannot overflow fp32 (e^60 x 10^12 keys < 3 x 10^38): tiles then
    accumulate exp(score) v and the row sums directly, without a log-sum-exp, and divide once at the end."""
    bounded = softcap is not None and softcap <= BOUNDED_CAP
    divisor = softcap if bounded and softcap is not None else 1.0  # the scores come out divided by it
    q_scaled = qc * (scale / divisor) if tau is None else qc * (scale / divisor) / tau[..., None]
    acc = lse = None
    for lo in range(0, max(1, kp.numel()), SCORED_KEY_TILE):
        hi = min(lo + SCORED_KEY_TILE, kp.numel())
        scores = torch.matmul(q_scaled, kc[..., lo:hi, :].float().transpose(-1, -2))
        if scheme is not None and scheme.has_bias:
            bias = scheme.bias(qp, kp[lo:hi]) / divisor
            scores.add_(bias if tau is None else bias / tau[..., None])
        if softcap is not None:
            (scores if bounded else scores.div_(softcap)).tanh_().mul_(softcap)
        if not local.hides_nothing:
            allowed = local.allowed(qp, kp[lo:hi])
            if not bool(allowed.all()):
                scores.masked_fill_(~allowed, float("-inf"))
        if bounded:  # lse holds the row sums of exp(score) until the end
            scores.exp_()
            part, rows = torch.matmul(scores, vc[..., lo:hi, :].float()), scores.sum(-1)
            acc, lse = (part, rows) if acc is None or lse is None else (acc.add_(part), lse.add_(rows))
            continue
        part_lse = torch.logsumexp(scores, dim=-1)
        scores.sub_(part_lse.masked_fill(torch.isneginf(part_lse), 0.0)[..., None]).exp_()
        acc, lse = merge_tiles(acc, lse, torch.matmul(scores, vc[..., lo:hi, :].float()), part_lse)
    assert acc is not None and lse is not None  # at least one tile
    if bounded:
        acc.div_(lse.clamp(min=torch.finfo(lse.dtype).tiny)[..., None])
        lse = torch.log(lse)
    return acc, lse


def _tile_bias(
    scheme: PositionScheme, qp: Tensor, kp: Tensor, tau: Tensor | None, causal: bool, workspace: dict[str, Tensor]
) -> Tensor:
    """One tile's bias (1, H, c, n) in the flash kernel's mask form: divided by tau, causal square masked."""
    bias = scheme.bias_into(qp, kp, workspace)
    if tau is not None:
        bias = bias / tau[..., None]
    if causal:
        _mask_in_place(bias, CausalMask().allowed(qp, kp))
    return bias[None]


def merge_tiles(acc: Tensor | None, lse: Tensor | None, part: Tensor, part_lse: Tensor) -> tuple[Tensor, Tensor]:
    """Fold one tile's normalised output and log-sum-exp into the running ones (fp32 accumulation, in place).

    A row that no tile so far lets see a key (log-sum-exp -inf on both sides, output 0) stays at 0 and -inf.
    """
    if acc is None or lse is None:
        return part.float(), part_lse
    total = torch.logaddexp(lse, part_lse)
    base = total.masked_fill(torch.isneginf(total), 0.0)
    acc.mul_(torch.exp(lse - base)[..., None]).addcmul_(part, torch.exp(part_lse - base)[..., None])
    return acc, total


def attention_with_lse(
    q: Tensor, k: Tensor, v: Tensor, scale: float, *, causal: bool = False, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """One tile's softmax attention and its rows' log-sum-exp (B, H, Lq) in fp32, for merging tiles exactly.

    torch's CPU flash kernel without autograd (fp32, bf16); otherwise the same computed explicitly in fp32 (any
    device, differentiable). `causal` is top-left aligned (key j <= query i); `mask` is a float 0 / -inf tensor
    broadcastable to (B, H, Lq, Lk). A row that sees no key gets output 0 and log-sum-exp -inf.
    """
    use_flash = _FLASH_WITH_LSE is not None and not torch.is_grad_enabled() and q.device.type == "cpu"
    if use_flash and _FLASH_WITH_LSE is not None and q.dtype in (torch.float32, torch.bfloat16):
        attn_mask = None if mask is None else mask.to(q.dtype)
        out, lse = _FLASH_WITH_LSE(q, k, v, 0.0, causal, attn_mask=attn_mask, scale=scale)
        if mask is not None:  # the kernel reports log-sum-exp 0 for a row it was given no key for
            lse = lse.masked_fill(torch.isneginf(mask).all(-1), float("-inf"))
        return out, lse.float()
    logits = (q.float() @ k.float().transpose(-1, -2)) * scale
    if causal:
        hidden = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).triu(1)
        logits = logits.masked_fill(hidden, float("-inf"))
    if mask is not None:
        logits = logits + mask.float()
    empty = torch.isneginf(logits).all(-1, keepdim=True)  # rows without keys: finite logits, then weight 0
    logits = logits.masked_fill(empty, 0.0)
    lse = torch.logsumexp(logits, dim=-1, keepdim=True)
    weights = torch.exp(logits - lse).masked_fill(empty, 0.0)
    return (weights @ v.float()).to(v.dtype), lse.masked_fill(empty, float("-inf")).squeeze(-1)


def _toeplitz_possible(scheme: PositionScheme | None, mask: Mask, q_pos: Tensor) -> bool:
    """Whether blocks will get their bias, or without a bias their mask, as a strided view of a table (so no
    per-block bias or mask memory; a float mask also spares SDPA converting a boolean one per block)."""
    local = mask.within(0, 0)  # BCA is causal within a query block that stays inside one of its blocks
    if local.allowed_distance(q_pos[:1]) is None:
        return False
    if scheme is None or not scheme.has_bias:
        return not local.hides_nothing  # nothing to mask: no mask at all
    frozen = not torch.is_grad_enabled() or not any(p.requires_grad for p in scheme.parameters())
    return frozen and scheme.distance_only(q_pos)


def _query_blocks(q_pos: Tensor, block: int, mask: Mask, sorted_queries: bool) -> list[tuple[int, int]]:
    """Query index ranges of at most `block`, cut at the mask's own block boundaries (BCA) when it has them,
    so that each range sees the mask as a function of distance alone."""
    Lq = q_pos.numel()
    period = mask.period if sorted_queries and _contiguous(q_pos) else None
    ranges, start = [], 0
    while start < Lq:
        stop = min(start + block, Lq)
        if period:
            stop = min(stop, start + period - int(q_pos[start]) % period)
        ranges.append((start, stop))
        start = stop
    return ranges


def _toeplitz_bias(
    scheme: PositionScheme | None, mask: Mask, qp: Tensor, kp: Tensor, tau: Tensor | None
) -> Tensor | None:
    """The block's masked bias as a view (1, H, c, n) of one per-distance table, rows in reverse order; without a
    bias, the mask alone as a (1, 1, c, n) view of a 0 / -inf table.

    Applies when the bias and the mask depend on m - n alone and positions are contiguous: then with rows
    reversed, entry (a, b) holds table[a + b], i.e. `as_strided` with strides (1, 1). Only without autograd
    through the table (overlapping views have no cheap backward): learned tables under training take the
    gather path.
    """
    biased = scheme is not None and scheme.has_bias
    if biased and scheme is not None and (not scheme.distance_only(qp) or (tau is not None and tau.shape[-1] != 1)):
        return None
    if not (_contiguous(qp) and _contiguous(kp)) or qp.numel() == 0 or kp.numel() == 0:
        return None
    c, n = qp.numel(), kp.numel()
    d_max = int(qp[-1]) - int(kp[0])
    distance = d_max - torch.arange(c + n - 1, device=qp.device)  # y -> d = d_max - y
    allowed = mask.allowed_distance(distance)
    if allowed is None:
        return None
    if not biased or scheme is None:  # the temperature is in the scaled queries
        table = torch.zeros(1, c + n - 1, device=qp.device)
    else:
        table = scheme.distance_bias(distance)
        if table.requires_grad:
            return None
        if tau is not None:
            table = table / tau
    table = table.masked_fill(~allowed, float("-inf")).contiguous()
    # 4-D: torch 2.13's CPU SDPA sends a 3-D float mask to its slow math kernel, a 4-D one to the flash kernel
    return table.as_strided((1, table.shape[0], c, n), (0, table.stride(0), 1, 1))


def _block_tau(tau: Tensor, start: int, stop: int) -> Tensor:
    return tau if tau.shape[-1] == 1 else tau[..., start:stop]


def _typical_keys(mask: Mask, n_keys: int, block: int) -> int:
    """Keys one query block sees at most: sizes the bias budget (a window sees width + block keys)."""
    count = _keys_per_block(mask, block)
    return n_keys if count is None else min(n_keys, count)


def _keys_per_block(mask: Mask, block: int) -> int | None:
    """Keys a block of `block` queries far from the start can see (`key_spans`), or None when that number grows
    with the block's position (causal, full); the block starts on one of the mask's period boundaries."""
    far = _FAR - _FAR % mask.period if mask.period else _FAR
    spans = mask.key_spans(far, far + block - 1)
    if any(first <= -UNBOUNDED or last >= UNBOUNDED for first, last in spans):
        return None
    count = sum(max(0, last - first + 1) for first, last in spans)
    return count if count < far else None
