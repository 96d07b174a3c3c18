"""Per-layer attention logits of a GPT, read without changing the model, one query block at a time.

`layer_attention(model, tokens, mask)` steps through the model's forward: an observer records each block's
attention inputs before it attends, the consumer reads them, then the block runs with the temperatures set by
then. `LayerAttention.blocks()` gives pre-softmax logits (B, H, c, n) for only the keys the mask can reach."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor

from lextra.attention import AttentionContext, build_mask, context_logits, sink_softmax
from lextra.attention.forget_bias import ForgetBias
from lextra.attention.masks import UNBOUNDED, Mask
from lextra.devices import module_device
from lextra.errors import ConfigError
from lextra.layer_inputs import AttentionInputs
from lextra.model import GPT, Block
from lextra.positions import PositionScheme

DEFAULT_BLOCK = 256


@dataclass
class LogitBlock:
    """Logits of queries at `q_pos` against keys at `k_pos`: (B, H, c, n) fp32 before the mask, plus the mask."""

    q_pos: Tensor
    k_pos: Tensor
    logits: Tensor
    allowed: Tensor
    #: the layer's learned sink logits (H,): one more term in each softmax's denominator, or None
    sinks: Tensor | None = None

    @property
    def distance(self) -> Tensor:
        """d = m - n for every (query, key) pair of the block, (c, n)."""
        return self.q_pos[:, None] - self.k_pos[None, :]

    def weights(self) -> Tensor:
        """Softmax over the allowed keys (B, H, c, n); with sinks, rows sum to less than 1 by the sink's share."""
        return sink_softmax(self.logits.masked_fill(~self.allowed, float("-inf")), self.sinks)


@dataclass
class LayerAttention:
    """One layer's attention inputs for a batch: q and k before the position transform, and what scores them;
    Hugging Face adapters give q and k rotated (`scheme=None`) and their score bias as `bias`."""

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
    #: the layer's learned sinks (H,) and logit softcap (a plan's pieces), or None
    sinks: Tensor | None = None
    softcap: float | None = None
    #: FoX's forget bias (c at the queries and keys, `lextra.attention.forget_bias`), or None
    forget: ForgetBias | None = None

    def blocks(self, rows: Tensor | None = None) -> Iterator[LogitBlock]:
        """Query blocks in order, each with the logits of the keys its mask can reach; `rows` restricts the queries."""
        L = self.q.shape[-2]
        first_pos = int(self.positions[0])
        scale = 1.0 / math.sqrt(self.q.shape[-1]) if self.scale is None else self.scale
        device = self.positions.device
        index = torch.arange(L, device=device) if rows is None else torch.unique(rows.to(device, torch.long))
        for start in range(0, index.numel(), self.block_size):
            idx = index[start : start + self.block_size]
            qp = self.positions[idx]
            first, last = self.mask.key_range(int(qp[0]), int(qp[-1]))
            lo = 0 if first <= -UNBOUNDED else max(0, min(L, first - first_pos))
            hi = L if last >= UNBOUNDED else max(lo, min(L, last - first_pos + 1))
            kp = self.positions[lo:hi]
            forget = self.forget
            if forget is not None:
                forget = ForgetBias(forget.queries[..., idx], forget.keys[..., lo:hi])
            ctx = AttentionContext(
                self.scheme, self.mask, qp, kp, scale, _block_tau(self.temperature, idx), softcap=self.softcap,
                score_bias=None if self.bias is None else self.bias[..., idx, lo:hi], forget=forget,
            )  # fmt: skip
            logits, allowed = context_logits(self.q[..., idx, :], self.k[..., lo:hi, :], ctx)
            yield LogitBlock(qp, kp, logits, allowed, self.sinks)


class CapturedLayer(Exception):  # noqa: N818  (a control-flow signal, not an error)
    """Raised by an observer to stop the forward pass once a layer's attention inputs are recorded."""

    def __init__(self, view: LayerAttention) -> None:
        super().__init__(f"captured layer {view.layer}")
        self.view = view


def _block_tau(temperature: Tensor | float | None, idx: Tensor) -> Tensor | None:
    """The model's temperature shaped for `context_logits`: scalar, (H, 1) or the block's (H, c) columns."""
    if temperature is None:
        return None
    tau = torch.as_tensor(temperature, dtype=torch.float32, device=idx.device)
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
    """Yield each layer's `LayerAttention` for `tokens` (B, L) at positions 0..L-1; consume a layer's blocks
    before asking for the next."""
    tokens = tokens.to(module_device(model))
    own_capture = getattr(model, "layer_attention", None)  # Hugging Face adapters capture their own inputs
    if own_capture is not None:
        yield from own_capture(tokens, mask, block_size=block_size)
        return
    replaced = [i for i, block in enumerate(model.blocks) if any(p.replaces_softmax for p in block.attn.pieces)]
    if replaced:
        raise ConfigError(
            f"the analyses read softmax attention; layer {replaced[0]} replaces the softmax (stickbreak): "
            "analyse a model without it"
        )
    model.eval()
    mask = build_mask(mask, model.config.train_len)
    positions = torch.arange(tokens.shape[1], device=tokens.device)
    x = model.embed_inputs(model.input_embeddings(tokens), positions)
    for layer in range(model.config.n_layer):
        yield _observe(model, x, layer, positions, mask, backend, block_size)
        x = model.forward_layers(x, positions, mask, backend, start=layer, stop=layer + 1)


def _observe(
    model: GPT, x: Tensor, layer: int, positions: Tensor, mask: Mask, backend: str, block_size: int
) -> LayerAttention:
    """Run block `layer` on x until it is about to attend and return its inputs (a piece attending itself has none)."""
    own = [p.name for p in cast(Block, model.blocks[layer]).attn.pieces if p.transforms_in_attend]
    if own:
        raise ConfigError(f"layer {layer} attends through {own[0]!r}, not one softmax map; analyse a model without it")

    def stop(inputs: AttentionInputs) -> None:
        view = LayerAttention(layer, inputs.q, inputs.k, inputs.scheme, inputs.q_pos, inputs.mask, inputs.temperature)
        view.block_size, view.sinks, view.softcap = block_size, inputs.sinks, inputs.softcap
        view.forget = inputs.forget
        raise CapturedLayer(view)

    try:
        model.forward_layers(x, positions, mask, backend, start=layer, stop=layer + 1, observer=stop)
    except CapturedLayer as captured:
        return captured.view
    raise AssertionError(f"layer {layer} attended without calling its observer")


def batches(texts: Tensor, batch_size: int) -> Iterator[Tensor]:
    """Rows of `texts` (T, L) in batches of at most `batch_size`."""
    for start in range(0, texts.shape[0], max(1, batch_size)):
        yield texts[start : start + batch_size]
