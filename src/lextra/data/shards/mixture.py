"""What a run draws its training windows from: a prepared folder's stream (i.i.d. or in epochs), or its mixture
parts by weight."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lextra.data.corpora import mixture_weights
from lextra.data.orders import EpochOrder, check_order, in_order
from lextra.data.positions import BatchSource
from lextra.data.prepare import PreparedData
from lextra.data.shards.reader import PreparedShards
from lextra.data.windows import WindowSource, mixture_window_starts
from lextra.errors import DataError


class WeightedMixture(WindowSource):
    """Training windows of a prepared weighted mixture (`A:0.3+B:0.7`): each window comes from one part, drawn
    by weight (`mixture_window_starts`), so every part is seen in its share whatever its size."""

    def __init__(self, shards: PreparedShards, weights: Sequence[float]) -> None:
        self.shards = shards
        self.weights = list(weights)
        self.ranges = shards.part_ranges("train")
        if len(self.ranges) != len(self.weights):
            raise DataError(
                f"{shards.root} holds {len(self.ranges)} mixture parts, the weights name {len(self.weights)}; "
                "prepare the weighted mixture itself"
            )

    def __len__(self) -> int:
        """Tokens of the training stream (every part's)."""
        return len(self.shards)

    def draw_starts(
        self, step: int, batch_size: int, length: int, seed: int, rank: int = 0, world_size: int = 1
    ) -> torch.Tensor:
        return mixture_window_starts(self.ranges, self.weights, step, batch_size, length, seed, rank, world_size)

    def windows(self, starts: torch.Tensor, length: int) -> torch.Tensor:
        return self.shards.windows(starts, length)


def training_batches(shards: PreparedShards, order: str = "iid") -> PreparedShards | WeightedMixture | EpochOrder:
    """What a run draws its windows from, in `order` (`ORDERS`): the folder's stream, i.i.d. or in epochs, or its
    parts by weight when it holds a weighted mixture (i.i.d. only: weights say how often each part is drawn, an
    epoch draws every window once)."""
    check_order(order)
    weights = mixture_weights(shards.corpus)
    if weights is not None:
        if order == "epoch":
            raise DataError(
                f"{shards.root} holds a weighted mixture ({shards.corpus}), whose windows are drawn by weight; "
                "epoch order draws every window once, so use --order iid, or an unweighted mixture A+B"
            )
        return WeightedMixture(shards, weights)
    return in_order(shards, order)


def data_batches(data: PreparedData, order: str = "iid") -> BatchSource:
    """A run's training windows in `order`: its prepared folder's (`training_batches`), else the train split's
    stream, encoded once."""
    if isinstance(data.folder, PreparedShards):
        return training_batches(data.folder, order)
    return in_order(data.stream, order)
