"""`lextra tune`'s search: the methods in turn on one objective within one time budget, each method given an equal
share of what is left when its turn comes; the record of every candidate and the best setup."""

from __future__ import annotations

import contextlib
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from lextra.errors import ConfigError, LengthError
from lextra.extend import InferenceSetup
from lextra.pipelines.tune.evolution import EvolutionConfig, evolution_search, yarn_factors
from lextra.pipelines.tune.search import Budget, Objective, SearchStoppedError, Tracker, Trial, coordinate_search
from lextra.pipelines.tune.space import SPACES

#: the reference every search measures first: the model as trained (no scaling, no extension)
BASELINE = "none"


@dataclass(frozen=True)
class TuneSettings:
    """What is searched: the methods (`space.METHODS`), the target length T, the budget in seconds (None: until
    every search ends), the grid limit of the coordinate search, LongRoPE's evolution and the seed."""

    methods: tuple[str, ...]
    length: int
    budget: float | None = None
    max_grid: int = 16
    evolution: EvolutionConfig = field(default_factory=EvolutionConfig)
    seed: int = 0


@dataclass
class TuneResult:
    """Every candidate tried, the best, each method's defaults against its best, the time spent and why it stopped
    (None: every search ended; "budget"; "interrupted")."""

    trials: list[Trial]
    best: Trial | None
    seconds: float
    stopped: str | None
    budget: float | None

    def per_method(self) -> dict[str, dict[str, Any]]:
        """Each method's first candidate (its defaults; LongRoPE: YaRN's factors) and its best."""
        found: dict[str, dict[str, Any]] = {}
        for trial in self.trials:
            entry = found.setdefault(trial.method, {"default": trial, "best": trial, "candidates": 0, "seconds": 0.0})
            entry["candidates"] += 1
            entry["seconds"] += trial.seconds
            if trial.loss < entry["best"].loss:
                entry["best"] = trial
        return found

    def record(self) -> dict[str, Any]:
        """The search's record as a setup file stores it (under `tune`)."""
        return {
            "seconds": round(self.seconds, 3),
            "budget_s": self.budget,
            "stopped": self.stopped,
            "candidates": len(self.trials),
            "tokens": sum(t.tokens for t in self.trials),
            "best": None if self.best is None else self.best.to_dict(),
            "per_method": {
                name: {
                    "default": entry["default"].to_dict(),
                    "best": entry["best"].to_dict(),
                    "candidates": entry["candidates"],
                    "seconds": round(entry["seconds"], 3),
                }
                for name, entry in self.per_method().items()
            },
            "trials": [t.to_dict() for t in self.trials],
        }


def run_search(
    objective: Objective,
    settings: TuneSettings,
    train_len: int,
    *,
    geometry: Callable[[], tuple[int, float]] | None = None,
    clock: Callable[[], float] = time.monotonic,
    stream: TextIO | None = sys.stderr,
) -> TuneResult:
    """The baseline, then each method's search (`coordinate_search`, LongRoPE's `evolution_search` with the
    (D, base) `geometry` gives), within `settings.budget` on `clock`."""
    if settings.length <= train_len:
        raise ConfigError(f"--length {settings.length}: tune for a length beyond the model's L_tr = {train_len}")
    overall = Budget(settings.budget, clock)
    tracker = Tracker(objective, overall, stream=stream)
    scale = settings.length / train_len
    with contextlib.suppress(SearchStoppedError):
        tracker.evaluate(BASELINE, {}, InferenceSetup(rope_scaling=None, extension=None))
    for index, method in enumerate(settings.methods):
        if tracker.stopped == "interrupted":
            break
        share = None if settings.budget is None else overall.left() / (len(settings.methods) - index)
        tracker.limit = Budget(share, clock)
        tracker.stopped = None
        if method == "longrope":
            if geometry is None:
                raise ConfigError("LongRoPE's search needs the model's RoPE dimension and base")
            head_dim, base = geometry()
            initial = yarn_factors(head_dim, base, train_len, scale)
            evolution_search(initial, scale, train_len, tracker, settings.evolution, random.Random(settings.seed))
        else:
            coordinate_search(SPACES[method](train_len, settings.length), tracker, max_grid=settings.max_grid)
    stopped = tracker.stopped
    if stopped is None and settings.budget is not None and overall.left() <= 0:
        stopped = "budget"
    return TuneResult(tracker.trials, tracker.best, overall.elapsed(), stopped, settings.budget)


def verify(
    result: TuneResult,
    objective: Objective,
    *,
    clock: Callable[[], float] = time.monotonic,
    stream: TextIO | None = sys.stderr,
) -> list[dict[str, Any]]:
    """The baseline, each method's defaults and its best measured again by `objective` (e.g. at a longer length
    than the search's): one row each (the same setup once), with its cost in seconds."""
    rows: list[dict[str, Any]] = []
    done: dict[str, dict[str, Any]] = {}
    for method, entry in result.per_method().items():
        for kind in ("default", "best"):
            trial: Trial = entry[kind]
            key = repr(sorted(trial.setup.items()))
            if key not in done:
                began = clock()
                try:
                    score = objective(InferenceSetup(**trial.setup))
                except (ConfigError, LengthError) as err:  # e.g. Self-Extend reaching fewer tokens than this
                    done[key] = {"refused": str(err)}
                else:
                    done[key] = {"loss": score.loss, **score.parts, "seconds": round(clock() - began, 3)}
                if stream is not None:
                    print(f"verify {method} {kind}: {done[key]} in {clock() - began:.0f} s", file=stream)
            rows.append({"method": method, "kind": kind, "setup": trial.setup, **done[key]})
            if method == BASELINE:
                break
    return rows
