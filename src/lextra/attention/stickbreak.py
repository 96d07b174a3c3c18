"""Stick-breaking attention (Tan et al. 2024, arXiv 2410.17980; code shawntan/stickbreaking-attention): the
`stickbreak` attention piece, which replaces the layer's softmax. With z_ij = q_i . k_j / sqrt(D):

    log A_ij = logsigmoid(z_ij) - sum_{j<k<i} softplus(z_ik),     out_i = sum_j A_ij v_j + (1 - sum_j A_ij) u_i,

in log space in fp32. As the authors' code: `attend_current=false` sees keys strictly before the query; hidden
keys take and break nothing; the remainder goes to u_i (`remainder=bias`: a learned per-head vector, `value`: v_i,
`none`); `norm=true` is a per-head GroupNorm. A scheme's rotation and bias compose; sinks, FoX, CoPE, extension
methods and materialised biases are refused. Backends: `reference` (dense), `chunked`/`auto` (tiled walk, or rows
over their keys); `sdpa` and `flex` are refused. Under autograd tiles are recomputed in the backward pass."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from lextra.attention.backends.common import cap_scores, rotate
from lextra.attention.context import AttentionContext
from lextra.attention.masks import MASKS
from lextra.attention.pieces import PIECES, AttentionCall, AttentionPiece
from lextra.errors import ConfigError
from lextra.positions.base import HeadDims, PositionScheme
from lextra.registry import parse_spec
from lextra.validate import check_bool

#: keys per tile (and queries per block) of the tiled walk
TILE = 256
#: scores per step of the tiled walk (batch and heads included): how many query blocks walk together
GROUP_BUDGET = 1 << 21
#: (query, key) pairs per row block of the row path, per batch row and head: 2^20 fp32 scores = 4 MiB
ROW_BUDGET = 1 << 20
REMAINDERS = ("bias", "value", "none")
#: the tiled walk's log weights are clamped here before exp (denormals are slow on CPUs; e^-87 is below rounding)
LOG_FLOOR = -87.0
#: the backends that run stick-breaking attention, and the path each takes
PATHS = {"reference": "dense", "chunked": "tiled", "auto": "tiled"}


def stick(z: Tensor, visible: Tensor | None) -> tuple[Tensor, Tensor]:
    """(log A, broken) for fp32 scores z (.., Lq, Lk) of keys in order, hidden pairs -inf; `broken` (.., Lq) sums
    the softplus over the row's visible keys (what a tile to the left carries). `visible` None: every pair."""
    broken = F.softplus(z)
    if visible is not None:
        broken = broken.masked_fill(~visible, 0.0)
    after = F.pad(broken.flip(-1).cumsum(-1).flip(-1)[..., 1:], (0, 1))
    log_w = F.logsigmoid(z) - after
    if visible is not None:
        log_w = log_w.masked_fill(~visible, float("-inf"))
    return log_w, broken.sum(-1)


def _scores(
    qr: Tensor, kr: Tensor, scale: float, bias: Tensor | None, tau: Tensor | None, softcap: float | None
) -> Tensor:
    """fp32 scores z = (q . k scale + bias) / tau, capped where the call has a softcap (the softmax layers' order);
    `tau` is (1|H, ..., Lq|1) against the scores' head and query axes."""
    z = qr.float() @ kr.float().transpose(-1, -2)
    if scale != 1.0:
        z = z * scale
    if bias is not None:
        z = z + bias
    if tau is not None:
        z = z / tau[..., None]
    return z if softcap is None else cap_scores(z, softcap)


def _dense(
    qr: Tensor, kr: Tensor, v: Tensor, ctx: AttentionContext, q_pos: Tensor, tau: Tensor | None, attend_current: bool
) -> tuple[Tensor, Tensor]:
    """(sum_j A_ij v_j, sum_j A_ij) in fp32 for rotated queries qr at q_pos over every key."""
    scheme = ctx.scheme
    bias = scheme.bias(q_pos, ctx.k_pos) if scheme is not None and scheme.has_bias else None
    z = _scores(qr, kr, ctx.scale, bias, tau, ctx.softcap)
    k_pos = ctx.k_pos  # keys before the query (or at it, attend_current) that the mask shows
    order = k_pos[None, :] <= q_pos[:, None] if attend_current else k_pos[None, :] < q_pos[:, None]
    log_w, _ = stick(z, ctx.mask.allowed(q_pos, k_pos) & order)
    weights = log_w.exp()
    return weights @ v.float(), weights.sum(-1)


def _tau(ctx: AttentionContext) -> Tensor | None:
    """The temperature as (1|H, Lq|1) (None for 1)."""
    tau = ctx.tau
    if tau is None:
        return None
    return tau.reshape(1, 1) if tau.dim() == 0 else tau.reshape(-1, tau.shape[-1])


def row_stickbreak(
    q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext, attend_current: bool
) -> tuple[Tensor, Tensor]:
    """Query rows in blocks over every key (O(rows x Lk) scores at a time): any causal mask and positions, and one
    cached decoding step; under autograd each block is recomputed in the backward pass."""
    qr, kr = rotate(ctx.scheme, q, k, ctx.q_pos, ctx.k_pos)
    tau = _tau(ctx)
    Lq, Lk = q.shape[-2], k.shape[-2]
    rows = max(1, min(Lq, ROW_BUDGET // max(1, Lk)))
    outs, masses = [], []
    for start in range(0, Lq, rows):
        stop = min(Lq, start + rows)
        rows_tau = tau if tau is None or tau.shape[-1] == 1 else tau[:, start:stop]
        args = (qr[..., start:stop, :], kr, v, ctx, ctx.q_pos[start:stop], rows_tau, attend_current)
        out, mass = checkpoint(_dense, *args, use_reentrant=False) if torch.is_grad_enabled() else _dense(*args)
        outs.append(out)
        masses.append(mass)
    return torch.cat(outs, -2), torch.cat(masses, -1)


def _tile_step(
    qb: Tensor,
    kb: Tensor,
    vb: Tensor,
    carry: Tensor,
    bias: Tensor | None,
    tau: Tensor | None,
    scale: float,
    softcap: float | None,
    visible: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """One diagonal of tiles: query blocks qb (B, H, n, T, D) against key tiles kb, vb held nearest key first (vb's last
    channel ones), left of keys whose softplus `carry` sums -> (weights @ vb, carry plus this tile's softplus)."""
    z = _scores(qb, kb, scale, bias, tau, softcap)
    broken = F.softplus(z)
    if visible is not None:
        broken = broken.masked_fill(~visible, 0.0)
    through = broken.cumsum(-1)
    before = F.pad(through[..., :-1], (1, 0))  # the softplus of the nearer keys alone (no cancellation against j's)
    if torch.is_grad_enabled():
        log_w = z - broken - before - carry[..., None]
    else:  # in place: the forward alone keeps one (n, T, T) buffer fewer
        log_w = z.sub_(broken).sub_(before).sub_(carry[..., None])
    weights = log_w.clamp(LOG_FLOOR, 0.0).exp()  # at most 0: a hidden pair's z may be large, and exp(z) inf
    if visible is not None:
        weights = weights.masked_fill(~visible, 0.0)
    return weights @ vb, carry + through[..., -1]


def tiles_apply(ctx: AttentionContext) -> bool:
    """Whether the tiled walk computes `ctx`: a causal mask, queries at the keys' own contiguous positions and a
    bias (if any) that is a function of the distance alone there."""
    facts, scheme = ctx.facts, ctx.scheme
    if not (ctx.mask.exactly_causal and facts.same and facts.q_contiguous and facts.n_q > 0):
        return False
    return scheme is None or not scheme.has_bias or scheme.distance_only(ctx.q_pos)


def tile_size(block_size: int | None, L: int) -> int:
    """Keys per tile of the walk over L keys: the call's block size (at most L), else the fewest tiles of at most
    `TILE` keys, evenly filled, so padding stays below one key per tile (a sequence shorter than a tile is one)."""
    if block_size:
        return max(1, min(int(block_size), L))
    return math.ceil(L / math.ceil(L / TILE))


def tiled_stickbreak(
    q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext, attend_current: bool
) -> tuple[Tensor, Tensor]:
    """The tiled walk (`tiles_apply`): query blocks of T rows walk key tiles from the diagonal leftwards, each row
    carrying the softplus its stick has lost; one step per diagonal for a group of blocks (`GROUP_BUDGET`), O(L x T)
    memory in all."""
    qr, kr = rotate(ctx.scheme, q, k, ctx.q_pos, ctx.k_pos)
    B, H, L, _ = qr.shape
    T = tile_size(ctx.block_size, L)
    nb = math.ceil(L / T)
    pad = nb * T - L

    def blocks(x: Tensor) -> Tensor:
        return F.pad(x, (0, 0, 0, pad)).reshape(*x.shape[:2], nb, T, x.shape[-1])

    q5 = blocks(qr.float() * ctx.scale)  # the scale applied once, to the queries
    k5 = blocks(kr).flip(-2)  # each tile's keys nearest first: the stick breaks along a plain cumulative sum
    v5 = blocks(torch.cat((v.float(), v.new_ones((*v.shape[:-1], 1), dtype=torch.float32)), -1)).flip(-2)
    tau = _tau(ctx)
    per_query = tau is not None and tau.shape[-1] != 1
    if tau is not None:
        tau = F.pad(tau, (0, pad), value=1.0).reshape(-1, nb, T) if per_query else tau.reshape(-1, 1, 1)
    offsets = torch.arange(T, device=q.device)
    first = int(ctx.facts.q_first)
    diagonal = offsets[None, :] <= offsets[:, None] if attend_current else offsets[None, :] < offsets[:, None]
    diagonal = diagonal.flip(-1)
    scheme = ctx.scheme
    group = max(1, GROUP_BUDGET // (B * H * T * T))
    outs = []
    for g0 in range(0, nb, group):  # query blocks g0..g1 - 1 walk together
        g1 = min(nb, g0 + group)
        carry = q.new_zeros((B, H, g1 - g0, T), dtype=torch.float32)
        acc: Tensor | None = None
        for t in range(g1):  # the t-th key tile left of each block's diagonal, for the blocks it exists for
            lo = max(g0, t)
            bias = None
            if scheme is not None and scheme.has_bias:
                bias = scheme.bias(first + t * T + offsets, first + offsets).flip(-1)[:, None]
            args = (q5[:, :, lo:g1], k5[:, :, lo - t : g1 - t], v5[:, :, lo - t : g1 - t], carry, bias)
            rest = (
                tau[:, lo:g1] if per_query and tau is not None else tau,
                1.0,
                ctx.softcap,
                diagonal if t == 0 else None,
            )
            if torch.is_grad_enabled():
                out, carry = checkpoint(_tile_step, *args, *rest, use_reentrant=False)
            else:
                out, carry = _tile_step(*args, *rest)
            acc = out if acc is None else acc + out
            if t >= g0:  # block t is done: no later tile reaches it
                outs.append(acc[:, :, 0].clone())
                acc, carry = acc[:, :, 1:], carry[:, :, 1:]
    out = torch.stack(outs, 2).reshape(B, H, nb * T, -1)[:, :, :L]
    return out[..., :-1], out[..., -1]


@PIECES.register("stickbreak")
class StickBreaking(AttentionPiece):
    """Stick-breaking attention in place of the layer's softmax (Tan et al. 2024, arXiv 2410.17980), with the
    authors' model-layer defaults: keys strictly before the query, the remainder to a learned per-head bias, a
    per-head GroupNorm on the output."""

    summary = (
        "stick-breaking attention in place of the softmax (Tan 2024); remainder bias|value|none, "
        "attend_current, norm (GroupNorm per head)"
    )
    positional = "remainder"
    replaces_softmax = True

    def __init__(
        self, dims: HeadDims, *, remainder: str = "bias", attend_current: bool = False, norm: bool = True
    ) -> None:
        super().__init__(dims)
        if remainder not in REMAINDERS:
            raise ConfigError(f"stickbreak: remainder must be one of {', '.join(REMAINDERS)}, got {remainder!r}")
        self.remainder = remainder
        self.attend_current = check_bool("stickbreak: attend_current", attend_current)
        self.group_norm = check_bool("stickbreak: norm", norm)
        H, D = dims.n_heads, dims.head_dim
        self.head_bias = nn.Parameter(torch.zeros(H, D)) if remainder == "bias" else None
        self.norm_weight = nn.Parameter(torch.ones(H * D)) if norm else None
        self.norm_bias = nn.Parameter(torch.zeros(H * D)) if norm else None

    @classmethod
    def check_layer(cls, scheme: type[PositionScheme], mask: str) -> None:
        """A scheme whose scores read q and k (CoPE) or a mask that shows later keys (`full`) is refused."""
        if getattr(scheme, "content_dependent", False):
            raise ConfigError(
                f"stick-breaking attention takes a position scheme's rotation or distance bias, not {scheme.name!r}'s "
                "content-dependent scores; use nope, rope or a bias scheme"
            )
        if not MASKS.get(parse_spec(mask).name).causal:
            raise ConfigError(
                f"stick-breaking attention breaks sticks over earlier keys; mask {mask!r} shows later ones"
            )

    def attend(self, q: Tensor, k: Tensor, v: Tensor, *, call: AttentionCall, layer: int, **options: Any) -> Tensor:
        """The layer's attention as stick-breaking, from the options the layer hands `attention` (`call`, the
        softmax attention, is not used)."""
        forget = options.pop("forget", None)
        if forget is not None:
            raise ConfigError("stick-breaking attention takes no forget gate (fox): keep one of the two in a layer")
        return self.compute(q, k, v, AttentionContext.build(q, k, **options))

    def path(self, ctx: AttentionContext) -> str:
        """`dense` or `tiled` for the call's backend; a one-line ConfigError naming the fix where it cannot run."""
        if ctx.scheme is not None and getattr(ctx.scheme, "content_dependent", False):
            raise ConfigError(f"stick-breaking attention does not take {ctx.scheme.name!r}'s content-dependent scores")
        if ctx.extension is not None:
            raise ConfigError(
                f"stick-breaking attention does not run under {ctx.extension.name!r}; apply the extension method to "
                "the layers without the stickbreak piece (--layers-select) or train without S2-Attn"
            )
        if ctx.sinks is not None:
            raise ConfigError("stick-breaking attention has no softmax denominator for sinks; drop the sinks piece")
        if ctx.materialised:
            raise ConfigError(
                "stick-breaking attention does not take a materialised score bias or padding mask; use a lextra model"
            )
        if not ctx.mask.causal:
            raise ConfigError(
                f"stick-breaking attention breaks each query's stick over earlier keys; the {ctx.mask.name!r} mask "
                "shows later ones: use a causal mask (causal, window, chunk)"
            )
        path = PATHS.get(ctx.backend)
        if path is None:
            raise ConfigError(
                f"the {ctx.backend} backend cannot run stick-breaking attention (it is not a softmax); use "
                "backend='chunked' (tiled), 'reference' or 'auto'"
            )
        return path

    def compute(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        """out_i = sum_j A_ij v_j + (1 - sum_j A_ij) u_i in fp32 (outside autocast), cast to v's dtype."""
        path = self.path(ctx)
        with torch.autocast(q.device.type, enabled=False):
            if path == "dense":
                qr, kr = rotate(ctx.scheme, q, k, ctx.q_pos, ctx.k_pos)
                out, mass = _dense(qr, kr, v, ctx, ctx.q_pos, _tau(ctx), self.attend_current)
            elif tiles_apply(ctx):
                out, mass = tiled_stickbreak(q, k, v, ctx, self.attend_current)
            else:
                out, mass = row_stickbreak(q, k, v, ctx, self.attend_current)
            rest = (1.0 - mass)[..., None]
            if self.head_bias is not None:
                out = out + rest * self.head_bias.float()[None, :, None, :]
            elif self.remainder == "value":
                out = out + rest * v[..., k.shape[-2] - q.shape[-2] :, :].float()
        return out.to(v.dtype)

    def transform_output(self, x: Tensor, out: Tensor) -> Tensor:
        """GroupNorm with one group per head over (B, H, L, D) outputs (the authors' `nn.GroupNorm(H, H D)`)."""
        if not self.group_norm:
            return out
        B, H, L, D = out.shape
        flat = out.transpose(1, 2).reshape(B * L, H * D)
        normed = F.group_norm(flat, H, self.norm_weight, self.norm_bias, eps=1e-5)
        return normed.reshape(B, L, H, D).transpose(1, 2)

    def extra_repr(self) -> str:
        options: dict[str, Any] = {"remainder": self.remainder, "attend_current": self.attend_current}
        return ", ".join(f"{key}={value!r}" for key, value in {**options, "norm": self.group_norm}.items())
