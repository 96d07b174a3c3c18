"""Attention sinks: the attention weight each layer puts on the first token (Xiao et al. 2023, arXiv 2309.17453):
per layer and head, the mean softmax weight on key 0 over query rows 1..L-1, from the model's own attention."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from lextra.analysis.capture import DEFAULT_BLOCK, batches, layer_attention
from lextra.attention.masks import Mask
from lextra.devices import module_device
from lextra.model import GPT
from lextra.serialize import Serializable


@dataclass
class FirstTokenMass(Serializable):
    """Mean attention weight on the first token per layer (over heads) and per layer and head, over `rows`."""

    per_layer: list[float]
    per_head: list[list[float]]
    rows: int
    #: per layer, the same mean for rows spread evenly over their visible keys (1/k for k keys): no sink
    uniform: list[float]


@torch.no_grad()
def first_token_mass(
    model: GPT,
    texts: Tensor,
    mask: str | Mask | None = "causal",
    *,
    batch_size: int = 4,
    block_size: int = DEFAULT_BLOCK,
) -> FirstTokenMass:
    """The attention weight on position 0 of `texts` (T, L), L >= 2, averaged over query rows 1..L-1 and texts."""
    if texts.dim() != 2 or texts.shape[1] < 2:
        raise ValueError(f"first_token_mass needs texts of shape (T, L) with L >= 2, got {tuple(texts.shape)}")
    model.eval()
    layers, heads = model.config.n_layer, model.config.n_head
    total = torch.zeros(layers, heads, dtype=torch.float64, device=module_device(model))
    uniform = torch.zeros(layers, dtype=torch.float64)
    rows = 0
    for batch in batches(texts, batch_size):
        for view in layer_attention(model, batch, mask, block_size=block_size):
            for block in view.blocks():
                if int(block.k_pos[0]) != 0:  # this block's queries cannot see the first token
                    continue
                later = block.q_pos > 0
                weights = block.weights()[:, :, later, 0]  # (B, H, rows)
                total[view.layer] += weights.double().sum((0, 2))
                allowed = block.allowed[later].double().cpu()
                uniform[view.layer] += batch.shape[0] * (allowed[:, 0] / allowed.sum(-1)).sum()
        rows += batch.shape[0] * (texts.shape[1] - 1)
    mean = total / rows
    return FirstTokenMass(
        per_layer=mean.mean(1).tolist(), per_head=mean.tolist(), rows=rows, uniform=(uniform / rows).tolist()
    )
