"""The Forgetting Transformer's attention piece `fox` (Lin et al. 2025, arXiv 2503.02130; code
zhixuan-lin/forgetting-transformer, `ForgettingAttentionLayer`).

A per-head forget gate f_t = sigmoid(w_h . x_t + b_h) adds D_ij = sum_{l=j+1..i} log f_l to score (i, j), carried
as c at the queries and keys (`lextra.attention.forget_bias`); the authors use no position encoding (`nope+fox`).
`pro=true` is the authors' "Pro" block, each part also an option of its own, as in their `pro_*` configs:
- `kshift` / `vshift`: k_t <- a_t k_{t-1} + (1 - a_t) k_t, a_t = sigmoid(w_h . x_t) per head (`ShiftLinear`);
- `qknorm`: RMSNorm of each head's q and k, weight per head and channel (eps 1e-5);
- `onorm`: RMSNorm of each head's output (eps 1e-6), then
- `ogate`: the output times sigmoid(W_g x) per channel.
Under a KV cache the piece keeps c and the last unshifted k and v in its piece state."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lextra.attention.forget_bias import FULL_MASK_REASON, ForgetBias, bias_scheme_reason, cumulative_log_gates
from lextra.attention.pieces import PIECES, AttentionPiece
from lextra.errors import ConfigError
from lextra.positions.base import HeadDims, PositionScheme
from lextra.validate import check_bool

#: the authors' epsilons: QK-norm (`GroupNorm` default) and the output norm (`norm_eps`)
QK_EPS = 1e-5
OUT_EPS = 1e-6


def group_rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """RMSNorm over each head's channels of x (B, H, L, D) in fp32 with a (H, D) weight, cast back (the authors'
    `group_norm_ref` with `is_rms_norm`)."""
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()[:, None, :]
    return normed.to(x.dtype)


def token_shift(x: Tensor, alpha: Tensor, previous: Tensor | None) -> Tensor:
    """alpha_t x_{t-1} + (1 - alpha_t) x_t along L of x (B, H, L, D), alpha (B, H, L) in fp32; x_{-1} is
    `previous` (B, H, D), 0 when None (the authors' `token_shift`)."""
    first = torch.zeros_like(x[..., :1, :]) if previous is None else previous[..., None, :].to(x.dtype)
    before = torch.cat((first, x[..., :-1, :]), dim=-2)
    a = alpha[..., None]
    return (a * before.float() + (1.0 - a) * x.float()).to(x.dtype)


@PIECES.register("fox")
class ForgetGate(AttentionPiece):
    """FoX's data-dependent forget gate (and, with `pro`, the Pro block's shifts, norms and output gate)."""

    summary = "Forgetting Transformer (Lin 2025): learned forget gate, score += sum log f; pro=true: Pro block"
    positional = "pro"

    def __init__(
        self,
        dims: HeadDims,
        *,
        pro: bool = False,
        kshift: bool | None = None,
        vshift: bool | None = None,
        qknorm: bool | None = None,
        ogate: bool | None = None,
        onorm: bool | None = None,
    ) -> None:
        super().__init__(dims)
        self.pro = check_bool("fox: pro", pro)
        parts = {"kshift": kshift, "vshift": vshift, "qknorm": qknorm, "ogate": ogate, "onorm": onorm}
        on = {name: self.pro if value is None else check_bool(f"fox: {name}", value) for name, value in parts.items()}
        H, D, d = dims.n_heads, dims.head_dim, dims.d_model
        self.fgate = nn.Linear(d, H, bias=True)
        nn.init.zeros_(self.fgate.bias)
        self.k_shift = nn.Linear(d, H, bias=False) if on["kshift"] else None
        self.v_shift = nn.Linear(d, H, bias=False) if on["vshift"] else None
        self.q_norm = nn.Parameter(torch.ones(H, D)) if on["qknorm"] else None
        self.k_norm = nn.Parameter(torch.ones(H, D)) if on["qknorm"] else None
        self.out_norm = nn.Parameter(torch.ones(H, D)) if on["onorm"] else None
        self.ogate = nn.Linear(d, H * D, bias=False) if on["ogate"] else None

    @classmethod
    def check_layer(cls, scheme: type[PositionScheme], mask: str) -> None:
        """The forget bias is defined for causal attention (or a causal subset of it), beside RoPE or no position
        encoding: a scheme with its own additive bias or a full mask is refused (`forget_reason`, at call time)."""
        if scheme.has_bias:
            raise ConfigError(bias_scheme_reason(scheme.name))
        if mask.split(":")[0].split(",")[0] == "full":
            raise ConfigError(FULL_MASK_REASON)

    def _alpha(self, proj: nn.Linear, x: Tensor) -> Tensor:
        """The shift weight sigmoid(w_h . x_t) as (B, H, L) fp32."""
        return torch.sigmoid(proj(x).float()).transpose(1, 2)

    def mix_inputs(
        self, x: Tensor, q: Tensor, k: Tensor, v: Tensor, state: dict[str, Tensor] | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The key and value shifts on the projections (B, H, L, D), continuing the cached last k and v."""
        if self.k_shift is not None:
            raw = k
            k = token_shift(k, self._alpha(self.k_shift, x), None if state is None else state.get("fox.k"))
            if state is not None:
                state["fox.k"] = raw[..., -1, :].detach()
        if self.v_shift is not None:
            raw = v
            v = token_shift(v, self._alpha(self.v_shift, x), None if state is None else state.get("fox.v"))
            if state is not None:
                state["fox.v"] = raw[..., -1, :].detach()
        return q, k, v

    def log_forget_gates(self, x: Tensor) -> Tensor:
        """log f_t = logsigmoid(w_h . x_t + b_h) as (B, H, L) fp32."""
        return F.logsigmoid(self.fgate(x).float()).transpose(1, 2)

    def transform_qk(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        if self.q_norm is None or self.k_norm is None:
            return q, k
        return group_rms_norm(q, self.q_norm, QK_EPS), group_rms_norm(k, self.k_norm, QK_EPS)

    def transform_output(self, x: Tensor, out: Tensor) -> Tensor:
        """out (B, H, L, D) normalised per head, then gated by sigmoid(W_g x) (the parts the piece has)."""
        if self.out_norm is not None:
            out = group_rms_norm(out, self.out_norm, OUT_EPS)
        if self.ogate is not None:
            B, L, _ = x.shape
            gate = self.ogate(x).view(B, L, self.dims.n_heads, -1).transpose(1, 2)
            out = out * torch.sigmoid(gate.float()).to(out.dtype)
        return out


def forget_inputs(
    pieces: list[AttentionPiece],
    x: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    state: dict[str, Tensor] | None,
    rows: int | None = None,
) -> tuple[Tensor, Tensor, Tensor, ForgetBias | None]:
    """q, k, v after each content-dependent piece's `mix_inputs`, and the call's forget bias (c at the queries,
    the last `rows` when given, and at every key), or None; `state` is the layer's piece state in a KV cache."""
    gates = None
    for piece in pieces:
        q, k, v = piece.mix_inputs(x, q, k, v, state)
        gate = piece.log_forget_gates(x)
        if gate is not None:
            if gates is not None:
                raise ConfigError("a layer takes one forget gate; drop the second fox piece")
            gates = gate
    if gates is None:
        return q, k, v, None
    held = None if state is None else state.get("fox.c")
    c = cumulative_log_gates(gates, None if held is None or held.shape[-1] == 0 else held[..., -1])
    keys = c if held is None else torch.cat((held, c), dim=-1)
    if state is not None:
        state["fox.c"] = keys.detach()
    queries = c if rows is None else c[..., -rows:]
    return q, k, v, ForgetBias(queries, keys)


def piece_state_rows(state: dict[str, Any], repeats: int) -> dict[str, Any]:
    """A cache's piece state with every batch row repeated `repeats` times (`KVCache.repeat_rows`)."""
    return {name: t.repeat_interleave(repeats, dim=0) for name, t in state.items()}
