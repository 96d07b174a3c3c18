"""What a run on a length-generalization task (`lextra.tasks`) adds to a GPT run: the attention mask its style
reads under, the positions of a batch of any width, and the record saved with the model so that evaluation
rebuilds the task."""

from __future__ import annotations

from functools import cache
from typing import Any

from torch import Tensor

from lextra.attention import Mask, build_mask
from lextra.data.positions import PositionSampler, build_sampler
from lextra.tasks import AlgorithmicTask, LengthRange


def task_mask(task: AlgorithmicTask) -> Mask:
    """The mask a task's examples are read under: full for encoder style, causal for decoder style (built once)."""
    return build_mask("full" if task.style == "encoder" else "causal", 1)


@cache
def _sampler_at(spec: str, width: int) -> PositionSampler:
    return build_sampler(spec, width)


def task_positions(sampler: PositionSampler, width: int, seed: int, step: int) -> Tensor | None:
    """The (width,) positions of a task batch `width` tokens wide, drawn by `sampler`'s kind at that width (its
    reach kept: randomized's max, PoSE's target), a pure function of (seed, step); None where contiguous."""
    if sampler.contiguous:
        return None
    return _sampler_at(sampler.spec(), width).positions(seed, step)


def task_record(task: AlgorithmicTask, lengths: LengthRange) -> dict[str, Any]:
    """What a task model's folder records: the spec that rebuilds its task, style, score, vocabulary and lengths."""
    return {
        "spec": task.spec(),
        "style": task.style,
        "score": task.score,
        "vocabulary": list(task.vocabulary),
        "train_lengths": [lengths.low, lengths.high],
    }
