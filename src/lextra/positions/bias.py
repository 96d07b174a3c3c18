"""Additive score biases: ALiBi, T5 buckets, KERPLE (log, power), Sandwich and FIRE, added to q.k / sqrt(D)
before the softmax; all but FIRE are functions of d = m - n alone, computed from a per-distance table."""

from __future__ import annotations

import math
from typing import ClassVar, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lextra.errors import ConfigError
from lextra.positions.base import HeadDims, PositionScheme, QueryBias, ScoreLayout, register_scheme
from lextra.validate import FLOAT32_MAX, check_bool, check_int, check_range

#: FIRE's MLP widths its FlexAttention score modifier unrolls (one comparison per hidden unit and score)
FLEX_MAX_HIDDEN = 64


def alibi_slopes(n_heads: int) -> Tensor:
    """ALiBi head slopes (Press et al. 2022): 2^(-8h/H) for a power of two H, otherwise the slopes of
    P = 2^floor(log2 H) followed by every other slope of 2P, truncated to H (fp32)."""

    def geometric(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    if n_heads < 1:
        raise ConfigError(f"alibi needs at least one head, got {n_heads}")
    p = 2 ** math.floor(math.log2(n_heads))
    slopes = geometric(p) + geometric(2 * p)[0::2][: n_heads - p]
    return torch.tensor(slopes, dtype=torch.float32)


@register_scheme("alibi")
class ALiBi(PositionScheme):
    """Attention with linear biases (Press et al. 2022, arXiv 2108.12409): bias -m_h |m - n|.

    `slope_shift` adds a constant to every log2 slope (Chi et al. 2023, arXiv 2212.10356), within
    +-SLOPE_SHIFT_LIMIT, where every bias up to 2^20 tokens stays finite and non-zero in fp32.
    `left` adds left x m_h to the keys before the query, -m_h (|m - n| - left [m > n]): under a bidirectional mask
    the plain bias is symmetric and cannot tell left from right; Ruoss et al. 2023 (arXiv 2305.16843; their
    `compute_alibi_encodings_biases`) break the symmetry with left = 0.5."""

    summary = "linear distance penalty -m_h (m - n) with geometric head slopes (Press 2022)"
    has_bias = True
    SLOPE_SHIFT_LIMIT: ClassVar[float] = 100.0
    slopes: Tensor  # a buffer

    def __init__(self, dims: HeadDims, *, slope_shift: float = 0.0, left: float = 0.0) -> None:
        super().__init__(dims)
        limit = self.SLOPE_SHIFT_LIMIT
        shift = check_range("alibi: slope_shift", slope_shift, -limit, limit, hint="0 gives the paper's slopes")
        self.left = check_range("alibi: left", left, 0.0, 1.0, hint="0 is Press et al.'s; Ruoss et al.'s encoder: 0.5")
        slopes = alibi_slopes(dims.n_heads) * (2.0**shift)
        self.register_buffer("slopes", slopes, persistent=False)

    def distance_bias(self, distance: Tensor) -> Tensor:
        d = distance.abs().float()
        if self.left:
            d = d - self.left * (distance > 0).float()
        return -self.slopes.view(-1, *([1] * d.dim())) * d


def t5_relative_position_bucket(
    relative_position: Tensor, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128
) -> Tensor:
    """The T5 bucket of relative_position = key - query (Raffel et al. 2020, arXiv 1910.10683), as Hugging Face.

    Causal: n = max(-(key - query), 0); bidirectional halves the buckets and offsets keys after the query by
    num_buckets/2. Exact buckets below num_buckets/2, log-spaced up to max_distance, the last bucket beyond.
    """
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets
        n = relative_position.abs()
    else:
        n = (-relative_position).clamp(min=0)
    exact = num_buckets // 2
    is_small = n < exact
    # float32 log as in the reference; n is clamped to >= 1 only where the log is taken
    log_ratio = torch.log(n.clamp(min=1).float() / exact) / math.log(max_distance / exact)
    large = exact + (log_ratio * (num_buckets - exact)).long()
    large = torch.minimum(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(is_small, n, large)


@register_scheme("t5")
class T5Bias(PositionScheme):
    """T5 relative buckets (Raffel et al. 2020): a learned scalar per (bucket, head), shared by all layers."""

    summary = "learned scalar per log-spaced distance bucket and head (T5), shared across layers"
    has_bias = True
    shared_across_layers = True

    def __init__(
        self, dims: HeadDims, *, num_buckets: int = 32, max_distance: int = 128, bidirectional: bool = False
    ) -> None:
        super().__init__(dims)
        num_buckets = check_int("t5: num_buckets", num_buckets, 2, 2**16)
        max_distance = check_int("t5: max_distance", max_distance, 1, 2**40)
        bidirectional = check_bool("t5: bidirectional", bidirectional)
        exact = num_buckets // (2 if bidirectional else 1) // 2
        if exact < 1 or max_distance <= exact:
            raise ConfigError(
                f"t5: need num_buckets >= 2 and max_distance > the exact range, "
                f"got num_buckets={num_buckets}, max_distance={max_distance}"
            )
        self.num_buckets, self.max_distance, self.bidirectional = num_buckets, max_distance, bidirectional
        self.relative_attention_bias = nn.Embedding(num_buckets, dims.n_heads)
        nn.init.normal_(self.relative_attention_bias.weight, std=0.02)

    def distance_bias(self, distance: Tensor) -> Tensor:
        bucket = t5_relative_position_bucket(-distance, self.bidirectional, self.num_buckets, self.max_distance)
        values = self.relative_attention_bias(bucket)  # (..., H)
        return values.movedim(-1, 0).float()


class _Kerple(PositionScheme):
    """Shared parts of the KERPLE kernels: per-head r1, r2, clamped into their valid range in every forward."""

    has_bias = True
    r2_max: float | None = None

    def __init__(self, dims: HeadDims, r1_init: float, r2_init: float, eps: float) -> None:
        super().__init__(dims)
        r1_init = check_range(f"{self.name}: r1_init", r1_init, 0.0, FLOAT32_MAX, low_open=True)
        r2_init = check_range(f"{self.name}: r2_init", r2_init, 0.0, FLOAT32_MAX, low_open=True)
        self.eps = check_range(f"{self.name}: eps", eps, 0.0, self.r2_max or FLOAT32_MAX, low_open=True)
        self.r1 = nn.Parameter(torch.rand(dims.n_heads) * r1_init)
        self.r2 = nn.Parameter(torch.rand(dims.n_heads) * r2_init)

    def parameters_clamped(self) -> tuple[Tensor, Tensor]:
        """(r1, r2) as used in the forward: r1, r2 >= eps (and r2 <= r2_max for the power kernel)."""
        r1 = self.r1.clamp(min=self.eps)
        r2 = self.r2.clamp(min=self.eps, max=self.r2_max) if self.r2_max else self.r2.clamp(min=self.eps)
        return r1, r2


@register_scheme("kerple_log")
class KerpleLog(_Kerple):
    """KERPLE logarithmic kernel (Chi et al. 2022, arXiv 2205.09921): bias -r1 ln(1 + r2 |m - n|), r1 ~
    U(0, r1_init), r2 ~ U(0, r2_init) (the authors' (2, 1)), both clamped to >= eps."""

    summary = "KERPLE log kernel -r1 ln(1 + r2 d), learned per head (Chi 2022)"

    def __init__(self, dims: HeadDims, *, r1_init: float = 2.0, r2_init: float = 1.0, eps: float = 0.01) -> None:
        super().__init__(dims, r1_init, r2_init, eps)

    def distance_bias(self, distance: Tensor) -> Tensor:
        r1, r2 = self.parameters_clamped()
        shape = (-1, *([1] * distance.dim()))
        return -r1.view(shape) * torch.log1p(r2.view(shape) * distance.abs().float())


@register_scheme("kerple_power")
class KerplePower(_Kerple):
    """KERPLE power kernel (Chi et al. 2022, arXiv 2205.09921): bias -r1 |m - n|^r2, r1 ~ U(0, r1_init),
    r2 ~ U(0, r2_init) (the authors' (1, 2)), clamped to r1 >= eps and eps <= r2 <= 2."""

    summary = "KERPLE power kernel -r1 d^r2, learned per head (Chi 2022)"
    r2_max = 2.0

    def __init__(self, dims: HeadDims, *, r1_init: float = 1.0, r2_init: float = 2.0, eps: float = 0.01) -> None:
        super().__init__(dims, r1_init, r2_init, eps)

    def distance_bias(self, distance: Tensor) -> Tensor:
        r1, r2 = self.parameters_clamped()
        shape = (-1, *([1] * distance.dim()))
        return -r1.view(shape) * distance.abs().float().pow(r2.view(shape))


def sandwich_distance_bias(distance: Tensor, n_heads: int, d_bar: int = 128) -> Tensor:
    """Sandwich (Chi et al. 2023): (sum_{i=1}^{d_bar/2} cos(d * 10000^(-2i/d_bar)) - d_bar/2) / (8h/H)."""
    i = torch.arange(1, d_bar // 2 + 1, dtype=torch.float64, device=distance.device)
    freqs = 10000.0 ** (-2.0 * i / d_bar)
    d = distance.to(torch.float64)
    total = torch.cos(d[..., None] * freqs).sum(-1) - d_bar / 2
    heads = torch.arange(1, n_heads + 1, dtype=torch.float64, device=distance.device)
    scale = 8.0 * heads / n_heads
    return (total[None] / scale.view(-1, *([1] * d.dim()))).float()


@register_scheme("sandwich")
class Sandwich(PositionScheme):
    """Sandwich (Chi et al. 2023, arXiv 2212.10356): the parameter-free bias of sinusoidal vectors' dot product.

    `smoothed=True` uses its log-curve fit -0.825 ln(1 + d) - 0.8 divided by the same head scale 8h/H (the paper's
    smoothed ablation; it matches Sandwich only near d = 1)."""

    summary = "parameter-free sinusoidal dot-product bias (Chi 2023), d_bar = 128"
    has_bias = True

    def __init__(self, dims: HeadDims, *, d_bar: int = 128, smoothed: bool = False) -> None:
        super().__init__(dims)
        d_bar = check_int("sandwich: d_bar", d_bar, 2, 2**16)
        if d_bar % 2:
            raise ConfigError(f"sandwich: d_bar must be a positive even number, got {d_bar}")
        self.d_bar, self.smoothed = d_bar, check_bool("sandwich: smoothed", smoothed)

    def distance_bias(self, distance: Tensor) -> Tensor:
        d = distance.abs()
        if not self.smoothed:
            return sandwich_distance_bias(d, self.dims.n_heads, self.d_bar)
        heads = torch.arange(1, self.dims.n_heads + 1, dtype=torch.float32, device=d.device)
        curve = -0.825 * torch.log1p(d.float()) - 0.8
        return curve[None] / (8.0 * heads / self.dims.n_heads).view(-1, *([1] * d.dim()))


@register_scheme("fire")
class FIRE(PositionScheme):
    """FIRE (Li et al. 2023, arXiv 2310.04418): b_h(m, n) = MLP_h(psi(m - n) / (psi(max(m, L_thr)) + eps)).

    psi(x) = ln(|c x| + 1) with learnable c (init 0.1); L_thr = |L_mult| * threshold (512), learnable;
    MLP 1 -> hidden (32, ReLU) -> H. Depends on the query position m (progressive interpolation).
    """

    summary = "learned MLP of normalised log distance psi(m-n)/psi(max(m, L_thr)) (Li 2023)"
    has_bias = True
    bias_per_query = True
    relative = False
    has_query_bias_mod = True

    def __init__(
        self,
        dims: HeadDims,
        *,
        hidden: int = 32,
        c_init: float = 0.1,
        threshold: float = 512.0,
        eps: float = 1e-6,
    ) -> None:
        super().__init__(dims)
        hidden = check_int("fire: hidden", hidden, 1, 2**16)
        self.c = nn.Parameter(torch.tensor(check_range("fire: c_init", c_init, -FLOAT32_MAX, FLOAT32_MAX)))
        self.l_mult = nn.Parameter(torch.tensor(1.0))
        self.threshold = check_range("fire: threshold", threshold, 0.0, FLOAT32_MAX, low_open=True)
        self.eps = check_range("fire: eps", eps, 1e-30, 1.0, hint="it is added in fp32 to keep psi's ratio finite")
        self.mlp = nn.Sequential(nn.Linear(1, hidden), nn.ReLU(), nn.Linear(hidden, dims.n_heads))

    def _psi(self, x: Tensor) -> Tensor:
        return torch.log(torch.abs(self.c * x) + 1.0)

    def _mlp_heads(self, normalised: Tensor) -> Tensor:
        """MLP over every entry, (..., ) -> (H, ...), evaluated exactly as slope * u + intercept of u's linear piece
        (`linear_pieces`); under autograd in fp64, since weight gradients sum one term per (query, key) pair."""
        if torch.is_grad_enabled() and self.mlp[0].weight.requires_grad:
            breakpoints, slope, intercept = self.linear_pieces(torch.float64)
            piece = torch.bucketize(normalised.detach().double(), breakpoints)
            return torch.addcmul(intercept[:, piece], slope[:, piece], normalised.double()).float()
        breakpoints, slope, intercept = self.linear_pieces()
        piece = torch.bucketize(normalised, breakpoints)
        return torch.addcmul(intercept[:, piece], slope[:, piece], normalised)  # as `bias_into` computes it

    def linear_pieces(self, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor, Tensor]:
        """The MLP (1 -> hidden ReLU -> H) is piecewise linear in its input: sorted breakpoints (K,) and per-piece
        slope, intercept (H, K + 1) in `dtype`, differentiable in the MLP's weights under autograd."""
        up, down = cast(nn.Linear, self.mlp[0]), cast(nn.Linear, self.mlp[2])
        w, b = up.weight[:, 0].double(), up.bias.double()
        w2, b2 = down.weight.double(), down.bias.double()
        moving = w != 0
        breakpoints = torch.sort(-b[moving] / w[moving]).values.detach()
        if breakpoints.numel():
            inner = (breakpoints[1:] + breakpoints[:-1]) / 2
            probes = torch.cat((breakpoints[:1] - 1, inner, breakpoints[-1:] + 1))
        else:
            probes = torch.zeros(1, dtype=torch.float64, device=w.device)
        active = ((probes[:, None] * w[None, :].detach() + b[None, :].detach()) > 0).double()  # (K + 1, hidden)
        slope = (active * w[None, :]) @ w2.T  # (K + 1, H)
        intercept = (active * b[None, :]) @ w2.T + b2
        return breakpoints.to(dtype), slope.T.to(dtype).contiguous(), intercept.T.to(dtype).contiguous()

    def distance_bias(self, distance: Tensor) -> Tensor:
        """The bias for queries below the threshold, where the denominator is psi(L_thr): a function of d."""
        l_thr = self.l_mult.abs() * self.threshold
        return self._mlp_heads(self._psi(distance.float()) / (self._psi(l_thr) + self.eps))

    def distance_only(self, q_pos: Tensor) -> bool:
        return bool((q_pos.float() <= self.l_mult.abs() * self.threshold).all())

    def bias_into(self, q_pos: Tensor, k_pos: Tensor, workspace: dict[str, Tensor]) -> Tensor:
        """`bias(q_pos, k_pos)` without autograd, the same operations in buffers kept in `workspace` and reused
        from one query block to the next (no growing heap); a view of a buffer, valid until the next call."""
        if torch.is_grad_enabled() or self.distance_only(q_pos):
            return self.bias(q_pos, k_pos)
        c, n, H = q_pos.numel(), k_pos.numel(), self.dims.n_heads
        l_thr = self.l_mult.abs() * self.threshold
        device = q_pos.device
        u = _buffer(workspace, "u", c * n, torch.float32, device).view(c, n)
        torch.sub(q_pos[:, None].float(), k_pos[None, :].float(), out=u)  # the distance m - n
        u.mul_(self.c).abs_().add_(1.0).log_()  # psi(m - n)
        u.div_((self._psi(torch.maximum(q_pos.float(), l_thr)) + self.eps)[:, None])
        breakpoints, slope, intercept = self.linear_pieces()
        bias = _buffer(workspace, "bias", H * c * n, torch.float32, device).view(H, c * n)
        ends = torch.bucketize(torch.stack(torch.aminmax(u)), breakpoints)
        if ends[0] == ends[1]:
            # every pair of the block lies on one linear piece (common far from the diagonal): one multiply-add
            one = int(ends[0])
            torch.addcmul(intercept[:, one, None], slope[:, one, None], u.view(1, -1), out=bias)
            return bias.view(H, c, n)
        # int32 indices: bucketize is faster than with int64
        piece = _buffer(workspace, "piece", c * n, torch.int32, device)
        torch.bucketize(u.view(-1), breakpoints, out_int32=True, out=piece)
        torch.index_select(slope, 1, piece, out=bias)
        offset = _buffer(workspace, "offset", c * n, torch.float32, device)  # one head's intercepts at a time
        for h in range(H):
            torch.index_select(intercept[h], 0, piece, out=offset)
            torch.addcmul(offset, bias[h], u.view(-1), out=bias[h])  # intercept + slope * u
        return bias.view(H, c, n)

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        l_thr = self.l_mult.abs() * self.threshold
        if self.distance_only(q_pos):
            # every query sits below the threshold (always so when training at L_tr <= 512): evaluate the MLP
            # once per distinct distance instead of once per (query, key) pair
            return super().bias(q_pos, k_pos)
        distance = (q_pos[:, None] - k_pos[None, :]).float()
        denominator = self._psi(torch.maximum(q_pos.float(), l_thr)) + self.eps  # (Lq,)
        return self._mlp_heads(self._psi(distance) / denominator[:, None])  # (H, Lq, Lk)

    def query_bias_limit(self) -> str | None:
        hidden = cast(nn.Linear, self.mlp[0]).out_features
        if hidden > FLEX_MAX_HIDDEN:
            return f"unrolls FIRE's MLP into its score modifier up to {FLEX_MAX_HIDDEN} hidden units, not {hidden}"
        return None

    def query_bias_mod(self, layout: ScoreLayout, tau: Tensor | None) -> tuple[QueryBias, list[Tensor]]:
        """MLP_h(psi(m - n) / (psi(max(m, L_thr)) + eps)) as score-modifier code: psi(m - n) from a per-distance
        table, the denominator per query, the linear piece found by counting breakpoints below u."""
        device = layout.q_rows.device
        distance = torch.arange(layout.lo, layout.lo + layout.n_distances, device=device).float()
        psi = torch.log(torch.abs(self.c * distance) + 1.0)
        psi = F.pad(psi, (0, layout.n_table - psi.numel()))
        l_thr = self.l_mult.abs() * self.threshold
        q_rows = layout.q_rows.float()
        denominator = torch.log(torch.abs(self.c * torch.maximum(q_rows, l_thr)) + 1.0) + self.eps
        breakpoints, slope, intercept = self.linear_pieces()
        hidden = cast(nn.Linear, self.mlp[0]).out_features
        breakpoints = F.pad(breakpoints, (0, hidden - breakpoints.numel()), value=float("inf")).to(device)
        slope = F.pad(slope, (0, hidden + 1 - slope.shape[1]), mode="replicate").to(device)
        intercept = F.pad(intercept, (0, hidden + 1 - intercept.shape[1]), mode="replicate").to(device)
        if tau is not None:  # per-head temperature: folded into the pieces
            slope, intercept = slope / tau, intercept / tau
        q_shift = layout.q_rows - layout.lo
        k_rows = layout.k_rows

        def fire_bias(h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            u = psi[q_shift[q_idx] - k_rows[kv_idx]] / denominator[q_idx]
            # a count, not a binary search: nested data-dependent loads make inductor's compile time explode
            piece = torch.zeros_like(q_idx)
            for unit in range(hidden):
                piece = piece + (breakpoints[unit] < u).to(piece.dtype)
            return intercept[h, piece] + slope[h, piece] * u

        return fire_bias, [psi, denominator, slope, intercept]


def _buffer(workspace: dict[str, Tensor], name: str, numel: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """The first `numel` entries of a flat buffer on `device` in `workspace`, grown by half again when too small
    (so a causal pass, whose blocks see ever more keys, reallocates only O(log L) times)."""
    buffer = workspace.get(name)
    if buffer is None or buffer.numel() < numel or buffer.dtype != dtype or buffer.device != device:
        size = max(numel, int(1.5 * (buffer.numel() if buffer is not None else 0)))
        buffer = torch.empty(size, dtype=dtype, device=device)
        workspace[name] = buffer
    return buffer[:numel]
