"""The training step's forward, loss and backward, eager or through `torch.compile` (inductor).

`StepLoss` counts what compiling costs (the seconds of the calls that compiled new graphs, and how many graphs), and
a model the compiler fails on trains eagerly from that step on, with a warning naming why: never a silent other
path. Each compiled training starts from an empty dynamo cache (`torch._dynamo.reset`), so one command training
many models never reaches dynamo's recompile limit (past it dynamo would run the step eagerly without saying so);
inductor's on-disk caches still serve a graph compiled before (the same scheme and shape, in this process or an
earlier one).
"""

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
    """`loss = step(batch, positions)` runs the forward and the loss (`loss`: next-token by default), then the
    backward; returns the loss.

    With `compile`, the forward and loss go through `torch.compile` (the backward is compiled with them by
    AOTAutograd), with static shapes unless `dynamic` is None (torch's automatic dynamic shapes: one recompile, then
    one graph for every width, as task batches need). `compile_s` and `graphs` count the calls that compiled new
    graphs; `fallback` is why the compiled step was given up (None while it runs, or when it was never asked for).
    """

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
