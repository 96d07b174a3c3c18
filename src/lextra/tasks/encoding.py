"""A task's examples as model tensors, in the task's style (`lextra.tasks.base`), and the training batches of a
run on a task (`TaskBatches`): a pure function of (seed, step), so a resumed run draws what it would have drawn.

Encoder style: `input ++ <answer> x O` read under a bidirectional mask, the targets at the placeholders.
Decoder style: `input ++ output ++ <eos>`, fed without its last token; the target of position t is token t + 1
where that token is part of the answer (the output or its `<eos>`), else ignored. Rows of one batch are
right-padded with `<pad>` (ignored targets), which a causal mask keeps from every real position.
Inline style: the input alone; the target of position t is the answer aligned with it, else ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import torch
from torch import Tensor

from lextra.errors import ConfigError
from lextra.tasks.base import PAD, AlgorithmicTask, LengthRange, TaskBatch, build_task, task_rng

#: the target value cross-entropy ignores
IGNORE = -100


@dataclass(frozen=True)
class EncodedBatch:
    """Model inputs (n, W), targets (n, W) (`IGNORE` where no answer symbol is predicted) and `scored` (n, W), the
    target positions the task's score counts (a decoder task's exact match also counts `<eos>`)."""

    inputs: Tensor
    targets: Tensor
    scored: Tensor

    @property
    def width(self) -> int:
        return int(self.inputs.shape[1])


def encode(task: AlgorithmicTask, batch: TaskBatch) -> EncodedBatch:
    """`batch` in `task.style`, as int64 tensors (see the module docstring)."""
    encoder = {"encoder": _encode_encoder, "decoder": _encode_decoder, "inline": _encode_inline}[task.style]
    return encoder(task, batch)


def _encode_encoder(task: AlgorithmicTask, batch: TaskBatch) -> EncodedBatch:
    if (batch.inputs == PAD).any() or (batch.outputs == PAD).any():
        raise ValueError(f"task {task.name}: an encoder-style batch must have rows of one length (no PAD)")
    n, I = batch.inputs.shape
    O = batch.outputs.shape[1]
    inputs = np.concatenate([batch.inputs, np.full((n, O), task.special("<answer>"), np.int64)], axis=1)
    targets = np.concatenate([np.full((n, I), IGNORE, np.int64), batch.outputs], axis=1)
    scored = np.concatenate([np.zeros((n, I), bool), batch.score_mask()], axis=1)
    return EncodedBatch(torch.from_numpy(inputs), torch.from_numpy(targets), torch.from_numpy(scored))


def _encode_decoder(task: AlgorithmicTask, batch: TaskBatch) -> EncodedBatch:
    """Each row's `input ++ output ++ <eos>` without its last token, right-padded; vectorised over rows."""
    inputs, outputs = batch.inputs, batch.outputs
    n = len(inputs)
    in_len = (inputs != PAD).sum(axis=1)
    out_len = (outputs != PAD).sum(axis=1)
    if (in_len < 1).any():
        raise ValueError(f"task {task.name}: a decoder-style row needs at least one input symbol")
    total = in_len + out_len + 1  # the whole sequence, <eos> included
    width = int(total.max()) - 1
    sequence = np.full((n, width + 1), task.special("<pad>"), np.int64)
    column = np.arange(width + 1)[None, :]
    in_cols = column[:, : inputs.shape[1]]
    sequence[:, : inputs.shape[1]] = np.where(in_cols < in_len[:, None], inputs, sequence[:, : inputs.shape[1]])
    out_at = in_len[:, None] + np.arange(outputs.shape[1])[None, :]  # where each output symbol lands
    rows = np.broadcast_to(np.arange(n)[:, None], out_at.shape)
    present = outputs != PAD
    sequence[rows[present], out_at[present]] = outputs[present]
    sequence[np.arange(n), total - 1] = task.special("<eos>")
    answer = (column >= in_len[:, None]) & (column < total[:, None])  # positions holding answer tokens
    targets = np.where(answer[:, 1:], sequence[:, 1:], IGNORE)
    scored = np.zeros((n, width + 1), bool)
    counted = batch.score_mask()
    scored[rows[present], out_at[present]] = counted[present]
    if task.score == "exact":
        scored[np.arange(n), total - 1] = True
    return EncodedBatch(
        torch.from_numpy(sequence[:, :-1].copy()), torch.from_numpy(targets), torch.from_numpy(scored[:, 1:].copy())
    )


def _encode_inline(task: AlgorithmicTask, batch: TaskBatch) -> EncodedBatch:
    if batch.outputs.shape != batch.inputs.shape:
        raise ValueError(f"task {task.name}: inline outputs {batch.outputs.shape} must align with the inputs")
    inputs = np.where(batch.inputs == PAD, task.special("<pad>"), batch.inputs)
    targets = np.where(batch.outputs == PAD, IGNORE, batch.outputs)
    return EncodedBatch(torch.from_numpy(inputs), torch.from_numpy(targets), torch.from_numpy(batch.score_mask()))


def draw_lengths(task: AlgorithmicTask, lengths: LengthRange, count: int, rng: np.random.Generator) -> np.ndarray:
    """Each row's task length for one training batch: one length for the whole batch (Ruoss et al.'s curriculum
    draws one per step), or one per row where the task mixes lengths (`mixed_lengths`, causal tasks)."""
    values = np.array(task.length_values(lengths))
    if task.mixed_lengths and task.style != "encoder":
        return values[rng.integers(0, len(values), size=count)]
    return np.full(count, int(values[rng.integers(0, len(values))]))


def generate_rows(task: AlgorithmicTask, lengths: np.ndarray, rng: np.random.Generator) -> TaskBatch:
    """Examples whose task lengths are `lengths` (one per row), generated length by length and joined in row
    order, right-padded with PAD."""
    values = np.unique(lengths)
    if len(values) == 1:
        return task.generate(int(values[0]), len(lengths), rng)
    parts = {int(v): task.generate(int(v), int((lengths == v).sum()), rng) for v in values}
    width_in = max(p.inputs.shape[1] for p in parts.values())
    width_out = max(p.outputs.shape[1] for p in parts.values())
    inputs = np.full((len(lengths), width_in), PAD, np.int64)
    outputs = np.full((len(lengths), width_out), PAD, np.int64)
    scored = np.zeros((len(lengths), width_out), bool)
    for value, part in parts.items():
        where = np.flatnonzero(lengths == value)
        inputs[where, : part.inputs.shape[1]] = part.inputs
        outputs[where, : part.outputs.shape[1]] = part.outputs
        scored[where, : part.outputs.shape[1]] = part.score_mask()
    return TaskBatch(inputs, outputs, scored)


class TaskBatches:
    """The training batches of a run on `task` (a `BatchSource` for the Trainer): global batch `step` is
    `(B, 2, W)` int64, inputs and targets stacked, W the widest row of the step; lengths from `lengths`."""

    def __init__(self, task: AlgorithmicTask, lengths: LengthRange) -> None:
        for bound in (lengths.low, lengths.high):
            task.check_length(bound)
        if not task.length_values(lengths):
            raise ConfigError(f"task {task.name}: no length in {lengths.text()} can be generated; widen the range")
        self.task, self.lengths = task, lengths

    def encoded(self, step: int, batch_size: int, seed: int) -> EncodedBatch:
        rng = task_rng(seed, 0x7A5C, step)
        return encode(self.task, generate_rows(self.task, draw_lengths(self.task, self.lengths, batch_size, rng), rng))

    def batch(self, step: int, batch_size: int, length: int, seed: int, rank: int = 0, world_size: int = 1) -> Tensor:
        encoded = self.encoded(step, batch_size, seed)
        return torch.stack((encoded.inputs, encoded.targets), dim=1)

    def max_width(self) -> int:
        """The widest training row: what the model's L_tr is set to (learned tables, derived defaults)."""
        return _widest_row(self.task.spec(), self.lengths)


@cache
def _widest_row(spec: str, lengths: LengthRange) -> int:
    """The widest row over 2048 examples of each of the two longest lengths (a row's width can vary with its
    content: a carry, a SCAN command's words); cached, as every validation of a task run's config asks for it."""
    task, rng = build_task(spec), task_rng(0, 0x11D7)
    return max(encode(task, task.generate(n, 2048, rng)).width for n in task.length_values(lengths)[-2:])


def parse_lengths(text: str | LengthRange, what: str = "lengths") -> LengthRange:
    """`LOW-HIGH` or a single `N` -> LengthRange; ConfigError naming the form otherwise."""
    if isinstance(text, LengthRange):
        return text
    low, sep, high = str(text).strip().partition("-")
    try:
        bounds = (int(low), int(high) if sep else int(low))
    except ValueError:
        raise ConfigError(f"{what} {text!r}: write LOW-HIGH (e.g. 1-40) or one length") from None
    if bounds[0] < 1 or bounds[0] > bounds[1]:
        raise ConfigError(f"{what} {text!r}: need 1 <= LOW <= HIGH")
    return LengthRange(*bounds)
