"""Attention resolution (Sun et al. 2022, arXiv 2212.10554): how sharply the expected score s[n] falls with
distance n.

    R(s) = sum_{i=0}^{N-1} e^{s[i]} (e^{s[i]} - e^{s[i+1]}) / (sum_{i=0}^{N-1} e^{s[i]})^2,   e^{s[N]} := 0

over the N distances an input shows (under a mask, its visible prefix); 0 < R <= 1. Empirical: s_hat[n] is the
mean pre-softmax logit over visible pairs at distance n; theoretical: the expected logit from the scheme alone."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from lextra.analysis.capture import DEFAULT_BLOCK, batches, layer_attention
from lextra.attention import build_mask
from lextra.attention.masks import UNBOUNDED, Mask
from lextra.devices import module_device
from lextra.model import GPT
from lextra.positions import PositionScheme
from lextra.serialize import Serializable, options

KEY_BLOCK = 4096


def resolution(s: Tensor) -> float:
    """R(s) of a score vector s[0..N-1] (by distance), with e^{s[N]} = 0; computed shifted by max(s), in fp64."""
    s = (s.detach() if isinstance(s, Tensor) else torch.as_tensor(s, device="cpu")).to(torch.float64).flatten()
    if s.numel() == 0 or not bool(torch.isfinite(s).all()):
        raise ValueError("resolution needs a non-empty vector of finite scores")
    a = torch.exp(s - s.max())
    following = torch.cat((a[1:], a.new_zeros(1)))
    return float((a * (a - following)).sum() / a.sum() ** 2)


class DistanceMeans:
    """Running means of scores by distance d = m - n >= 0 over allowed pairs: sums (H, N) and counts (N,)."""

    def __init__(self, heads: int, length: int, device: torch.device | str = "cpu") -> None:
        self.sums = torch.zeros(heads, length, dtype=torch.float64, device=device)
        self.counts = torch.zeros(length, dtype=torch.float64, device=device)

    def add(self, scores: Tensor, distance: Tensor, allowed: Tensor) -> None:
        """Add scores (B, H, c, n) of pairs at `distance` (c, n) where `allowed` (c, n) and d >= 0."""
        keep = allowed & (distance >= 0)
        d = distance[keep]
        values = scores[..., keep].double().sum(0)  # (H, M), summed over the batch
        self.sums.index_add_(1, d, values)
        self.counts.index_add_(0, d, torch.full_like(d, scores.shape[0], dtype=torch.float64))

    def means(self) -> Tensor:
        """(H, N) means; NaN at distances no allowed pair reached."""
        return torch.where(self.counts > 0, self.sums / self.counts.clamp(min=1), torch.nan)


def visible_prefix(s: Tensor) -> int:
    """Number of leading distances with a defined (finite) score: R runs over 0..N_vis - 1."""
    finite = torch.isfinite(s).reshape(-1, s.shape[-1]).all(0)
    hidden = (~finite).nonzero()
    return int(hidden[0]) if hidden.numel() else int(finite.numel())


@dataclass
class ResolutionSummary(Serializable):
    """What is saved of a resolution result: R per model, layer and head, and the averaged score curves."""

    r: float = field(metadata=options(key="R"))
    visible: int
    r_per_layer: list[float] = field(metadata=options(key="R_per_layer"))
    r_per_head: list[list[float]] = field(metadata=options(key="R_per_head"))
    r_head_mean: float = field(metadata=options(key="R_head_mean"))
    s: list[float]
    s_per_layer: list[list[float]]


@dataclass
class ResolutionResult:
    """Scores by distance and their resolution: s (N,), s_per_layer (layers, N), s_per_head (layers, H, N)."""

    s_per_head: Tensor
    visible: int

    @property
    def s_per_layer(self) -> Tensor:
        """Scores over the visible distances averaged over heads, (layers, N_vis)."""
        return self.s_per_head[..., : self.visible].mean(-2)

    @property
    def s(self) -> Tensor:
        """Scores over the visible distances averaged over layers and heads, (N_vis,)."""
        return self.s_per_layer.mean(0)

    @property
    def r(self) -> float:
        """The headline resolution: R of the layer- and head-averaged scores."""
        return resolution(self.s)

    def r_per_layer(self) -> list[float]:
        """R of each layer's head-averaged scores."""
        return [resolution(row) for row in self.s_per_layer]

    def r_per_head(self) -> list[list[float]]:
        """R of each (layer, head) score curve."""
        return [[resolution(row[: self.visible]) for row in layer] for layer in self.s_per_head]

    def summary(self) -> ResolutionSummary:
        """R, per-layer and per-head R (and their mean), and the averaged score curves, as plain numbers."""
        per_head = self.r_per_head()
        return ResolutionSummary(
            r=self.r,
            visible=self.visible,
            r_per_layer=self.r_per_layer(),
            r_per_head=per_head,
            r_head_mean=sum(map(sum, per_head)) / sum(map(len, per_head)),
            s=self.s.tolist(),
            s_per_layer=self.s_per_layer.tolist(),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (`summary().to_dict()`)."""
        return self.summary().to_dict()


def _result(s_per_head: Tensor) -> ResolutionResult:
    """Wrap (layers, H, N) scores, visible up to the first distance no pair reached."""
    return ResolutionResult(s_per_head, visible_prefix(s_per_head))


@torch.no_grad()
def empirical_scores(
    model: GPT,
    texts: Tensor,
    mask: str | Mask | None = "causal",
    *,
    batch_size: int = 4,
    block_size: int = DEFAULT_BLOCK,
) -> ResolutionResult:
    """s_hat[layer, head, n] = mean logit at distance n over all visible pairs of `texts` (T, N)."""
    model.eval()
    N, device = texts.shape[1], module_device(model)
    accumulators = [DistanceMeans(model.config.n_head, N, device) for _ in range(model.config.n_layer)]
    for batch in batches(texts, batch_size):
        for view in layer_attention(model, batch, mask, block_size=block_size):
            for block in view.blocks():
                accumulators[view.layer].add(block.logits, block.distance, block.allowed)
    return _result(torch.stack([acc.means() for acc in accumulators]))


def _probe_scores(scheme: PositionScheme, q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """Expected logit (H, c, n) for queries at q_pos and keys at k_pos from the scheme alone (see below)."""
    H, D = scheme.dims.n_heads, scheme.dims.head_dim
    c, n, device = q_pos.numel(), k_pos.numel(), q_pos.device
    total = torch.zeros(H, c, n, device=device)
    if scheme.adds_embedding:
        zeros_q = torch.zeros(1, c, scheme.dims.d_model, device=device)
        zeros_k = torch.zeros(1, n, scheme.dims.d_model, device=device)
        eq = scheme.embed(zeros_q, q_pos)[0].float().view(c, H, D).transpose(0, 1)
        ek = scheme.embed(zeros_k, k_pos)[0].float().view(n, H, D).transpose(0, 1)
        total = total + eq @ ek.transpose(-1, -2) / math.sqrt(D)
    if scheme.transforms_qk:
        Dk = scheme.key_dim()
        eye = torch.eye(D, device=device)
        q = eye[None, :, None, :].expand(1, D, c, D)  # probe j is the j-th "head"
        k = eye[:, :Dk][None, :, None, :].expand(1, D, n, Dk)
        qr, kr = scheme.rotate(q, k, q_pos, k_pos)
        total = total + (qr.float() @ kr.float().transpose(-1, -2)).sum(1) / math.sqrt(D)
    if scheme.has_bias:
        total = total + scheme.bias(q_pos, k_pos).float()
    return total


def _visible_counts(mask: Mask, length: int, block_size: int, device: torch.device | str = "cpu") -> Tensor:
    """Allowed (query, key) pairs per distance 0..length-1 for positions 0..length-1."""
    distance = torch.arange(length, device=device)
    by_distance = mask.allowed_distance(distance)
    if by_distance is not None:
        return torch.where(by_distance, (length - distance).double(), 0.0)
    counts = torch.zeros(length, dtype=torch.float64, device=device)
    for start in range(0, length, block_size):
        qp = torch.arange(start, min(start + block_size, length), device=device)
        first, last = mask.key_range(int(qp[0]), int(qp[-1]))
        lo = 0 if first <= -UNBOUNDED else max(0, first)
        hi = length if last >= UNBOUNDED else min(length, last + 1)
        kp = torch.arange(lo, hi, device=device)
        d = qp[:, None] - kp[None, :]
        keep = mask.allowed(qp, kp) & (d >= 0)
        counts.index_add_(0, d[keep], keep[keep].double())
    return counts


@torch.no_grad()
def theoretical_scores(
    scheme: PositionScheme, length: int, mask: str | Mask | None = "causal", *, block_size: int = DEFAULT_BLOCK
) -> Tensor:
    """Expected logit s[h, n] (H, N) by distance from the scheme alone, NaN where the mask hides distance n.

    The model is taken as q = k = x, x ~ N(0, I_D) at every position, with the scheme's own transform and bias:
    - rotary (RoPE, xPos): E[(R_m x) . (R_{m-n} x)] / sqrt(D) = trace / sqrt(D), computed exactly by probing
      with basis vectors: RoPE (2 / sqrt(D)) sum_k cos(n theta_k), xPos the same with zeta_k^(n/B) inside;
    - CoCA: the same basis probe with the key coefficients tau equal to the probe (sum_k cos(n theta_k) / sqrt(D));
    - additive biases: the bias itself (ALiBi -m_h n, Sandwich's closed form, T5/KERPLE/FIRE from their current
      parameters, learned or initial); the content term q . k / sqrt(D) does not depend on n and R ignores it;
    - absolute embeddings (identity q/k projections): e_m . e_{m-n} / sqrt(D) per head's slice;
    - NoPE: 0.
    Relative schemes are evaluated for one query at N - 1 (any length is cheap); others (FIRE, absolute) are
    averaged over every query m >= n, as the empirical s_hat is.
    """
    mask = build_mask(mask, scheme.dims.train_len)
    H, device = scheme.dims.n_heads, module_device(scheme)
    counts = _visible_counts(mask, length, block_size, device)
    if scheme.relative and not scheme.bias_per_query:
        s = torch.zeros(H, length, dtype=torch.float64, device=device)
        query = torch.full((1,), length - 1, device=device)
        for start in range(0, length, KEY_BLOCK):
            keys = torch.arange(start, min(start + KEY_BLOCK, length), device=device)
            s[:, length - 1 - keys] = _probe_scores(scheme, query, keys)[:, 0].double()
    else:
        acc = DistanceMeans(H, length, device)
        positions = torch.arange(length, device=device)
        for start in range(0, length, block_size):
            qp = positions[start : start + block_size]
            keys = positions[: int(qp[-1]) + 1] if mask.causal else positions
            distance = qp[:, None] - keys[None, :]
            acc.add(_probe_scores(scheme, qp, keys)[None], distance, mask.allowed(qp, keys))
        s = acc.sums / acc.counts.clamp(min=1)
    return torch.where(counts > 0, s, torch.nan).float()


def scheme_resolution(scheme: PositionScheme, length: int, mask: str | Mask | None = "causal") -> ResolutionResult:
    """Theoretical s and R of one scheme (one 'layer')."""
    return _result(theoretical_scores(scheme, length, mask)[None])


def model_theoretical(model: GPT, length: int, mask: str | Mask | None = "causal") -> ResolutionResult:
    """Theoretical s and R from a model's own (trained) scheme parameters, one row per layer's scheme."""
    mask = build_mask(mask, model.config.train_len)
    rows = [theoretical_scores(model.scheme_for(layer), length, mask) for layer in range(model.config.n_layer)]
    return _result(torch.stack(rows))
