"""Attention pieces a layer of a plan may add (`lextra.attention.plan`): each a registry entry with its options.

- `qknorm`: RMSNorm over each head's q and k before the position transform (Qwen3; `weight=false`: Llama 4's L2).
- `gate`: a sigmoid gate on each head's output from the layer input (Qiu et al. 2025, arXiv 2505.06708):
  `elementwise` (the paper's G1) or `headwise`.
- `sinks`: one learned logit per head in every softmax's denominator (gpt-oss).
- `softcap:C`: scores become tanh(s / C) C before the mask (Gemma 2).
- `temp_tuning`: Llama 4's temperature tuning, the query at p times 1 + beta log1p(floor((p + 1) / gamma)).
- `logn:KIND`: the layer's log-n scaling (`none`, `qwen`, `ssmax`).
- `diffattn`: differential attention (`lextra.attention.diffattn`), through the `attend` hook."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from lextra.errors import ConfigError
from lextra.positions.base import HeadDims, PositionScheme
from lextra.positions.logn import check_log_scaling
from lextra.registry import Registry
from lextra.validate import check_bool, check_positive

#: `lextra.attention.attention`'s signature: q, k, v and its keyword options -> the heads' output
AttentionCall = Callable[..., Tensor]


class AttentionPiece(nn.Module):
    """Base class of the `PIECES` registry: built with the layer's `HeadDims` and its options, applied through the hooks
    below in the plan's order; each hook's default leaves attention as it is. The hooks act outside the kernel or hand
    it a value every backend takes, so a piece runs in every backend."""

    name: ClassVar[str] = "piece"
    summary: ClassVar[str] = ""
    positional: ClassVar[str | None] = None
    #: `attend` applies its own position transform (diffattn): the layer and the KV cache leave q and k unrotated
    transforms_in_attend: ClassVar[bool] = False
    #: `attend` computes attention without a softmax (stick-breaking): analyses that read softmax weights refuse it
    replaces_softmax: ClassVar[bool] = False

    def __init__(self, dims: HeadDims) -> None:
        super().__init__()
        self.dims = dims

    def transform_qk(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """q (B, H, Lq, D) and k (B, H, Lk, Dk) before the position transform."""
        return q, k

    def query_scale(self, positions: Tensor) -> Tensor | None:
        """A factor (Lq,) or (H, Lq) on the queries at these positions, or None."""
        return None

    def transform_output(self, x: Tensor, out: Tensor) -> Tensor:
        """The heads' output (B, H, L, D) before the output projection; x (B, L, d_model) is the layer input."""
        return out

    def attend(self, q: Tensor, k: Tensor, v: Tensor, *, call: AttentionCall, layer: int, **options: Any) -> Tensor:
        """The heads' output (B, H, Lq, D): `call(q, k, v, **options)` is the layer's attention (the next piece's
        `attend`, last `lextra.attention.attention`); `layer` is the 0-based depth. The default calls it once."""
        return call(q, k, v, **options)

    @property
    def sink_logits(self) -> Tensor | None:
        """One logit per head (H,) in every softmax's denominator, or None."""
        return None

    @property
    def score_cap(self) -> float | None:
        """Scores become tanh(s / cap) cap before the mask, or None."""
        return None

    @property
    def log_scaling(self) -> str | None:
        """The layer's log-n scaling (`none`, `qwen`, `ssmax`), or None."""
        return None

    @classmethod
    def check_layer(cls, scheme: type[PositionScheme], mask: str) -> None:
        """Refuse (ConfigError) a layer whose scheme class or mask spec the piece is undefined with; any by default."""

    def mix_inputs(
        self, x: Tensor, q: Tensor, k: Tensor, v: Tensor, state: dict[str, Tensor] | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """q, k, v (B, H, L, D) right after the projections, from the layer input x (B, L, d_model); `state` is the
        layer's piece state in a KV cache (what the piece carries from step to step), None without a cache."""
        return q, k, v

    def log_forget_gates(self, x: Tensor) -> Tensor | None:
        """Log forget gates (B, H, L) fp32 whose cumulative sums bias the scores (FoX), or None."""
        return None


#: the hooks of which a layer takes one value (two pieces giving one are refused)
SINGLE_VALUED = ("sink_logits", "score_cap", "log_scaling")


def runs_the_call(piece: type[AttentionPiece] | AttentionPiece) -> bool:
    """Whether a piece runs the layer's attention call itself (overrides `attend`: diffattn, stickbreak)."""
    kind = piece if isinstance(piece, type) else type(piece)
    return kind.attend is not AttentionPiece.attend


def check_one_caller(names: Sequence[str], kinds: Sequence[type[AttentionPiece]]) -> None:
    """Refuse a layer with two pieces that each run the attention call (their hooks would nest unchecked)."""
    callers = [name for name, kind in zip(names, kinds, strict=True) if runs_the_call(kind)]
    if len(callers) > 1:
        raise ConfigError(
            f"a layer takes one attention piece that runs the attention call itself; {callers[0]!r} and "
            f"{callers[1]!r} both do: put them in different layers"
        )


def attend_through(pieces: Sequence[AttentionPiece], call: AttentionCall, layer: int) -> AttentionCall:
    """`call` (the layer's attention) run through the pieces' `attend` hooks, the first piece outermost."""
    for piece in reversed(pieces):
        call = partial(piece.attend, call=call, layer=layer)
    return call


PIECES: Registry[AttentionPiece] = Registry(
    "attention piece", modules=("lextra.attention.diffattn", "lextra.attention.fox", "lextra.attention.stickbreak")
)


def head_rms_norm(x: Tensor, weight: Tensor | None, eps: float) -> Tensor:
    """RMSNorm over the last dimension in fp32, cast back, then the weight (Qwen3RMSNorm's order)."""
    xf = x.float()
    normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return normed if weight is None else weight * normed


@PIECES.register("qknorm")
class QKNorm(AttentionPiece):
    """RMSNorm per head on q and k before the position transform (Qwen3, OLMo 2; Llama 4 without weight)."""

    summary = "RMSNorm per head on q and k (Qwen3; weight=false: Llama 4's L2 norm)"

    def __init__(self, dims: HeadDims, *, eps: float = 1e-6, weight: bool = True) -> None:
        super().__init__(dims)
        self.eps = check_positive("qknorm: eps", eps)
        self.learned = check_bool("qknorm: weight", weight)
        self.q_weight = nn.Parameter(torch.ones(dims.head_dim)) if weight else None
        self.k_weight = nn.Parameter(torch.ones(dims.head_dim)) if weight else None

    def transform_qk(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        return head_rms_norm(q, self.q_weight, self.eps), head_rms_norm(k, self.k_weight, self.eps)


GATE_KINDS = ("elementwise", "headwise")


@PIECES.register("gate")
class OutputGate(AttentionPiece):
    """out_h <- out_h * sigmoid(x W_g) per head (elementwise: per channel; headwise: one per head), x the layer
    input (Qiu et al. 2025, arXiv 2505.06708)."""

    summary = "sigmoid gate on each head's output from the layer input (Qiu 2025); kind elementwise|headwise"
    positional = "kind"

    def __init__(self, dims: HeadDims, *, kind: str = "elementwise") -> None:
        super().__init__(dims)
        if kind not in GATE_KINDS:
            raise ConfigError(f"gate: kind must be one of {', '.join(GATE_KINDS)}, got {kind!r}")
        self.kind = kind
        width = dims.head_dim if kind == "elementwise" else 1
        self.proj = nn.Linear(dims.d_model, dims.n_heads * width, bias=False)

    def transform_output(self, x: Tensor, out: Tensor) -> Tensor:
        """x (B, L, d_model), out (B, H, L, D) -> gated out (B, H, L, D)."""
        B, L, _ = x.shape
        score = self.proj(x).view(B, L, self.dims.n_heads, -1).transpose(1, 2)
        return out * torch.sigmoid(score).to(out.dtype)


@PIECES.register("sinks")
class Sinks(AttentionPiece):
    """One learned logit per head in each softmax's denominator (gpt-oss), zero-initialised."""

    summary = "learned attention sink: one logit per head in the softmax denominator (gpt-oss)"

    def __init__(self, dims: HeadDims) -> None:
        super().__init__(dims)
        self.logits = nn.Parameter(torch.zeros(dims.n_heads))

    @property
    def sink_logits(self) -> Tensor:
        return self.logits


@PIECES.register("softcap")
class Softcap(AttentionPiece):
    """Scores capped as tanh(s / cap) cap before the mask (Gemma 2's attention logit softcapping, cap 50)."""

    summary = "logit softcapping: tanh(s / cap) * cap (Gemma 2, cap 50)"
    positional = "cap"

    def __init__(self, dims: HeadDims, *, cap: float = 50.0) -> None:
        super().__init__(dims)
        self.cap = check_positive("softcap: cap", cap)

    @property
    def score_cap(self) -> float:
        return self.cap


def temperature_tuning_scale(positions: Tensor, beta: float, gamma: float) -> Tensor:
    """Llama 4's query scale 1 + beta log1p(floor((p + 1) / gamma)) per position, fp32 (Lq,)."""
    return torch.log1p(torch.floor((positions.float() + 1.0) / gamma)) * beta + 1.0


@PIECES.register("temp_tuning")
class TemperatureTuning(AttentionPiece):
    """Queries scaled by 1 + beta log1p(floor((p + 1) / gamma)) (Llama 4's attn_temperature_tuning on its NoPE
    layers; the scaling of Nakanishi 2025, arXiv 2501.19399, floored in steps of gamma)."""

    summary = "Llama 4's query temperature 1 + beta log1p(floor((p+1)/gamma)); beta 0.1, gamma 8192"
    positional = "beta"

    def __init__(self, dims: HeadDims, *, beta: float = 0.1, gamma: float = 8192.0) -> None:
        super().__init__(dims)
        self.beta = float(beta)
        if not math.isfinite(self.beta) or self.beta < 0:
            raise ConfigError(f"temp_tuning: beta must be a finite number >= 0, got {beta!r}")
        self.gamma = check_positive("temp_tuning: gamma", gamma)

    def query_scale(self, positions: Tensor) -> Tensor:
        return temperature_tuning_scale(positions, self.beta, self.gamma)


@PIECES.register("logn")
class LogN(AttentionPiece):
    """The layer's log-n scaling: `qwen` (x log_{L_tr} i past L_tr) or `ssmax` (learned s_h ln n)."""

    summary = "the layer's log-n scaling: qwen (x log_{L_tr} i past L_tr) or ssmax (learned s_h ln n)"
    positional = "kind"

    def __init__(self, dims: HeadDims, *, kind: str = "qwen") -> None:
        super().__init__(dims)
        self.kind = check_log_scaling(kind, what="logn: kind")

    @property
    def log_scaling(self) -> str:
        return self.kind


def piece_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """A piece's options, checked by building it once on tiny dims (bad values raise a ConfigError)."""
    PIECES.build(name, HeadDims(1, 2, 2, 2), **options)
    return options
