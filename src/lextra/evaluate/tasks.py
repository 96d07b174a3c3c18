"""Scoring a model trained on a length-generalization task (`lextra.tasks`) at many task lengths.

Encoder-style tasks are read at once (the argmax at each placeholder); decoder-style tasks by their teacher-forced
argmaxes over the answer, which match greedy decoding exactly. Positions follow the training run's sampler
(Ruoss et al.): randomized training reads each test batch at a fresh sorted random subset of [0, max)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from lextra.data.positions import PositionSampler, build_sampler
from lextra.errors import ConfigError
from lextra.model import GPT, load_model, read_model_meta
from lextra.tasks import IGNORE, AlgorithmicTask, LengthRange, build_task, encode, task_rng
from lextra.train.task_runs import task_mask, task_positions


@dataclass(frozen=True)
class LengthScore:
    """A model's score at one task length: the task's own score (`score`), both kinds, and what they count."""

    length: int
    score: float
    per_token: float
    exact: float
    samples: int
    tokens: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TaskModel:
    """A model trained on a task, with the task rebuilt from its folder and the run's position sampler."""

    model: GPT
    task: AlgorithmicTask
    train_lengths: LengthRange
    sampler: PositionSampler
    folder: Path


def load_task_model(folder: str | Path, device: str | torch.device = "cpu") -> TaskModel:
    """A task model's folder loaded with its task; a language model's folder is refused."""
    meta = read_model_meta(folder)
    record = meta.get("task")
    if not isinstance(record, dict) or "spec" not in record:
        raise ConfigError(f"{folder} is not a model trained on a length-generalization task (lextra train --task)")
    task = build_task(record["spec"])
    if list(task.vocabulary) != list(record.get("vocabulary", [])):
        raise ConfigError(
            f"{folder}: the task {record['spec']} now has another vocabulary than the model was trained with; "
            "retrain it with this lextra version"
        )
    model = load_model(folder, device)
    low, high = record["train_lengths"]
    positions = (meta.get("train") or {}).get("positions", "contiguous")
    sampler = build_sampler(positions, model.config.train_len)
    return TaskModel(model, task, LengthRange(int(low), int(high)), sampler, Path(folder))


def check_vocabulary(model: GPT, task: AlgorithmicTask) -> None:
    """Refuse a task whose vocabulary the model's embedding cannot hold."""
    if task.vocab_size > model.config.vocab_size:
        raise ConfigError(
            f"task {task.name} needs {task.vocab_size} tokens (alphabet and specials), the model has "
            f"{model.config.vocab_size}; evaluate the task the model was trained on"
        )


def check_beyond(lengths: Sequence[int], trained: LengthRange) -> None:
    """Refuse test lengths inside the training range where only lengths beyond it are asked for."""
    inside = [n for n in lengths if n <= trained.high]
    if inside:
        raise ConfigError(
            f"lengths {', '.join(map(str, inside[:5]))} lie inside the training range {trained.text()}; give lengths "
            f"above {trained.high} (e.g. {trained.high + 1}-{2 * trained.high}) or drop --beyond"
        )


@torch.no_grad()
def score_length(
    run: TaskModel, length: int, *, samples: int, seed: int, batch_size: int = 64, randomize: bool | None = None
) -> LengthScore:
    """The model's score at one task length over `samples` examples drawn from (seed, length) alone, so the same
    examples are scored whatever other lengths are asked for. `randomize` None: as the run trained."""
    model, task = run.model, run.task
    task.check_length(length)
    check_vocabulary(model, task)
    model.eval()
    device = next(model.parameters()).device
    randomized = (not run.sampler.contiguous) if randomize is None else randomize
    rng = task_rng(seed, 0xE7A1, length)
    mask = task_mask(task)
    correct = total = exact = 0
    for start in range(0, samples, batch_size):
        batch = encode(task, task.generate(length, min(batch_size, samples - start), rng))
        positions = None
        if randomized:
            if batch.width > run.sampler.limit:
                raise ConfigError(
                    f"length {length} needs {batch.width} positions, above the {run.sampler.limit} the run's "
                    f"{run.sampler.spec()} draws from; evaluate shorter lengths or with contiguous positions"
                )
            positions = task_positions(run.sampler, batch.width, seed, 1_000_003 * length + start)
            positions = positions.to(device) if positions is not None else None
        features = model.features(batch.inputs.to(device), positions=positions, mask=mask)
        answer = batch.targets != IGNORE
        predicted = torch.full_like(batch.targets, IGNORE)
        predicted[answer] = model.head(features[answer.to(device)]).argmax(-1).cpu()
        right = (predicted == batch.targets) & batch.scored
        correct += int(right.sum())
        total += int(batch.scored.sum())
        exact += int(((right | ~batch.scored).all(dim=1)).sum())
    per_token = correct / total if total else float("nan")
    whole = exact / samples
    return LengthScore(length, per_token if task.score == "per_token" else whole, per_token, whole, samples, total)


def evaluate_task(
    run: TaskModel,
    lengths: Sequence[int],
    *,
    samples: int,
    seed: int = 0,
    batch_size: int = 64,
    randomize: bool | None = None,
    progress: bool = False,
) -> list[LengthScore]:
    """`score_length` at each length, with a progress bar over the lengths."""
    scores = []
    for length in tqdm(lengths, desc=f"score {run.task.name}", unit="length", disable=not progress, file=sys.stderr):
        scores.append(score_length(run, int(length), samples=samples, seed=seed, batch_size=batch_size,
                                   randomize=randomize))  # fmt: skip
    return scores
