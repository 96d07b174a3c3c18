"""Temperature alignment (Chi, Fan, Rudnicky 2023, arXiv 2311.00684): undo attention dispersion at long inputs.
A per-layer (optionally per-head) temperature tau, softmax(logits / tau), is chosen so that a statistic of the
attention rows at the target length L_ex equals its value at the training length L_tr:
- `pmax`: the mean over query rows of the maximum attention probability (the paper's most reliable choice);
- `entropy`: the mean row entropy;
- `log-length`: no calibration, tau = ln L_tr / ln L_ex (logits multiplied by log_{L_tr} L_ex).
Targets are measured on validation windows of L_tr tokens; then layer by layer, bottom up, on windows of L_ex tokens
through the scaled lower layers, tau is found by bisection on log tau (each statistic is monotone in tau)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from lextra.analysis.capture import LayerAttention, layer_attention
from lextra.data import eval_sequences
from lextra.data.prepare import PreparedData
from lextra.errors import ConfigError, DataError
from lextra.extend import InferenceSetup, inference_target
from lextra.model import GPT
from lextra.serialize import Serializable

STRATEGIES = ("pmax", "entropy", "log-length")
TAU_RANGE = (1.0 / 32.0, 32.0)
BISECTION_STEPS = 40


@dataclass
class Alignment(Serializable):
    """Temperatures (n_layer x n_head) and the statistic per layer: target at L_tr, before and after at L_ex."""

    strategy: str
    length: int
    train_len: int
    per_head: bool
    temperatures: list[list[float]]
    target: list[float]
    before: list[float]
    after: list[float]
    #: (layer, head) pairs whose temperature hit the search range: the target is out of reach (e.g. a head whose
    #: logits are nearly constant cannot be sharpened by any temperature)
    saturated: list[tuple[int, int]]


def log_length_temperature(train_len: int, length: int) -> float:
    """tau = ln L_tr / ln L_ex for L_ex > L_tr, else 1 (Chi et al.'s closed-form baseline)."""
    return math.log(train_len) / math.log(length) if length > train_len else 1.0


def row_statistics(logits: Tensor, tau: Tensor) -> tuple[Tensor, Tensor]:
    """Mean max probability and mean entropy per head of masked logits (B, H, Lq, Lk) under temperature (H,)."""
    scaled = logits / tau.view(1, -1, 1, 1)
    log_p = torch.log_softmax(scaled, dim=-1)
    p = log_p.exp()
    entropy = -(p * log_p.masked_fill(p == 0, 0.0)).sum(-1)
    return p.amax(-1).mean(dim=(0, 2)), entropy.mean(dim=(0, 2))


class _LayerLogits:
    """One layer's masked logits (temperature 1) over calibration windows, in query blocks; statistics for any
    tau. `max_rows` keeps that many evenly spaced query rows per window (None: all)."""

    def __init__(self, view: LayerAttention, max_rows: int | None = None) -> None:
        L = view.q.shape[-2]
        rows = None
        if max_rows is not None and max_rows < L:
            rows = torch.linspace(0, L - 1, max_rows, device=view.q.device).round().long()
        self.blocks: list[Tensor] = []
        self.rows = 0
        for block in replace(view, temperature=None, block_size=512).blocks(rows):
            self.blocks.append(block.logits.masked_fill(~block.allowed, float("-inf")))
            self.rows += block.logits.shape[2]

    def statistic(self, name: str, tau: Tensor) -> Tensor:
        """Per-head mean of `pmax` or `entropy` over every kept query row."""
        total = torch.zeros_like(tau)
        for logits in self.blocks:
            pmax, entropy = row_statistics(logits, tau)
            total = total + (pmax if name == "pmax" else entropy) * logits.shape[2]
        return total / self.rows


def _solve(layer: _LayerLogits, statistic: str, target: Tensor, per_head: bool, heads: int) -> Tensor:
    """Bisection on log tau for each head (or the layer's mean): pmax falls and entropy rises with tau."""
    lo = torch.full((heads if per_head else 1,), math.log(TAU_RANGE[0]), dtype=torch.float64, device=target.device)
    hi = torch.full_like(lo, math.log(TAU_RANGE[1]))
    goal = target if per_head else target.mean().reshape(1)
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2
        tau = mid.exp().float().expand(heads)
        value = layer.statistic(statistic, tau)
        value = value if per_head else value.mean().reshape(1)
        too_sharp = value > goal if statistic == "pmax" else value < goal  # needs a higher temperature
        lo = torch.where(too_sharp, mid, lo)
        hi = torch.where(too_sharp, hi, mid)
    return ((lo + hi) / 2).exp().float().expand(heads).clone()


def calibration_windows(data: PreparedData, length: int, count: int, split: str) -> Tensor:
    """`count` token windows (count, length) of a held-out split, on the CPU."""
    tokens = data.documents(split)
    if not tokens:
        raise DataError(f"the {split} split is empty; calibration needs held-out text")
    sequences, _ = eval_sequences(tokens, length, count)
    return torch.stack([s[:length] for s in sequences])


@torch.no_grad()
def _layer_statistics(model: Any, tokens: Tensor, statistic: str, mask: str, max_rows: int | None) -> list[Tensor]:
    """The per-head statistic of every layer for these windows with the model's current temperatures."""
    values = []
    for view in layer_attention(model, tokens, mask):
        tau = torch.ones(model.config.n_head, device=view.q.device) if view.temperature is None else view.temperature
        values.append(_LayerLogits(view, max_rows).statistic(statistic, tau))
    return values


@torch.no_grad()
def align_temperatures(
    model: GPT | Any,
    data: PreparedData,
    strategy: str,
    length: int,
    *,
    windows: int = 4,
    per_head: bool = False,
    split: str = "validation",
    mask: str = "causal",
    max_rows: int | None = None,
) -> Alignment:
    """Set `model`'s temperatures (a GPT or a Hugging Face adapter) for inputs of `length` tokens; return what was
    measured."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"unknown alignment strategy {strategy!r}; choose from {', '.join(STRATEGIES)}")
    if any(layer.log_scaling != "none" for layer in inference_target(model).inference_layers):
        raise ConfigError("temperature alignment expects a model without log-n scaling (no logn piece or setup)")
    train_len, heads, layers = model.config.train_len, model.config.n_head, model.config.n_layer
    if length < 2 or windows < 1:
        raise ConfigError(f"alignment needs a length >= 2 and windows >= 1, got {length} and {windows}")
    model.eval()
    InferenceSetup(temperatures=None).apply(model)
    statistic = "entropy" if strategy == "entropy" else "pmax"
    short = calibration_windows(data, train_len, windows, split)
    long = calibration_windows(data, length, windows, split)
    target = _layer_statistics(model, short, statistic, mask, max_rows)
    before = _layer_statistics(model, long, statistic, mask, max_rows)
    if strategy == "log-length":
        closed_form = log_length_temperature(train_len, length)
        InferenceSetup(temperatures=[[closed_form] * heads for _ in range(layers)]).apply(model)
    else:
        solved = [[1.0] * heads for _ in range(layers)]
        # bottom up: the generator runs each layer with the temperature set here before yielding the next one
        for view in layer_attention(model, long, mask):
            tau = _solve(_LayerLogits(view, max_rows), statistic, target[view.layer], per_head, heads)
            solved[view.layer] = tau.tolist()
            InferenceSetup(temperatures=solved).apply(model)
    after = _layer_statistics(model, long, statistic, mask, max_rows)
    bounds = torch.tensor([math.log(TAU_RANGE[0]), math.log(TAU_RANGE[1])], device="cpu")
    temperatures: list[list[float]] | None = model.config.temperatures
    assert temperatures is not None, "every strategy sets the temperatures above"
    log_tau = torch.tensor(temperatures, device="cpu").log()
    near = ((log_tau[..., None] - bounds).abs() < 1e-3).any(-1)
    saturated = [(int(i), int(j)) for i, j in near.nonzero().tolist()]
    return Alignment(
        strategy=strategy,
        length=length,
        train_len=train_len,
        per_head=per_head,
        temperatures=temperatures,
        target=[float(t.mean()) for t in target],
        before=[float(t.mean()) for t in before],
        after=[float(t.mean()) for t in after],
        saturated=saturated,
    )
