"""Ruoss et al.'s headline number from a finished `lextra study experiments/ruoss.toml` folder: how much randomized
positions raise accuracy beyond the training range, averaged over tasks and encodings.

Ruoss et al. 2023 (arXiv 2305.16843, abstract) report +12.0% on average over their 15 tasks and encodings, each model
the best of 10 seeds, averaged over test lengths 41-500. Here, per seed s, the gain of an encoding E on a task is
`beyond(E-rand, s) - beyond(E, s)` (the mean score over the study's test lengths, from `results.csv`); the gains are
averaged over the study's tasks and encodings per seed, and the mean over seeds is given with its 95% t-interval.
Two averages: over every (task, encoding) pair, as the paper averages (no in-distribution filter), and over the
pairs where both models master the training range on every seed (the study's bar), which the paper does not apply.

Usage
    PYTHONPATH=src .venv/bin/python experiments/ruoss_gain.py docs/studies/ruoss
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections import defaultdict
from pathlib import Path

from lextra.reporting.intervals import Interval

RANDOMIZED = "-rand"


def scores(folder: Path) -> dict[tuple[str, str, str, int], float]:
    """(task, model, part, seed) -> the mean score over that part's lengths."""
    by_cell: dict[tuple[str, str, str, int], list[float]] = defaultdict(list)
    with (folder / "results.csv").open() as handle:
        for row in csv.DictReader(handle):
            by_cell[(row["task"], row["model"], row["part"], int(row["seed"]))].append(float(row["score"]))
    return {key: statistics.fmean(values) for key, values in by_cell.items()}


def gains(folder: Path, threshold: float) -> dict[str, dict[str, list[float]]]:
    """Per averaging ("all pairs", "learned pairs"): per seed, the gains of every (task, encoding) pair."""
    table = scores(folder)
    seeds = sorted({seed for *_, seed in table})
    pairs = sorted({(task, model) for task, model, _, _ in table if not model.endswith(RANDOMIZED)})
    out: dict[str, dict[str, list[float]]] = {"all pairs": defaultdict(list), "learned pairs": defaultdict(list)}
    for task, plain in pairs:
        randomized = plain + RANDOMIZED
        if any((task, m, "beyond", s) not in table for m in (plain, randomized) for s in seeds):
            continue  # no randomized twin, or a study still running: only pairs with every seed
        learned = all(table[(task, m, "inside", s)] >= threshold for m in (plain, randomized) for s in seeds)
        for seed in seeds:
            gain = table[(task, randomized, "beyond", seed)] - table[(task, plain, "beyond", seed)]
            out["all pairs"][str(seed)].append(gain)
            if learned:
                out["learned pairs"][str(seed)].append(gain)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="a `lextra study experiments/ruoss.toml` output folder")
    parser.add_argument("--threshold", type=float, default=0.95, help="the study's in-distribution bar")
    args = parser.parse_args()
    for averaging, per_seed in gains(args.folder, args.threshold).items():
        if not per_seed:
            print(f"{averaging}: none")
            continue
        means = [statistics.fmean(values) for values in per_seed.values()]
        count = len(next(iter(per_seed.values())))
        interval = Interval.of(means)
        each = ", ".join(f"{100 * m:+.1f}" for m in means)
        print(f"{averaging} ({count} task-encoding pairs, {len(means)} seeds): randomized - plain beyond the training "
              f"range = {interval.text(100)} points (per seed: {each})")  # fmt: skip


if __name__ == "__main__":
    main()
