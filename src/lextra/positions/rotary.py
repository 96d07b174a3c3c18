"""The rotary family: RoPE (Su et al. 2021, arXiv 2104.09864) and xPos (Sun et al. 2022, arXiv 2212.10554),
half-split or interleaved. Frequencies in fp32 as Hugging Face; angles in fp64 (accurate at 10^5 positions);
rotation in fp32 whatever the model dtype."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import torch
from torch import Tensor

from lextra.errors import ConfigError
from lextra.positions.base import HeadDims, PositionScheme, register_scheme
from lextra.positions.scaling import (
    SCALING_TYPES,
    TRAIN_LENGTH,
    RopeScaling,
    depends_on_length,
    frequencies,
    parse_rope_scaling,
    rope_inv_freq,
    scaling_type_of,
)
from lextra.validate import check_bool, check_range

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


def rotary_angles(positions: Tensor, inv_freq: Tensor) -> tuple[Tensor, Tensor]:
    """cos and sin of p * theta_k, shape (L, D/2), fp32; the product is taken in fp64 for accuracy."""
    angles = positions.to(torch.float64)[:, None] * inv_freq.to(torch.float64)[None, :]
    return torch.cos(angles).float(), torch.sin(angles).float()


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> Tensor:
    """Rotate each channel pair of x (..., L, D) by the given (L, D/2) cos/sin, in fp32; returns x's dtype."""
    xf = x.float()
    if layout == "half" and not torch.is_grad_enabled():
        return _apply_rotary_half_inference(xf, cos, sin).to(x.dtype)
    if layout == "half":
        half = x.shape[-1] // 2
        x1, x2 = xf[..., :half], xf[..., half:]
        out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    else:
        x1, x2 = xf[..., 0::2], xf[..., 1::2]
        out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
    return out.to(x.dtype)


def _apply_rotary_half_inference(x: Tensor, cos: Tensor, sin: Tensor, out: Tensor | None = None) -> Tensor:
    """`apply_rotary` for the half layout without autograd: four passes into one output (no temporaries, no cat);
    the same products and sums, so the same values. `out`: where to write them (a slice of a larger tensor)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    if out is None:
        shape = torch.broadcast_shapes(x.shape, (*cos.shape[:-1], x.shape[-1]))
        out = torch.empty(shape, dtype=x.dtype, device=x.device)
    out1, out2 = out[..., :half], out[..., half:]
    torch.mul(x1, cos, out=out1)
    out1.sub_(x2 * sin)
    torch.mul(x2, cos, out=out2)
    out2.add_(x1 * sin)
    return out


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


def build_rope_scaling(scaling: Mapping[str, Any] | str | None, train_len: int) -> RopeScaling:
    """A scheme's `scaling` option (`rope_parameters` such as {"rope_type": "yarn", "factor": 4}, a RopeScaling or a
    spec) as a RopeScaling; `original_max_position_embeddings` defaults to the training length L_tr."""
    if scaling is None:
        return RopeScaling()
    if isinstance(scaling, RopeScaling):
        return scaling
    if isinstance(scaling, str):  # a scaling spec: `yarn:4`, `yarn:4,beta_fast=16` or JSON
        scaling = parse_rope_scaling(scaling)
    if not isinstance(scaling, Mapping) or not all(isinstance(key, str) for key in scaling):
        raise ConfigError(f"rope scaling must be a dict like {{'rope_type': 'yarn', 'factor': 4}}, got {scaling!r}")
    values = dict(scaling)
    kind = scaling_type_of(values)
    if kind in SCALING_TYPES and SCALING_TYPES.get(kind).declares(TRAIN_LENGTH):
        values.setdefault(TRAIN_LENGTH, train_len)
    return RopeScaling(**values)


class RotaryFrequencies(PositionScheme):
    """Shared by the rotary schemes: base frequencies, an optional length-extension scaling (PI, NTK, dynamic
    NTK, YaRN, Llama 3, LongRoPE; see `lextra.positions.scaling`) and its cos/sin attention factor."""

    transforms_qk = True
    inv_freq: Tensor  # a buffer
    #: channels of each head that rotate (the first ones; partial rotary), the rest pass unchanged
    rotary_dim: int
    #: frequencies kept (the highest; p-RoPE), the rest set to 0 (no rotation); None keeps all
    kept_frequencies: int | None = None

    def _init_frequencies(self, base: float, scaling: Mapping[str, Any] | str | None) -> None:
        self.base = check_range(f"{self.name}: base", base, 1.0, low_open=True, hint="RoPE uses 10000")
        self.scaling = build_rope_scaling(scaling, self.dims.train_len)
        if not hasattr(self, "rotary_dim"):
            self.rotary_dim = self.dims.head_dim
        inv_freq, factor = frequencies(self.scaling, self.rotary_dim, self.base, None)
        self.register_buffer("inv_freq", self._truncated(inv_freq), persistent=False)
        self.attention_factor = factor

    def _truncated(self, inv_freq: Tensor) -> Tensor:
        """p-RoPE: the lowest frequencies (the last ones) set to 0, so their channels are not rotated."""
        kept = self.kept_frequencies
        if kept is None or kept >= inv_freq.numel():
            return inv_freq
        return torch.cat((inv_freq[:kept], inv_freq.new_zeros(inv_freq.numel() - kept)))

    def frequencies_for(self, seq_len: int | None) -> tuple[Tensor, float]:
        """Inverse frequencies and cos/sin factor for `seq_len` positions (dynamic, longrope) on the scheme's device."""
        if not depends_on_length(self.scaling):
            return self.inv_freq, self.attention_factor
        with torch.device("cpu"):
            inv_freq, factor = frequencies(self.scaling, self.rotary_dim, self.base, seq_len)
        return self._truncated(inv_freq).to(self.inv_freq.device), factor

    def angles(self, positions: Tensor, seq_len: int | None) -> tuple[Tensor, Tensor]:
        """cos and sin (L, D/2) of the scaled angles, times the scaling's attention factor."""
        inv_freq, factor = self.frequencies_for(seq_len)
        cos, sin = rotary_angles(positions, inv_freq)
        return (cos, sin) if factor == 1.0 else (cos * factor, sin * factor)


def sequence_length(q_pos: Tensor, k_pos: Tensor, seq_len: int | None) -> int | None:
    """The current length for length-dependent scalings: given, else the largest position + 1."""
    if seq_len is not None:
        return seq_len
    top = [int(p.max()) for p in (q_pos, k_pos) if p.numel()]
    return max(top) + 1 if top else None


@register_scheme("rope")
class RoPE(RotaryFrequencies):
    """Rotary position embedding (Su et al. 2021, arXiv 2104.09864): rotate each channel pair of q and k by p * theta_k.

    `scaling` applies a frequency scaling (Hugging Face's `rope_scaling`). `fraction` < 1 is partial rotary (GPT-NeoX;
    HF's `partial_rotary_factor`): the first int(D x fraction) channels rotate. `proportional` < 1 is p-RoPE (Barbero
    et al. 2024, arXiv 2410.06205): the int(p D / 2) highest frequencies are kept, the rest set to 0."""

    summary = "rotary embedding (Su 2021): q/k pairs rotated by p * base^(-2k/D); scaling, fraction, proportional"

    def __init__(
        self,
        dims: HeadDims,
        *,
        base: float = 10000.0,
        layout: str = "half",
        scaling: dict | None = None,
        fraction: float = 1.0,
        proportional: float = 1.0,
    ) -> None:
        super().__init__(dims)
        check_rotary_dims(dims.head_dim, "rope", layout)
        self.layout = layout
        fraction = check_range("rope: fraction", fraction, 0.0, 1.0, low_open=True, hint="Pythia uses 0.25")
        proportional = check_range("rope: proportional", proportional, 0.0, 1.0, low_open=True, hint="e.g. 0.75")
        if fraction < 1 and proportional < 1:
            raise ConfigError("rope: fraction (partial rotary) and proportional (p-RoPE) exclude each other; set one")
        rotary_dim = int(dims.head_dim * fraction)
        if fraction < 1 and (rotary_dim < 2 or rotary_dim % 2):
            raise ConfigError(
                f"rope: fraction {fraction} rotates {rotary_dim} of {dims.head_dim} channels; it must rotate an even "
                "number, at least 2"
            )
        if fraction < 1 and layout != "half":
            raise ConfigError("rope: partial rotary (fraction < 1) uses the NeoX half layout; drop layout=interleaved")
        self.rotary_dim = rotary_dim
        self.kept_frequencies = int(proportional * dims.head_dim // 2) if proportional < 1 else None
        self._init_frequencies(base, scaling)

    @property
    def rotates_keys_alone(self) -> bool:
        return not depends_on_length(self.scaling)

    def rotate(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, seq_len: int | None = None
    ) -> tuple[Tensor, Tensor]:
        length = sequence_length(q_pos, k_pos, seq_len)
        cos_q, sin_q = self.angles(q_pos, length)
        cos_k, sin_k = (cos_q, sin_q) if k_pos is q_pos else self.angles(k_pos, length)
        if self.rotary_dim < self.dims.head_dim:
            return self._partial(q, cos_q, sin_q), self._partial(k, cos_k, sin_k)
        return apply_rotary(q, cos_q, sin_q, self.layout), apply_rotary(k, cos_k, sin_k, self.layout)

    def _partial(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """Rotate the first `rotary_dim` channels of x, pass the rest (HF's partial rotary, e.g. Phi); without
        autograd in fp32, written into one output (no cat)."""
        R = self.rotary_dim
        if torch.is_grad_enabled() or x.dtype != torch.float32:
            return torch.cat((apply_rotary(x[..., :R], cos, sin, "half"), x[..., R:]), dim=-1)
        out = torch.empty(torch.broadcast_shapes(x.shape, (*cos.shape[:-1], x.shape[-1])), device=x.device)
        _apply_rotary_half_inference(x[..., :R], cos, sin, out=out[..., :R])
        out[..., R:] = x[..., R:]
        return out


@register_scheme("xpos")
class XPos(RotaryFrequencies):
    """xPos (Sun et al. 2022, arXiv 2212.10554): RoPE with q scaled by zeta_k^(p/B) and k by zeta_k^(-p/B).

    zeta_k = (2k + 0.4 D) / (1.4 D), B = scale_base (512). p is anchored at each call's first query position and no
    call spans more than `rotate_span` positions, so scales stay finite at any length. `decay=False` gives RoPE;
    `rotation=False` keeps the decay alone."""

    summary = "RoPE with an exponential decay zeta^((m-n)/B) (Sun 2022); finite at any length"
    log_zeta: Tensor  # a buffer

    def __init__(
        self,
        dims: HeadDims,
        *,
        base: float = 10000.0,
        scale_base: float = 512.0,
        layout: str = "half",
        decay: bool = True,
        rotation: bool = True,
        scaling: dict | None = None,
    ) -> None:
        super().__init__(dims)
        check_rotary_dims(dims.head_dim, "xpos", layout)
        self.scale_base = check_range("xpos: scale_base", scale_base, 1.0, 1e12, hint="xPos uses 512")
        self.layout = layout
        self.decay, self.rotation = check_bool("xpos: decay", decay), check_bool("xpos: rotation", rotation)
        self._init_frequencies(base, scaling)
        D = dims.head_dim
        zeta = (torch.arange(0, D, 2, dtype=torch.float64) + 0.4 * D) / (1.4 * D)
        self.register_buffer("log_zeta", torch.log(zeta), persistent=False)  # fp64: exact exponents
        # zeta_min^(span / B) stays far from fp32 limits: span = 16 B gives factors within [2e-9, 5e8]
        self.rotate_span = int(16 * self.scale_base) if self.decay else None

    def _scale(self, positions: Tensor, anchor: int, sign: float) -> Tensor:
        exponent = sign * (positions.to(torch.float64) - anchor) / self.scale_base
        return torch.exp(exponent[:, None] * self.log_zeta[None, :]).float()

    def rotate(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, seq_len: int | None = None
    ) -> tuple[Tensor, Tensor]:
        if self.rotation:
            length = sequence_length(q_pos, k_pos, seq_len)
            cos_q, sin_q = self.angles(q_pos, length)
            cos_k, sin_k = self.angles(k_pos, length)
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
