"""Attention dispersion (Chi, Fan, Rudnicky 2023, arXiv 2311.00684): the longer the input, the flatter each
softmax row. Per layer and head: the mean row entropy -sum_j p_j ln p_j and maximum probability; the first
layer's last-query rows are also kept sorted (`sorted_logits`) and standardised for a QQ plot. `uniform` is the
reference of rows spread evenly over their k visible keys (ln k and 1/k)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from lextra.analysis.capture import DEFAULT_BLOCK, batches, layer_attention
from lextra.attention.masks import Mask
from lextra.devices import module_device
from lextra.model import GPT
from lextra.serialize import Serializable

QQ_POINTS = 201


@dataclass
class QQSummary(Serializable):
    """Standardised order statistics (`sample`) against normal quantiles (`normal`), with their moments."""

    normal: list[float]
    sample: list[float]
    skewness: float
    excess_kurtosis: float
    count: int


@dataclass
class FirstLayerLogits(Serializable):
    """The first layer's last-query logits: mean sorted row, mean row spread, mean top z-score, QQ summary."""

    sorted_logits: list[float]
    logit_std: float
    top_z: float
    qq: QQSummary


@dataclass(frozen=True)
class RowStatistics(Serializable):
    """Mean row entropy (nats) and mean maximum probability: of a model's rows, or of uniform reference rows."""

    entropy: float
    max_prob: float


@dataclass
class Dispersion(Serializable):
    """Attention dispersion of a model on a set of texts: per layer, per head, overall, and against uniform rows."""

    #: mean over heads, per layer
    entropy: list[float]
    max_prob: list[float]
    #: (layers, heads)
    entropy_per_head: list[list[float]]
    max_prob_per_head: list[list[float]]
    entropy_mean: float
    max_prob_mean: float
    rows: int
    uniform: RowStatistics
    first_layer: FirstLayerLogits

    @property
    def mean(self) -> RowStatistics:
        """Entropy and max probability averaged over layers and heads."""
        return RowStatistics(self.entropy_mean, self.max_prob_mean)

    def per_layer(self, statistic: str) -> list[float]:
        """`entropy` or `max_prob` of each layer."""
        return {"entropy": self.entropy, "max_prob": self.max_prob}[statistic]


def row_entropy(weights: Tensor) -> Tensor:
    """Entropy of each softmax row (..., n) -> (...), with 0 ln 0 = 0."""
    return torch.special.entr(weights.double()).sum(-1)


def row_max(weights: Tensor) -> Tensor:
    """Largest probability of each row (..., n) -> (...)."""
    return weights.amax(-1)


def normal_quantiles(count: int, device: torch.device | str = "cpu") -> Tensor:
    """Standard normal quantiles at the plotting positions (i + 0.5) / count, via torch's inverse CDF."""
    p = (torch.arange(count, dtype=torch.float64, device=device) + 0.5) / count
    return torch.special.ndtri(p)


def qq_summary(samples: Tensor, points: int = QQ_POINTS) -> QQSummary:
    """Standardised order statistics against normal quantiles (subsampled to `points`), skewness, kurtosis."""
    x = samples.double().flatten()
    z = torch.sort((x - x.mean()) / x.std(unbiased=False).clamp(min=1e-12)).values
    theory = normal_quantiles(z.numel(), z.device)
    pick = torch.linspace(0, z.numel() - 1, min(points, z.numel()), device=z.device).round().long()
    return QQSummary(
        normal=theory[pick].tolist(),
        sample=z[pick].tolist(),
        skewness=float((z**3).mean()),
        excess_kurtosis=float((z**4).mean() - 3.0),
        count=int(z.numel()),
    )


@torch.no_grad()
def dispersion(
    model: GPT,
    texts: Tensor,
    mask: str | Mask | None = "causal",
    *,
    batch_size: int = 4,
    block_size: int = DEFAULT_BLOCK,
) -> Dispersion:
    """Mean row entropy and max probability per layer and head for `texts` (T, L); first-layer logit statistics."""
    model.eval()
    layers, H, device = model.config.n_layer, model.config.n_head, module_device(model)
    entropy = torch.zeros(layers, H, dtype=torch.float64, device=device)
    max_prob = torch.zeros(layers, H, dtype=torch.float64, device=device)
    rows = 0
    uniform = torch.zeros(2, dtype=torch.float64, device=device)  # sums of ln k and 1/k over rows with k visible keys
    last_rows: list[Tensor] = []  # first layer, last query: (B, H, n) each
    for batch in batches(texts, batch_size):
        for view in layer_attention(model, batch, mask, block_size=block_size):
            for block in view.blocks():
                weights = block.weights()
                if view.layer == 0:
                    keys = block.allowed.sum(-1).double()
                    uniform += batch.shape[0] * torch.stack((keys.log().sum(), (1.0 / keys).sum()))
                entropy[view.layer] += row_entropy(weights).sum((0, 2))
                max_prob[view.layer] += row_max(weights).double().sum((0, 2))
                if view.layer == 0 and int(block.q_pos[-1]) == texts.shape[1] - 1:
                    last_rows.append(block.logits[:, :, -1, block.allowed[-1]])
        rows += batch.shape[0] * texts.shape[1]
    entropy, max_prob = entropy / rows, max_prob / rows
    first = torch.cat(last_rows).double()  # (T, H, n)
    centred = first - first.mean(-1, keepdim=True)
    return Dispersion(
        entropy=entropy.mean(1).tolist(),
        max_prob=max_prob.mean(1).tolist(),
        entropy_per_head=entropy.tolist(),
        max_prob_per_head=max_prob.tolist(),
        entropy_mean=float(entropy.mean()),
        max_prob_mean=float(max_prob.mean()),
        rows=rows,
        uniform=RowStatistics(entropy=float(uniform[0] / rows), max_prob=float(uniform[1] / rows)),
        first_layer=FirstLayerLogits(
            sorted_logits=torch.sort(first, dim=-1, descending=True).values.mean((0, 1)).tolist(),
            logit_std=float(centred.std(dim=-1, unbiased=False).mean()),
            top_z=float((centred.amax(-1) / centred.std(dim=-1, unbiased=False).clamp(min=1e-12)).mean()),
            qq=qq_summary(centred),
        ),
    )
