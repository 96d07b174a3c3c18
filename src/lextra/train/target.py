"""The training target: what the `Trainer` asks of the thing it trains (`GPTTarget`, `HFTarget`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from lextra.data.positions import PositionSampler
from lextra.train.config import LoopConfig
from lextra.train.distributed import Distributed
from lextra.train.tasks import BatchSource

#: `loss = step(batch, positions)`: forward, loss and backward of this process's rows of a step
StepFunction = Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]


class TrainingTarget(ABC):
    """The base of a model the `Trainer` trains; methods are called in the order written here."""

    #: the run's settings (the Trainer reads the `LoopConfig` fields)
    config: LoopConfig
    #: the command whose messages these are, e.g. "lextra train"
    command: str
    #: the progress bar's label, e.g. "train rope"
    label: str
    #: what the run is called in messages, e.g. "training"
    kind: str
    _stream: BatchSource | None = None

    @abstractmethod
    def open_data(self, world: Distributed, run_dir: Path, resume: bool, progress: bool) -> None:
        """Read the data (setting `stream`); when resuming refuse settings or data the run cannot continue with."""

    @property
    def stream(self) -> BatchSource:
        """The training batches: (global batch, length + 1) token ids, a pure function of (step, seed)."""
        assert self._stream is not None, "open_data first"
        return self._stream

    @property
    @abstractmethod
    def length(self) -> int:
        """The training window, tokens."""

    @abstractmethod
    def sampler(self) -> PositionSampler:
        """The position sampler of the training windows."""

    @abstractmethod
    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Global batch `step` (a pure function of the step and the seed) and its positions (None: the model's own)."""

    @abstractmethod
    def run_record(self) -> dict[str, Any]:
        """What `config.json` holds: the settings a resume compares against."""

    @abstractmethod
    def build(self, device: torch.device, world: Distributed) -> torch.nn.Module:
        """The model on `device`, seeded, trainable parameters set (whole: the Trainer shards it next)."""

    @abstractmethod
    def shard_units(self) -> list[torch.nn.Module]:
        """The modules FSDP2 shards one at a time; the model itself is the root, holding the rest."""

    @abstractmethod
    def optimizer(self) -> torch.optim.Optimizer:
        """A fresh optimizer over the trainable parameters (a checkpoint may then restore its state)."""

    def started(self, start: int, optimizer: torch.optim.Optimizer) -> None:
        """Called once the run knows its first step (0, or the resumed checkpoint's) and holds its optimizer; nothing
        by default."""
        return None

    @abstractmethod
    def step_function(self, network: torch.nn.Module) -> StepFunction:
        """The step's forward, loss and backward over `network` (the model, or its DDP wrapper)."""

    @abstractmethod
    def trainable(self) -> list[tuple[str, torch.nn.Parameter]]:
        """The parameters that train, by name (clipped and checked for finiteness)."""

    @abstractmethod
    def save_weights(self, folder: Path | None) -> None:
        """Write the trainable state into a checkpoint folder (None: take part in a sharded gather only)."""

    @abstractmethod
    def load_weights(self, folder: Path) -> None:
        """Copy a checkpoint folder's weights into the model."""

    def validation_loss(self, done: int) -> float | None:
        """The validation loss to log after step `done` (None: none due, or the target has none)."""
        return None

    def divergence_causes(self) -> list[str]:
        """Likely causes of a non-finite step besides the learning rate."""
        return []

    @abstractmethod
    def finish(self, run_dir: Path, world: Distributed) -> Any:
        """Write what the run produces (every process calls it) and return it."""
