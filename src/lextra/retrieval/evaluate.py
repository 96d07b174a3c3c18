"""Retrieval accuracy over a length x depth grid (the needle-in-a-haystack sweep) and its saved outputs.

The same seed gives the same prompts to every model, so schemes are compared on identical samples.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from lextra.errors import ConfigError
from lextra.io import atomic_write, atomic_write_json, atomic_write_text
from lextra.report import markdown_table, write_csv
from lextra.retrieval.scoring import score_prompts
from lextra.retrieval.sources import row_seed
from lextra.retrieval.tasks import RetrievalTask

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


def save_retrieval_outputs(out_dir: str | Path, result: dict[str, Any]) -> dict[str, Path]:
    """results.json, results.csv (one row per cell), table.md (per length and the depth grid), heatmap.png."""
    out_dir = Path(out_dir)
    atomic_write_json(out_dir / "results.json", result)
    records = [
        {"model": result["label"], "task": result["task"], "length": int(n), "depth": float(d), **_numbers(cell)}
        for n, row in result["cells"].items()
        for d, cell in row.items()
    ]
    write_csv(out_dir / "results.csv", records)
    atomic_write_text(out_dir / "table.md", retrieval_tables({result["label"] or "model": result}) + "\n")
    heatmap = plot_heatmap(result, out_dir / "heatmap.png")
    return {"json": out_dir / "results.json", "csv": out_dir / "results.csv", "table": out_dir / "table.md",
            "heatmap": heatmap}  # fmt: skip


def _numbers(cell: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in cell.items() if k != "examples"}


def retrieval_tables(results: dict[str, dict[str, Any]]) -> str:
    """Markdown: exact-match and rank-1 accuracy per model (rows) and length (columns), then per depth for each."""
    first = next(iter(results.values()))
    lengths = first["lengths"]
    parts = []
    for metric, what in (("exact", "greedy exact match"), ("rank1", "gold answer ranked first")):
        rows = {label: {n: v[metric] for n, v in r["by_length"].items()} for label, r in results.items()}
        parts.append(f"### {first['task']}: {what} (rows: model, columns: length)\n\n" + markdown_table(rows, lengths))
    for label, r in results.items():
        rows = {f"depth {d}": {n: r["cells"][n][d]["exact"] for n in r["cells"]} for d in map(str, r["depths"])}
        parts.append(f"### {label}: exact match by depth and length\n\n" + markdown_table(rows, lengths, "depth"))
    return "\n\n".join(parts)


def plot_heatmap(result: dict[str, Any], path: str | Path, metric: str = "exact") -> Path:
    """The needle-in-a-haystack plot: accuracy per (depth, length) cell, green = retrieved."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths, depths = result["lengths"], result["depths"]
    grid = [[result["cells"][str(n)][str(d)][metric] for n in lengths] for d in depths]
    fig, ax = plt.subplots(figsize=(1.1 * len(lengths) + 2.2, 0.55 * len(depths) + 1.6))
    image = ax.imshow(grid, cmap="RdYlGn", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(lengths)), [str(n) for n in lengths])
    ax.set_yticks(range(len(depths)), [f"{d:.0%}" for d in depths])
    for i, row in enumerate(grid):
        for j, value in enumerate(row):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7)
    ax.set_xlabel("prompt length (tokens)")
    ax.set_ylabel("needle depth")
    ax.set_title(f"{result['label']} {result['task']}: {metric}", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)
    return path
