"""Empirical receptive field (Chi et al. 2023, arXiv 2212.10356): how far back the last token's loss reaches.

g_m = ||d loss_last / d e_m|| per token embedding e_m, normalised to sum 1 per segment and listed from the most
recent token backwards; the ERF is the fewest recent tokens whose cumulative share reaches the threshold (0.99)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from lextra.analysis.capture import batches
from lextra.attention import build_mask
from lextra.attention.masks import Mask
from lextra.devices import module_device
from lextra.errors import ConfigError
from lextra.model import GPT
from lextra.serialize import Serializable

THRESHOLD = 0.99


@dataclass
class ReceptiveField(Serializable):
    """The ERF of the segment-averaged curve, the mean of each segment's own ERF, and the averaged curve
    (cumulative gradient share of the k most recent tokens, k = 1..L)."""

    erf: int
    erf_per_segment_mean: float
    segments: int
    curve: list[float]

    def share_within(self, recent: int) -> float:
        """Cumulative gradient share of the `recent` most recent tokens (all of them when fewer exist)."""
        return self.curve[min(recent, len(self.curve)) - 1]


@contextmanager
def frozen(model: GPT) -> Iterator[GPT]:
    """Parameters without gradients for the duration (only inputs are differentiated), restored afterwards."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    try:
        for p, _ in flags:
            p.requires_grad_(False)
        yield model
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


def logits_from_embeddings(model: GPT, embeddings: Tensor, mask: Mask, backend: str = "auto") -> Tensor:
    """The model's logits (B, L, vocab) from token embeddings (B, L, d) at positions 0..L-1, with gradients."""
    return model.head(model.features_from_embeddings(embeddings, mask=mask, backend=backend))


def gradient_shares(
    model: GPT, segments: Tensor, mask: str | Mask | None = "causal", *, batch_size: int = 8, backend: str = "auto"
) -> Tensor:
    """Per-segment normalised gradient norms by recency, (S, L); `segments` (S, L + 1) are inputs then target."""
    if not hasattr(model, "features_from_embeddings"):
        raise ConfigError(
            "the receptive field is measured on decoders (a lextra GPT, a Hugging Face decoder); this model has no "
            "causal language-model head: use dispersion or resolution"
        )
    model.eval()
    mask = build_mask(mask, model.config.train_len)
    device = module_device(model)
    rows = []
    with frozen(model), torch.enable_grad():
        for batch in batches(segments.to(device), batch_size):
            inputs, target = batch[:, :-1], batch[:, -1]
            embeddings = model.input_embeddings(inputs).detach().requires_grad_(True)
            logits = logits_from_embeddings(model, embeddings, mask, backend)[:, -1]
            loss = F.cross_entropy(logits.float(), target, reduction="sum")  # segments are independent
            (grad,) = torch.autograd.grad(loss, embeddings)
            norms = grad.double().norm(dim=-1)
            rows.append((norms / norms.sum(-1, keepdim=True)).flip(-1))
    return torch.cat(rows)


def cumulative_curve(shares: Tensor) -> Tensor:
    """Cumulative share of the k most recent tokens, k = 1..L, averaged over segments (L,)."""
    return shares.mean(0).cumsum(0)


def effective_receptive_field(curve: Tensor, threshold: float = THRESHOLD) -> int:
    """Smallest k with curve[k - 1] >= threshold (a 1e-9 tolerance absorbs rounding of a sum that is exactly 1)."""
    reached = (curve >= threshold - 1e-9).nonzero()
    return int(reached[0]) + 1 if reached.numel() else int(curve.numel())


def receptive_field(
    model: GPT,
    segments: Tensor,
    mask: str | Mask | None = "causal",
    *,
    threshold: float = THRESHOLD,
    batch_size: int = 8,
    backend: str = "auto",
) -> ReceptiveField:
    """ERF of the segment-averaged curve, each segment's own ERF, and the curve itself."""
    shares = gradient_shares(model, segments, mask, batch_size=batch_size, backend=backend)
    curve = cumulative_curve(shares)
    own = [effective_receptive_field(row.cumsum(0), threshold) for row in shares]
    return ReceptiveField(
        erf=effective_receptive_field(curve, threshold),
        erf_per_segment_mean=sum(own) / len(own),
        segments=int(shares.shape[0]),
        curve=curve.tolist(),
    )
