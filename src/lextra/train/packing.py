"""The training step of packed documents (`--pack documents`): each document attends only to itself, at
positions from its own start, and predicts only its own next tokens.

Each document (with its separator) becomes one row, right-padded to a bucket length; a bucket's rows go through the
model in one call under its causal mask and default positions, which is the document mask exactly for every
scheme and backend. Each call's loss is its share of the global batch's mean, backpropagated at once."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from lextra.data.packing import PADDING, PackedDocuments, stream_document_starts
from lextra.data.positions import BatchSource
from lextra.devices import autocast
from lextra.errors import ConfigError
from lextra.tasks.rows import RowSource

#: logits (N, P, vocab) of right-padded input rows (N, P)
Forward = Callable[[Tensor], Tensor]

#: the shortest bucket length: rows shorter than this are padded to it
MIN_BUCKET = 8


def bucket_length(inputs: int, limit: int) -> int:
    """The padded length of a row: rounded up to a quarter of its power of two (at least `MIN_BUCKET`, at most
    `limit`), so padding adds less than 25%."""
    if inputs <= MIN_BUCKET:
        return min(MIN_BUCKET, limit)
    step = 1 << (inputs.bit_length() - 3)
    return min(-(-inputs // step) * step, limit)


def document_units(ids: Tensor) -> list[tuple[int, int, int]]:
    """The (row, start, stop) of every document unit with at least two tokens, row by row, in order."""
    units: list[tuple[int, int, int]] = []
    rows = ids.detach().cpu()
    for row in range(rows.shape[0]):
        values = rows[row]
        cuts = (torch.nonzero(values[1:] != values[:-1]).flatten() + 1).tolist()
        for start, stop in zip([0, *cuts], [*cuts, values.numel()], strict=True):
            if int(values[start]) != PADDING and stop - start >= 2:
                units.append((row, start, stop))
    return units


def buckets(units: list[tuple[int, int, int]], limit: int) -> dict[int, list[tuple[int, int, int]]]:
    """The units grouped by the bucket length of their inputs (at most `limit`), longest bucket first."""
    grouped: dict[int, list[tuple[int, int, int]]] = {}
    for unit in units:
        grouped.setdefault(bucket_length(unit[2] - unit[1] - 1, limit), []).append(unit)
    return dict(sorted(grouped.items(), reverse=True))


def bucket_rows(tokens: Tensor, units: list[tuple[int, int, int]], length: int) -> tuple[Tensor, Tensor]:
    """Inputs and targets (N, length) of these units, right-padded (inputs with 0, targets with -100: ignored)."""
    inputs = tokens.new_zeros(len(units), length)
    targets = tokens.new_full((len(units), length), -100)
    for index, (row, start, stop) in enumerate(units):
        n = stop - start - 1
        inputs[index, :n] = tokens[row, start : stop - 1]
        targets[index, :n] = tokens[row, start + 1 : stop]
    return inputs, targets


def global_targets(local: int, device: torch.device) -> tuple[int, int]:
    """The targets of the whole global batch (summed over torchrun's processes) and the number of processes, so
    every process weighs its documents' losses as one process holding the whole batch would."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return local, 1
    processes = torch.distributed.get_world_size()
    if processes > 1:
        on = device if torch.distributed.get_backend() == "nccl" else torch.device("cpu")
        count = torch.tensor([local], dtype=torch.long, device=on)
        torch.distributed.all_reduce(count)
        local = int(count.item())
    return local, processes


def packed_step(
    network: torch.nn.Module, forward: Forward, batch: Tensor, precision: str, device: torch.device
) -> Tensor:
    """Forward, loss and backward of a packed batch (B, 2, L + 1): the mean next-token cross-entropy over every
    target inside a document, detached. `forward` maps input rows to logits through `network`."""
    tokens, ids = batch[:, 0], batch[:, 1]
    grouped = buckets(document_units(ids), tokens.shape[-1] - 1)
    local = sum(stop - start - 1 for units in grouped.values() for _, start, stop in units)
    count, processes = global_targets(local, device)
    total = torch.zeros((), device=device)
    no_sync = getattr(network, "no_sync", None)
    for index, (length, units) in enumerate(grouped.items()):
        inputs, targets = bucket_rows(tokens, units, length)
        last = index == len(grouped) - 1
        with no_sync() if (no_sync is not None and not last) else contextlib.nullcontext():
            with autocast(precision, device):
                logits = forward(inputs)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-100, reduction="sum")
            share = loss * processes / max(count, 1)  # DDP averages the processes' gradients
            share.backward()
        total = total + share.detach()
    return total


def packed_loss(forward: Forward, batch: Tensor) -> tuple[Tensor, int]:
    """The summed next-token loss of a packed batch's documents (no backward) and its number of targets."""
    tokens, ids = batch[:, 0], batch[:, 1]
    total, count = torch.zeros((), device=tokens.device), 0
    for length, units in buckets(document_units(ids), tokens.shape[-1] - 1).items():
        inputs, targets = bucket_rows(tokens, units, length)
        logits = forward(inputs)
        total = total + F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="sum")
        count += int((targets != -100).sum())
    return total, count


def packed_source(source: BatchSource) -> BatchSource:
    """A run's batches as packed documents: a corpus stream's windows (`PackedDocuments`), or, for a row task mixed
    with language modelling (`kv+lm`), its corpus windows packed and each task row one document."""
    if isinstance(source, RowSource):
        if source.lm is None:
            raise ConfigError(
                f"--pack documents packs corpus windows, but the task {source.task.name!r} trains on its rows alone; "
                "mix it with language modelling (e.g. TASK+lm) or drop --pack"
            )
        source.lm = PackedDocuments(source.lm, stream_document_starts(source.lm))
        return source
    return PackedDocuments(source, stream_document_starts(source))
