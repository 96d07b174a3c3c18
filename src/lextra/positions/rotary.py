"""The rotary family: RoPE (Su 2021) and xPos (Sun 2022), in the half-split or interleaved layout.

Frequencies are computed in fp32 exactly as Hugging Face does (`1 / base^(arange(0, D, 2) / D)`); angles
`p * theta_k` are formed in fp64 so that they stay accurate at 10^5 positions, then cos/sin are kept in fp32.
Rotation runs in fp32 whatever the model dtype, and is cast back afterwards.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from lextra.errors import ConfigError
from lextra.positions.base import HeadDims, PositionScheme, register_scheme

Layout = Literal["half", "interleaved"]
LAYOUTS = ("half", "interleaved")


def check_rotary_dims(head_dim: int, scheme: str, layout: str = "half") -> None:
    """Rotary schemes rotate pairs of channels: the head dimension must be even and the layout known."""
    if head_dim % 2:
        raise ConfigError(
            f"{scheme} rotates pairs of channels and needs an even head dimension, got {head_dim}; "
            "choose d_model and n_heads so that d_model / n_heads is even"
        )
    if layout not in LAYOUTS:
        raise ConfigError(f"{scheme}: unknown layout {layout!r}; use one of {', '.join(LAYOUTS)}")


def rope_inv_freq(head_dim: int, base: float = 10000.0, device: torch.device | None = None) -> Tensor:
    """theta_k = base^(-2k/D), k = 0..D/2-1, in fp32 (the same arithmetic as Hugging Face's default RoPE)."""
    exponent = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim
    return 1.0 / (base**exponent)


def rotary_angles(positions: Tensor, inv_freq: Tensor) -> tuple[Tensor, Tensor]:
    """cos and sin of p * theta_k, shape (L, D/2), fp32; the product is taken in fp64 for accuracy."""
    angles = positions.to(torch.float64)[:, None] * inv_freq.to(torch.float64)[None, :]
    return torch.cos(angles).float(), torch.sin(angles).float()


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> Tensor:
    """Rotate each channel pair of x (..., L, D) by the given (L, D/2) cos/sin, in fp32; returns x's dtype."""
    xf = x.float()
    if layout == "half":
        half = x.shape[-1] // 2
        x1, x2 = xf[..., :half], xf[..., half:]
        out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    else:
        x1, x2 = xf[..., 0::2], xf[..., 1::2]
        out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
    return out.to(x.dtype)


def layout_permutation(head_dim: int, source: str, target: str) -> Tensor:
    """Index `perm` with `w_target = w_source[perm]` for the rows of one head's q or k projection."""
    check_rotary_dims(head_dim, "layout conversion", source)
    check_rotary_dims(head_dim, "layout conversion", target)
    half = head_dim // 2
    # pair k occupies channels (k, k + D/2) in "half" and (2k, 2k + 1) in "interleaved"
    pair_channels = {
        "half": torch.stack((torch.arange(half), torch.arange(half) + half), dim=1),
        "interleaved": torch.arange(head_dim).view(half, 2),
    }
    perm = torch.empty(head_dim, dtype=torch.long)
    perm[pair_channels[target].flatten()] = pair_channels[source].flatten()
    return perm


def convert_qk_weight(weight: Tensor, n_heads: int, source: str, target: str) -> Tensor:
    """Permute the output rows of a q or k projection (n_heads * D, d_in) from one rotary layout to the other."""
    head_dim = weight.shape[0] // n_heads
    perm = layout_permutation(head_dim, source, target)
    rows = weight.view(n_heads, head_dim, *weight.shape[1:])
    return rows[:, perm].reshape(weight.shape)


@register_scheme("rope")
class RoPE(PositionScheme):
    """Rotary position embedding (Su et al. 2021): rotate each channel pair of q and k by p * theta_k."""

    summary = "rotary embedding (Su 2021): q/k pairs rotated by p * base^(-2k/D)"
    transforms_qk = True

    def __init__(self, dims: HeadDims, *, base: float = 10000.0, layout: str = "half") -> None:
        super().__init__(dims)
        check_rotary_dims(dims.head_dim, "rope", layout)
        self.base = float(base)
        self.layout = layout
        self.register_buffer("inv_freq", rope_inv_freq(dims.head_dim, self.base), persistent=False)

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        cos_q, sin_q = rotary_angles(q_pos, self.inv_freq)
        cos_k, sin_k = (cos_q, sin_q) if k_pos is q_pos else rotary_angles(k_pos, self.inv_freq)
        return apply_rotary(q, cos_q, sin_q, self.layout), apply_rotary(k, cos_k, sin_k, self.layout)


@register_scheme("xpos")
class XPos(PositionScheme):
    """xPos (Sun et al. 2022): RoPE with q scaled by zeta_k^(p/B) and k by zeta_k^(-p/B).

    zeta_k = (2k + 0.4 D) / (1.4 D), B = scale_base (512), so the logit carries zeta_k^((m - n)/B).
    torchscale centres p on the sequence; we anchor p at the first query position of each call instead and
    the fast backends never let one call span more than `rotate_span` query positions, so scales stay within
    zeta^(+-span/B) and are finite at any length (the far-past keys underflow to 0, as their true weight does).
    `decay=False` gives RoPE exactly; `rotation=False` keeps the decay alone (the paper's ablation).
    """

    summary = "RoPE with an exponential decay zeta^((m-n)/B) (Sun 2022); finite at any length"
    transforms_qk = True

    def __init__(
        self,
        dims: HeadDims,
        *,
        base: float = 10000.0,
        scale_base: float = 512.0,
        layout: str = "half",
        decay: bool = True,
        rotation: bool = True,
    ) -> None:
        super().__init__(dims)
        check_rotary_dims(dims.head_dim, "xpos", layout)
        if scale_base <= 0:
            raise ConfigError(f"xpos: scale_base must be positive, got {scale_base}")
        self.base, self.scale_base, self.layout = float(base), float(scale_base), layout
        self.decay, self.rotation = bool(decay), bool(rotation)
        D = dims.head_dim
        self.register_buffer("inv_freq", rope_inv_freq(D, self.base), persistent=False)
        zeta = (torch.arange(0, D, 2, dtype=torch.float64) + 0.4 * D) / (1.4 * D)
        self.register_buffer("log_zeta", torch.log(zeta), persistent=False)  # fp64: exact exponents
        # zeta_min^(span / B) stays far from fp32 limits: span = 16 B gives factors within [2e-9, 5e8]
        self.rotate_span = int(16 * self.scale_base) if self.decay else None

    def _scale(self, positions: Tensor, anchor: int, sign: float) -> Tensor:
        exponent = sign * (positions.to(torch.float64) - anchor) / self.scale_base
        return torch.exp(exponent[:, None] * self.log_zeta[None, :]).float()

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        if self.rotation:
            cos_q, sin_q = rotary_angles(q_pos, self.inv_freq)
            cos_k, sin_k = rotary_angles(k_pos, self.inv_freq)
        else:
            half = self.dims.head_dim // 2
            cos_q = torch.ones(q_pos.numel(), half, device=q.device)
            cos_k = torch.ones(k_pos.numel(), half, device=k.device)
            sin_q, sin_k = torch.zeros_like(cos_q), torch.zeros_like(cos_k)
        if self.decay:
            anchor = int(q_pos[0]) if q_pos.numel() else 0
            sq, sk = self._scale(q_pos, anchor, 1.0), self._scale(k_pos, anchor, -1.0)
            cos_q, sin_q, cos_k, sin_k = cos_q * sq, sin_q * sq, cos_k * sk, sin_k * sk
        return apply_rotary(q, cos_q, sin_q, self.layout), apply_rotary(k, cos_k, sin_k, self.layout)


__all__ = [
    "RoPE",
    "XPos",
    "apply_rotary",
    "convert_qk_weight",
    "layout_permutation",
    "rope_inv_freq",
    "rotary_angles",
]
