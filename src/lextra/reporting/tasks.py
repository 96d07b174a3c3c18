"""The report of a length-generalization study: per task, each model's score inside its training range and
beyond it as a mean over seeds with a 95% interval, entered only where every seed mastered the training range,
ranked with the differences the intervals decide, beside the paper's values; CSV, JSON, markdown and a plot."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

from lextra import serialize
from lextra.evaluate.tasks import LengthScore
from lextra.io import atomic_write_json, atomic_write_text
from lextra.reporting.intervals import Interval
from lextra.reporting.plots import pyplot, save_figure
from lextra.serialize import Serializable

#: what a task's score can be: intervals are written clipped to it
SCORE_RANGE = (0.0, 1.0)


@dataclass
class UnitScores(Serializable):
    """One cell: a model (one seed, and data seed where the study sets them apart) trained on a task, scored at
    lengths inside and beyond its training range."""

    task: str
    model: str
    seed: int
    inside: list[LengthScore]
    beyond: list[LengthScore]
    train_seconds: float = 0.0
    score_seconds: float = 0.0
    data_seed: int | None = field(default=None, metadata=serialize.options(omit_none=True))

    @staticmethod
    def mean(scores: list[LengthScore]) -> float:
        return math.fsum(s.score for s in scores) / len(scores)


@dataclass
class CellSummary:
    """A (task, model) over its seeds: the in-distribution and beyond means with intervals, and how many seeds
    mastered the training range (the cell enters the extrapolation table only when all did)."""

    task: str
    model: str
    inside: Interval
    beyond: Interval
    mastered: int
    seeds: int
    curve: dict[int, Interval]

    @property
    def entered(self) -> bool:
        return self.mastered == self.seeds

    def text(self) -> str:
        if self.entered:
            return self.beyond.text(100, within=SCORE_RANGE)
        return f"not learned ({self.mastered}/{self.seeds} seeds; in-dist {self.inside.text(100, within=SCORE_RANGE)})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task, "model": self.model, "inside": self.inside.to_dict(), "beyond": self.beyond.to_dict(),
            "mastered": self.mastered, "seeds": self.seeds, "entered": self.entered,
            "curve": {str(n): i.to_dict() for n, i in self.curve.items()},
        }  # fmt: skip


class TaskStudyResults:
    """A study's cells summarised (see the module docstring)."""

    def __init__(self, config: Any, units: list[UnitScores]) -> None:
        self.config, self.units = config, units
        self.cells: dict[tuple[str, str], CellSummary] = {}
        for task in config.tasks:
            for model in (m.label for m in config.models):
                mine = [u for u in units if u.task == task and u.model == model]
                if mine:
                    self.cells[(task, model)] = self._summary(task, model, mine)

    def _summary(self, task: str, model: str, units: list[UnitScores]) -> CellSummary:
        threshold = self.config.threshold
        inside = [UnitScores.mean(u.inside) for u in units]
        lengths = sorted({s.length for u in units for s in [*u.inside, *u.beyond]})
        by_length = {n: [s.score for u in units for s in [*u.inside, *u.beyond] if s.length == n] for n in lengths}
        return CellSummary(
            task, model, Interval.of(inside), Interval.of([UnitScores.mean(u.beyond) for u in units]),
            sum(v >= threshold for v in inside), len(units), {n: Interval.of(v) for n, v in by_length.items() if v},
        )  # fmt: skip

    def published(self, task: str, model: str) -> Any:
        return next((p for p in self.config.published if p.task == task and p.model == model), None)

    def ranking(self, task: str) -> list[tuple[CellSummary, bool]]:
        """Entered models by their mean beyond the training range, best first, each with whether its interval
        lies above the next one's (a decided difference)."""
        entered = sorted(
            (c for (t, _), c in self.cells.items() if t == task and c.entered), key=lambda c: -c.beyond.mean
        )
        return [(c, i + 1 < len(entered) and c.beyond.separated(entered[i + 1].beyond)) for i, c in enumerate(entered)]

    def agreement(self, task: str) -> tuple[int, int, int]:
        """Pairs of entered models the paper orders: (agreeing and decided, differing and decided, undecided)."""
        agree = differ = undecided = 0
        cells = [c for (t, _), c in self.cells.items() if t == task and c.entered]
        for a, b in combinations(cells, 2):
            pa, pb = self.published(task, a.model), self.published(task, b.model)
            if pa is None or pb is None or pa.value is None or pb.value is None or pa.value == pb.value:
                continue
            if not a.beyond.separated(b.beyond):
                undecided += 1
            elif (pa.value > pb.value) == (a.beyond.mean > b.beyond.mean):
                agree += 1
            else:
                differ += 1
        return agree, differ, undecided

    # ---- outputs ----------------------------------------------------------------------------------------------
    def markdown(self) -> str:
        c = self.config
        lines = [
            f"Score: the task's own (per-token or exact match), in %, mean ± 95% interval over {c.replicates()} "
            "(`mean (low-high)` where the interval is clipped to 0-100). "
            f"A model enters a task's extrapolation column only where every seed scores >= {c.threshold:.0%} inside "
            "its training range; otherwise the cell says `not learned` with its in-distribution score. `>` in the "
            "ranking marks a difference larger than both intervals; `≈` one they do not decide. `paper`: the value of "
            "the config's `[[published]]` entry for the cell, `not found` where one was searched for and not found, "
            "`-` where the config gives none.",
            "",
        ]
        for task in c.tasks:
            lines += [f"### {task}", "", "| model | in distribution | beyond (mean over lengths) | paper | source |",
                      "|---|---|---|---|---|"]  # fmt: skip
            for model in (m.label for m in c.models):
                cell = self.cells.get((task, model))
                if cell is None:
                    continue
                paper = self.published(task, model)
                value = "-" if paper is None else ("not found" if paper.value is None else f"{paper.value:g}")
                source = "" if paper is None else paper.source
                lines.append(
                    f"| {model} | {cell.inside.text(100, within=SCORE_RANGE)} | {cell.text()} | {value} | {source} |"
                )
            ranked = self.ranking(task)
            if ranked:
                order = " ".join(f"{cell.model} {'>' if above else '≈'}" for cell, above in ranked).rstrip(" >≈")
                lines += ["", f"Ranking beyond the training range: {order}"]
            agree, differ, undecided = self.agreement(task)
            if agree or differ or undecided:
                lines.append(
                    f"Against the paper's order of these models: {agree} pairs agree, {differ} differ (both decided "
                    f"by the intervals), {undecided} undecided at this scale."
                )
            lines.append("")
        return "\n".join(lines)

    def csv_text(self) -> str:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        data = self.config.data_seeds is not None  # a data_seed column where the study sets data seeds apart
        writer.writerow(["task", "model", "seed", *(["data_seed"] if data else []), "length", "part", "score",
                         "per_token", "exact", "samples"])  # fmt: skip
        for u in self.units:
            for part, scores in (("inside", u.inside), ("beyond", u.beyond)):
                for s in scores:
                    writer.writerow([u.task, u.model, u.seed, *([u.data_seed] if data else []), s.length, part,
                                     f"{s.score:.6f}", f"{s.per_token:.6f}", f"{s.exact:.6f}", s.samples])  # fmt: skip
        return buffer.getvalue()

    def to_dict(self) -> dict[str, Any]:
        return {
            "cells": [c.to_dict() for c in self.cells.values()],
            "units": [u.to_dict() for u in self.units],
            "compute_minutes": round(sum(u.train_seconds + u.score_seconds for u in self.units) / 60, 1),
        }

    def plot(self, path: Path) -> Path:
        """One panel per task: score against length per model (mean over seeds, 95% band), the training range's
        end marked."""
        plt = pyplot()
        tasks = self.config.tasks
        fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.2), squeeze=False)
        for ax, task in zip(axes[0], tasks, strict=True):
            for model in (m.label for m in self.config.models):
                cell = self.cells.get((task, model))
                if cell is None:
                    continue
                xs = sorted(cell.curve)
                mean = [cell.curve[n].mean for n in xs]
                half = [0.0 if math.isnan(cell.curve[n].half) else cell.curve[n].half for n in xs]
                (line,) = ax.plot(xs, mean, label=model, linewidth=1.2)
                low = [m - h for m, h in zip(mean, half, strict=True)]
                high = [m + h for m, h in zip(mean, half, strict=True)]
                ax.fill_between(xs, low, high, alpha=0.2, color=line.get_color())
            trained = max(s.length for u in self.units if u.task == task for s in u.inside)
            ax.axvline(trained, color="grey", linestyle="--", linewidth=0.8)
            ax.set_title(task, fontsize=9)
            ax.set_xlabel("task length")
            ax.set_ylim(0, 1.02)
        axes[0][0].set_ylabel("score")
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7)
        return save_figure(fig, path)

    def write(self, out: Path, header: list[str]) -> Path:
        """report.md (header, then the tables), results.csv, study.json and plots/accuracy.png in `out`."""
        plot = self.plot(out / "plots" / "accuracy.png")
        text = "\n".join([*header, self.markdown(), f"![score against length]({plot.relative_to(out)})", ""])
        atomic_write_text(out / "results.csv", self.csv_text())
        atomic_write_json(out / "study.json", self.to_dict())
        atomic_write_text(out / "report.md", text)
        return out / "report.md"


def write_length_scores(scores: list[LengthScore], task: str, trained: int, out: Path) -> str:
    """One model's scores by length as scores.csv and plots/scores.png in `out`; returns a markdown table."""
    atomic_write_text(
        out / "scores.csv",
        "length,score,per_token,exact,samples\n"
        + "".join(f"{s.length},{s.score:.6f},{s.per_token:.6f},{s.exact:.6f},{s.samples}\n" for s in scores),
    )
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot([s.length for s in scores], [s.score for s in scores], marker=".", linewidth=1)
    ax.axvline(trained, color="grey", linestyle="--", linewidth=0.8)
    ax.set(xlabel="task length", ylabel="score", title=task, ylim=(0, 1.02))
    save_figure(fig, out / "plots" / "scores.png")
    rows = [f"| {s.length} | {100 * s.score:.1f} | {100 * s.per_token:.1f} | {100 * s.exact:.1f} |" for s in scores]
    return "\n".join(["| length | score % | per-token % | exact % |", "|---|---|---|---|", *rows])
