"""Per-layer attention logits of a GPT, read without changing the model, one query block at a time.

`layer_attention(model, tokens, mask)` runs the model's own modules by hand: the embedding, then per block
`ln_attn` and the q/k projections (reshaped exactly as `SelfAttention.forward` does) for the statistics, and
the block's normal forward for the residual stream. Each layer yields a `LayerAttention` whose `blocks()` give
pre-softmax logits (B, H, c, n) for c queries and only the n keys the mask can reach, so statistics are
reduced on the fly and no H x L x L tensor for all layers is ever stored.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from lextra.attention import attention_logits, build_mask
from lextra.attention.masks import UNBOUNDED, Mask
from lextra.model import GPT
from lextra.positions import PositionScheme

DEFAULT_BLOCK = 256


@dataclass
class LogitBlock:
    """Logits of queries at `q_pos` against keys at `k_pos`: (B, H, c, n) fp32 before the mask, plus the mask."""

    q_pos: Tensor
    k_pos: Tensor
    logits: Tensor
    allowed: Tensor

    @property
    def distance(self) -> Tensor:
        """d = m - n for every (query, key) pair of the block, (c, n)."""
        return self.q_pos[:, None] - self.k_pos[None, :]

    def weights(self) -> Tensor:
        """Softmax over the allowed keys (masked keys get weight 0), (B, H, c, n)."""
        return torch.softmax(self.logits.masked_fill(~self.allowed, float("-inf")), dim=-1)


@dataclass
class LayerAttention:
    """One layer's attention inputs for a batch: q and k before the position transform, and what scores them.

    Models that apply positions themselves (Hugging Face adapters) give q and k already rotated with
    `scheme=None`, and any additive score bias they computed as `bias` (B or 1, H, L, L); `scale` defaults to
    1/sqrt(D) (T5 uses 1).
    """

    layer: int
    q: Tensor
    k: Tensor
    scheme: PositionScheme | None
    positions: Tensor
    mask: Mask
    temperature: Tensor | None = None
    block_size: int = DEFAULT_BLOCK
    bias: Tensor | None = None
    scale: float | None = None

    def blocks(self, rows: Tensor | None = None) -> Iterator[LogitBlock]:
        """Query blocks in order, each with the logits of the keys its mask can reach (as the chunked backend).

        `rows` (query indices) restricts the blocks to those queries, e.g. a sample of rows at long lengths.
        """
        L = self.q.shape[-2]
        first_pos = int(self.positions[0])
        scale = 1.0 / math.sqrt(self.q.shape[-1]) if self.scale is None else self.scale
        index = torch.arange(L) if rows is None else torch.unique(rows.to(torch.long))
        for start in range(0, index.numel(), self.block_size):
            idx = index[start : start + self.block_size]
            qp = self.positions[idx]
            first, last = self.mask.key_range(int(qp[0]), int(qp[-1]))
            lo = 0 if first <= -UNBOUNDED else max(0, min(L, first - first_pos))
            hi = L if last >= UNBOUNDED else max(lo, min(L, last - first_pos + 1))
            kp = self.positions[lo:hi]
            tau = _block_tau(self.temperature, idx)
            q, k = self.q[..., idx, :], self.k[..., lo:hi, :]
            if self.bias is None:
                logits = attention_logits(q, k, self.scheme, qp, kp, scale=scale, tau=tau)
            else:
                logits = attention_logits(q, k, self.scheme, qp, kp, scale=scale) + self.bias[..., idx, lo:hi]
                logits = logits if tau is None else logits / tau[..., None]
            yield LogitBlock(qp, kp, logits, self.mask.allowed(qp, kp))


def _block_tau(temperature: Tensor | float | None, idx: Tensor) -> Tensor | None:
    """The model's temperature shaped for `attention_logits`: scalar, (H, 1) or the block's (H, c) columns."""
    if temperature is None:
        return None
    tau = torch.as_tensor(temperature, dtype=torch.float32)
    if tau.dim() == 1:
        return tau[:, None]
    if tau.dim() == 2 and tau.shape[-1] != 1:
        return tau[:, idx]
    return tau


@torch.no_grad()
def layer_attention(
    model: GPT | Any,
    tokens: Tensor,
    mask: str | Mask | None = "causal",
    *,
    block_size: int = DEFAULT_BLOCK,
    backend: str = "auto",
) -> Iterator[LayerAttention]:
    """Yield each layer's `LayerAttention` for `tokens` (B, L) at positions 0..L-1, running the model as it runs.

    Consume a layer's blocks before asking for the next layer: the residual stream advances on the next step.
    """
    if hasattr(model, "layer_attention"):  # Hugging Face adapters capture their own attention inputs
        yield from model.layer_attention(tokens, mask, block_size=block_size)
        return
    model.eval()
    mask = build_mask(mask, model.config.train_len)
    L = tokens.shape[1]
    positions = torch.arange(L, device=tokens.device)
    x = model.drop(model.positions[0].embed(model.embed(tokens), positions))
    for layer, block in enumerate(model.blocks):
        scheme = model.scheme_for(layer)
        attn = block.attn
        q, k, _ = attn.project(block.ln_attn(x))
        tau = attn.query_temperature(positions, positions, mask)  # layer temperature and log-n scaling
        yield LayerAttention(layer, q, k, scheme, positions, mask, tau, block_size)
        x = block(x, scheme, positions, mask, backend)


def batches(texts: Tensor, batch_size: int) -> Iterator[Tensor]:
    """Rows of `texts` (T, L) in batches of at most `batch_size`."""
    for start in range(0, texts.shape[0], max(1, batch_size)):
        yield texts[start : start + batch_size]
