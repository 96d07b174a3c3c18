"""Schemes that add position to the token embedding (sinusoidal, learned) and NoPE, which adds nothing."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from lextra.errors import LengthError
from lextra.positions.base import HeadDims, PositionScheme, register_scheme
from lextra.validate import FLOAT32_MAX, check_int, check_range


@register_scheme("nope")
class NoPE(PositionScheme):
    """No position encoding: causal attention alone carries order (Kazemnejad et al. 2023, arXiv 2305.19466)."""

    summary = "no position information; order comes from the causal mask alone"

    def __init__(self, dims: HeadDims) -> None:
        super().__init__(dims)


def sinusoidal_table(positions: Tensor, d_model: int, base: float = 10000.0) -> Tensor:
    """PE[p, 2i] = sin(p / base^(2i/d)), PE[p, 2i+1] = cos(...) (Vaswani 2017), computed in fp64, fp32 out."""
    i = torch.arange(0, d_model, 2, dtype=torch.float64, device=positions.device)
    angles = positions.to(torch.float64)[:, None] * base ** (-i / d_model)[None, :]
    table = torch.empty(positions.numel(), d_model, dtype=torch.float64, device=positions.device)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return table.float()


@register_scheme("sinusoidal")
class Sinusoidal(PositionScheme):
    """Fixed sinusoidal absolute embedding (Vaswani et al. 2017, arXiv 1706.03762), scaled by d_model^-0.5 by
    default (token embeddings lack Vaswani's sqrt(d_model) factor); `scale=1.0` adds the unscaled table."""

    summary = "fixed sin/cos absolute embedding added to the tokens (Vaswani 2017)"
    relative = False
    adds_embedding = True

    def __init__(self, dims: HeadDims, *, base: float = 10000.0, scale: float | None = None) -> None:
        super().__init__(dims)
        self.base = check_range("sinusoidal: base", base, 1.0, low_open=True)
        self.scale = dims.d_model**-0.5 if scale is None else check_range("sinusoidal: scale", scale, 0.0, FLOAT32_MAX)

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        return x + (self.scale * sinusoidal_table(positions, self.dims.d_model, self.base)).to(x.dtype)


@register_scheme("learned")
class Learned(PositionScheme):
    """A learned table of `max_len` absolute position vectors (GPT-2); undefined beyond it, so it fails."""

    summary = "learned absolute position table (GPT-2); errors beyond max_len"
    relative = False
    adds_embedding = True

    def __init__(self, dims: HeadDims, *, max_len: int | None = None) -> None:
        super().__init__(dims)
        self.max_len = dims.train_len if max_len is None else check_int("learned: max_len", max_len, 1, 2**20)
        self.table = nn.Embedding(self.max_len, dims.d_model)
        nn.init.normal_(self.table.weight, std=0.02)

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        top = int(positions.max()) if positions.numel() else 0
        if top >= self.max_len or (positions.numel() and int(positions.min()) < 0):
            raise LengthError(
                f"learned position table has {self.max_len} entries but the input reaches position {top}; "
                f"use inputs of at most {self.max_len} tokens, train with a larger max_len, "
                "or pick a relative scheme (e.g. alibi, rope) to extrapolate"
            )
        return x + self.table(positions).to(x.dtype)
