"""The training step's forward, loss and backward, eager or through `torch.compile` (inductor). `StepLoss` counts
what compiling costs, and a model the compiler fails on trains eagerly from then on with a warning; each compiled
training starts from an empty dynamo cache, so one command training many models never hits the recompile limit."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lextra.attention import Mask
from lextra.devices import autocast


def next_token_loss(
    network: nn.Module, precision: str, device: torch.device, batch: Tensor, positions: Tensor | None
) -> Tensor:
    """Mean next-token cross-entropy of a (B, L + 1) batch, the logits under the run's autocast, the loss in fp32."""
    with autocast(precision, device):
        logits = network(batch[:, :-1], positions=positions)
    return F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())


def answer_loss(
    network: nn.Module,
    precision: str,
    device: torch.device,
    batch: Tensor,
    positions: Tensor | None,
    *,
    mask: str | Mask,
) -> Tensor:
    """Mean cross-entropy over the answer targets of a task batch (B, 2, W): inputs and targets stacked, targets
    -100 (ignored) where no answer symbol is predicted (`lextra.tasks.encoding`); attention under `mask`."""
    with autocast(precision, device):
        logits = network(batch[:, 0], positions=positions, mask=mask)
    return F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1].flatten(), ignore_index=-100)


#: a step's loss: (network, precision, device, batch, positions) -> scalar
LossFunction = Callable[[nn.Module, str, torch.device, Tensor, Tensor | None], Tensor]


def compiled_graphs() -> int:
    """Graphs dynamo has compiled in this process so far."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


class StepLoss:
    """`loss = step(batch, positions)` runs the forward, the loss (next-token by default) and the backward. With
    `compile` the forward and loss are compiled, with static shapes unless `dynamic` is None; `compile_s` and `graphs`
    count compiling calls, `fallback` says why the compiled step was given up."""

    def __init__(
        self,
        network: nn.Module,
        precision: str,
        device: torch.device,
        *,
        compile: bool = False,
        label: str = "",
        loss: LossFunction = next_token_loss,
        dynamic: bool | None = False,
    ) -> None:
        self.network, self.precision, self.device, self.label, self.loss = network, precision, device, label, loss
        self.compiled: Callable[..., Tensor] | None = None
        self.compile_s, self.graphs = 0.0, 0
        self.fallback: str | None = None
        if compile:
            torch._dynamo.reset()
            self.compiled = torch.compile(self._eager, dynamic=dynamic)

    def _eager(self, batch: Tensor, positions: Tensor | None) -> Tensor:
        return self.loss(self.network, self.precision, self.device, batch, positions)

    def __call__(self, batch: Tensor, positions: Tensor | None = None) -> Tensor:
        if self.compiled is None:
            loss = self._eager(batch, positions)
            loss.backward()
            return loss
        before, start = compiled_graphs(), time.perf_counter()
        try:
            loss = self.compiled(batch, positions)
            loss.backward()
        except Exception as err:
            self.give_up(err)
            return self(batch, positions)
        made = compiled_graphs() - before
        if made:
            self.graphs += made
            self.compile_s += time.perf_counter() - start
        return loss

    def give_up(self, err: BaseException) -> None:
        """Train eagerly from now on; the warning names the model and the compiler's reason."""
        lines = str(err).strip().splitlines()
        reason = f"{type(err).__name__}: {lines[0] if lines else ''}".strip().rstrip(":")
        self.fallback, self.compiled = reason, None
        self.network.zero_grad(set_to_none=True)  # a backward that failed half-way may have left gradients
        where = f" for {self.label}" if self.label else ""
        print(f"lextra train: warning: torch.compile failed{where} ({reason}); training eagerly", file=sys.stderr)

    def summary(self) -> str:
        """One line on what compiling cost, or why it was given up ('' when the step was never compiled)."""
        if self.fallback is not None:
            return f"compile failed ({self.fallback}); trained eagerly"
        if not self.graphs:
            return ""
        return f"compiled {self.graphs} graph(s) in {self.compile_s:.1f} s"
