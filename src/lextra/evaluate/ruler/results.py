"""RULER results: a cell per (task, length), the average per length, and the effective length.

Effective length (RULER, Hsieh et al. 2024, arXiv 2404.06654): the largest length whose average score is at or
above the threshold while every shorter length evaluated is too; None when even the shortest falls below it. The
default threshold, 85.6, is RULER's (Llama-2-7B's average at 4k)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lextra.serialize import Serializable, options, rounded

#: RULER's threshold: Llama-2-7B's average score at 4k tokens
DEFAULT_THRESHOLD = 85.6


def total_if_known(parts: Sequence[float | None]) -> float | None:
    """The sum of `parts` (exactly rounded, so in any order), or None when any part was not recorded."""
    known = [p for p in parts if p is not None]
    return math.fsum(known) if len(known) == len(parts) else None


@dataclass(frozen=True)
class RulerExample(Serializable):
    """A sample's references, what the model answered, and its score (0..1)."""

    references: list[str]
    output: str
    score: float


@dataclass(frozen=True)
class RulerAnswer(Serializable):
    """Sample `index` of a cell: its references, the answer, its score (0..1), its seconds and its share of its
    batch's prefill (None when not recorded)."""

    index: int = field(metadata=options(coerce=True))
    references: list[str]
    output: str
    score: float = field(metadata=options(coerce=True))
    seconds: float = field(metadata=options(encode=rounded(3), coerce=True))
    prefill_seconds: float | None = field(
        default=None, metadata=options(omit_none=True, encode=rounded(3), coerce=True)
    )
    #: the question asked, kept where the task's score reads it (BABILong's); None for RULER's tasks
    question: str | None = field(default=None, metadata=options(omit_none=True))

    def example(self) -> RulerExample:
        return RulerExample(list(self.references), self.output, self.score)


@dataclass
class RulerCell(Serializable):
    """One (task, length): RULER's score (0..100), its Wilson 95% interval, the samples, the seconds taken and the
    part of them prefills took (None when not recorded): seconds / prefill_seconds is a sample's cost in forwards."""

    task: str
    length: int = field(metadata=options(coerce=True))
    score: float
    low: float
    high: float
    samples: int
    seconds: float
    examples: list[RulerExample] = field(default_factory=list)
    prefill_seconds: float | None = field(default=None, metadata=options(omit_none=True))


def effective_length(averages: Mapping[int, float], threshold: float = DEFAULT_THRESHOLD) -> int | None:
    """The largest length whose average, and every shorter length's, is at least `threshold` (None if none)."""
    best = None
    for length in sorted(averages):
        if averages[length] < threshold:
            break
        best = length
    return best


@dataclass
class RulerResult(Serializable):
    """A model's RULER cells over tasks x lengths (`to_dict` is the JSON; averages and the effective length are
    derived from the cells, so a reloaded result agrees)."""

    serialized_properties = ("averages", "effective_length", "seconds")

    label: str
    tasks: list[str]
    lengths: list[int] = field(metadata=options(coerce=True))
    samples: int
    seed: int
    threshold: float
    #: task -> length -> cell
    cells: dict[str, dict[int, RulerCell]]
    chat: bool = False
    #: the model folder or name, when the caller records it
    model: str | None = field(default=None, metadata=options(omit_none=True))
    #: the suite the tasks are from, when not RULER's (BABILong)
    suite: str | None = field(default=None, metadata=options(omit_none=True))

    @property
    def suite_name(self) -> str:
        return self.suite or "RULER"

    def cell(self, task: str, length: int) -> RulerCell:
        return self.cells[task][int(length)]

    @property
    def averages(self) -> dict[int, float]:
        """The mean score over the tasks at each length."""
        return {n: sum(self.cell(t, n).score for t in self.tasks) / len(self.tasks) for n in self.lengths}

    @property
    def effective_length(self) -> int | None:
        return effective_length(self.averages, self.threshold)

    @property
    def seconds(self) -> float:
        """Compute seconds of every cell, summed exactly (the same total in any order)."""
        return math.fsum(c.seconds for row in self.cells.values() for c in row.values())

    @property
    def prefill_seconds(self) -> float | None:
        """The part of `seconds` the prefills took, when every cell recorded it."""
        return total_if_known([c.prefill_seconds for row in self.cells.values() for c in row.values()])

    def records(self) -> list[dict[str, Any]]:
        """CSV rows: one per cell, then one `average` row per length (no interval: tasks differ in kind)."""
        rows: list[dict[str, Any]] = [
            {
                "model": self.label,
                "task": t,
                "length": n,
                "score": round(self.cell(t, n).score, 2),
                "low": round(self.cell(t, n).low, 2),
                "high": round(self.cell(t, n).high, 2),
                "samples": self.cell(t, n).samples,
                "seconds": round(self.cell(t, n).seconds, 2),
            }
            for t in self.tasks
            for n in self.lengths
        ]
        for n, average in self.averages.items():
            row = {"model": self.label, "task": "average", "length": n, "score": round(average, 2), "low": "",
                   "high": "", "samples": self.samples, "seconds": ""}  # fmt: skip
            rows.append(row)
        return rows


def sorted_lengths(lengths: Sequence[int]) -> list[int]:
    """Distinct lengths, ascending (the order effective lengths are read in)."""
    return sorted({int(n) for n in lengths})
