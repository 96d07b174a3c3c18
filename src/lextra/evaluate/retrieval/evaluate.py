"""Retrieval accuracy over a length x depth grid (the needle-in-a-haystack sweep).

The same seed gives the same prompts to every model, so schemes are compared on identical samples.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from typing import Any

import torch
from tqdm import tqdm

from lextra.errors import ConfigError
from lextra.evaluate.retrieval.scoring import score_prompts
from lextra.evaluate.retrieval.sources import row_seed
from lextra.evaluate.retrieval.tasks import RetrievalTask

DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
DEFAULT_MULTIPLES = (1, 2, 4, 8, 16)


def default_lengths(train_len: int, multiples: Sequence[int] = DEFAULT_MULTIPLES) -> list[int]:
    return [train_len * m for m in multiples]


@torch.no_grad()
def evaluate_retrieval(
    model: Any,
    task: RetrievalTask,
    lengths: Sequence[int],
    depths: Sequence[float] = DEFAULT_DEPTHS,
    *,
    samples: int = 20,
    seed: int = 0,
    batch_size: int = 8,
    progress: bool = False,
    label: str = "",
) -> dict[str, Any]:
    """Exact-match and rank-1 accuracy (and mean rank) per (length, depth) cell, per length and overall."""
    if samples < 1 or batch_size < 1:
        raise ConfigError(f"samples and batch size must be >= 1, got {samples} and {batch_size}")
    if not lengths or any(n < 1 for n in lengths):
        raise ConfigError(f"retrieval lengths must be positive integers, got {list(lengths)}")
    was_training = getattr(model, "training", False)
    if hasattr(model, "eval"):
        model.eval()
    tokenizer = task.tokenizer
    cells: dict[str, dict[str, dict[str, Any]]] = {}
    bar = tqdm(total=len(lengths) * len(depths), disable=not progress, desc=f"retrieval {label}", file=sys.stderr)
    for length in lengths:
        cells[str(length)] = {}
        for depth in depths:
            rng = random.Random(row_seed("eval", task.name, seed, length, depth))
            drawn = [task.sample(length, depth, rng) for _ in range(samples)]
            exact, ranks, examples = [], [], []
            for start in range(0, samples, batch_size):
                chunk = drawn[start : start + batch_size]
                scored = score_prompts(
                    model,
                    [s.prompt_ids for s in chunk],
                    [s.answer_ids for s in chunk],
                    [[task.encode(d) for d in s.distractors] for s in chunk],
                )
                exact.extend(scored["exact"])
                ranks.extend(scored["rank"])
                for s, generated in zip(chunk, scored["generated"], strict=True):
                    if len(examples) < 2:
                        examples.append({"answer": s.answer_text, "generated": tokenizer.decode(generated)})
            cells[str(length)][str(depth)] = {
                "exact": sum(exact) / len(exact),
                "rank1": sum(r == 1 for r in ranks) / len(ranks),
                "mean_rank": sum(ranks) / len(ranks),
                "samples": len(exact),
                "examples": examples,
            }
            bar.update(1)
    bar.close()
    if was_training:
        model.train()
    by_length = {
        n: {metric: _mean(cell[metric] for cell in row.values()) for metric in ("exact", "rank1", "mean_rank")}
        for n, row in cells.items()
    }
    return {
        "task": task.name,
        "label": label,
        "lengths": [int(n) for n in lengths],
        "depths": [float(d) for d in depths],
        "samples": samples,
        "candidates": task.num_distractors + 1,
        "seed": seed,
        "cells": cells,
        "by_length": by_length,
        "overall": {m: _mean(v[m] for v in by_length.values()) for m in ("exact", "rank1", "mean_rank")},
    }


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)
