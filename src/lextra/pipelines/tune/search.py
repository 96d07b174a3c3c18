"""The searchers' shared parts -- a time budget, the record of every candidate tried, progress lines -- and the grid /
coordinate search over a method's discrete settings. An objective maps a candidate's `InferenceSetup` to a `Score`
(lower `loss` is better); a candidate starts only when the mean cost so far fits in what is left of the budget."""

from __future__ import annotations

import itertools
import json
import math
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

from lextra.errors import ConfigError, LengthError
from lextra.extend import InferenceSetup
from lextra.extend.setup_file import setup_fields, setup_summary
from lextra.pipelines.tune.space import MethodSpace, Values


@dataclass(frozen=True)
class Score:
    """What a candidate measured: `loss` (lower is better) and its parts (perplexity, passkey accuracy...)."""

    loss: float
    parts: dict[str, float] = field(default_factory=dict)
    tokens: int = 0


Objective = Callable[[InferenceSetup], Score]


class Budget:
    """A wall-clock budget in seconds on `clock` (time.monotonic; tests pass a fake one)."""

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.clock = clock
        self.start = clock()

    def elapsed(self) -> float:
        return self.clock() - self.start

    def left(self) -> float:
        return float("inf") if self.seconds is None else self.seconds - self.elapsed()

    def allows(self, expected_cost: float) -> bool:
        """Whether a candidate expected to cost `expected_cost` seconds ends within the budget."""
        return self.left() > expected_cost


@dataclass
class Trial:
    """One candidate tried: its method, values, setup fields, score and cost."""

    method: str
    values: Values
    setup: dict[str, Any]
    loss: float
    parts: dict[str, float]
    seconds: float
    tokens: int
    #: why the model refused this candidate (its loss is then infinite), or None
    refused: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "values": self.values,
            "setup": self.setup,
            "loss": None if math.isinf(self.loss) else self.loss,
            **self.parts,
            "seconds": round(self.seconds, 3),
            "tokens": self.tokens,
            **({"refused": self.refused} if self.refused else {}),
        }


class SearchStoppedError(Exception):
    """The budget is spent (or Ctrl-C): the search ends with the best so far."""


class Tracker:
    """Runs candidates through the objective within the budget, remembers every one (no candidate runs twice),
    keeps the best, and prints one progress line per candidate (tokens/s, ETA, best so far)."""

    def __init__(self, objective: Objective, budget: Budget, *, stream: TextIO | None = sys.stderr) -> None:
        self.objective = objective
        self.budget = budget
        #: the budget a candidate must fit in (the whole budget, or the share of the method being searched)
        self.limit = budget
        self.stream = stream
        self.trials: list[Trial] = []
        self.seen: dict[str, Trial] = {}
        self.best: Trial | None = None
        self.stopped: str | None = None

    def mean_cost(self) -> float:
        return sum(t.seconds for t in self.trials) / len(self.trials) if self.trials else 0.0

    def evaluate(self, space_name: str, values: Values, setup: InferenceSetup) -> Trial:
        """The candidate's trial (measured now, or the earlier one of the same setup); raises SearchStoppedError
        when the budget cannot fit it."""
        stored = setup_fields(setup)
        key = json.dumps(stored, sort_keys=True)
        if key in self.seen:
            return self.seen[key]
        # a method's first candidate (its defaults) needs only the whole budget; later ones its share too
        first = not any(t.method == space_name for t in self.trials)
        fits = self.budget.allows(self.mean_cost()) and (first or self.limit.allows(self.mean_cost()))
        if self.stopped is not None or not fits:
            self.stopped = self.stopped or "budget"
            raise SearchStoppedError(self.stopped)
        began = self.budget.clock()
        refused = None
        try:
            score = self.objective(setup)
        except KeyboardInterrupt:
            self.stopped = "interrupted"
            raise SearchStoppedError(self.stopped) from None
        except (ConfigError, LengthError) as err:  # the model refuses this candidate: recorded, never the best
            score, refused = Score(math.inf), str(err)
        seconds = self.budget.clock() - began
        trial = Trial(space_name, dict(values), stored, score.loss, dict(score.parts), seconds, score.tokens, refused)
        self.trials.append(trial)
        self.seen[key] = trial
        if self.best is None or trial.loss < self.best.loss:
            self.best = trial
        self._progress(trial, setup)
        return trial

    def _progress(self, trial: Trial, setup: InferenceSetup) -> None:
        if self.stream is None:
            return
        elapsed = self.budget.elapsed()
        tokens = sum(t.tokens for t in self.trials)
        speed = tokens / max(elapsed, 1e-9)
        remaining = self.budget.left()
        parts = ", ".join(f"{k} {v:.4g}" for k, v in trial.parts.items() if "@" not in k)
        best = self.best
        assert best is not None
        shown = "" if remaining == float("inf") else f", ETA {_clock(remaining)}"
        print(
            f"tune [{len(self.trials)}] {setup_summary(setup)}: "
            f"loss {trial.loss:.4f} ({parts}) in {trial.seconds:.1f} s | best {best.loss:.4f} "
            f"{setup_summary(InferenceSetup(**best.setup))} | {speed:,.0f} tok/s, {_clock(elapsed)} elapsed{shown}",
            file=self.stream,
            flush=True,
        )


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s"


def grid(space: MethodSpace) -> Iterable[Values]:
    """Every valid combination, the defaults first."""
    yield dict(space.defaults)
    names = list(space.params)
    for combo in itertools.product(*(space.params[n] for n in names)):
        values = dict(zip(names, combo, strict=True))
        if values != space.defaults and space.valid(values):
            yield values


def coordinate_search(space: MethodSpace, tracker: Tracker, *, max_grid: int = 16) -> Trial | None:
    """The best setting of `space`: every combination when there are at most `max_grid`, else coordinate descent
    from the defaults (each parameter in turn tried at all its values with the others held, moving to the best;
    rounds until a round moves nothing). Returns the best trial of this space (None if none ran)."""
    best: Trial | None = None
    try:
        if space.size() <= max_grid:
            for values in grid(space):
                trial = tracker.evaluate(space.name, values, space.setup(values))
                best = trial if best is None or trial.loss < best.loss else best
            return best
        current = dict(space.defaults)
        best = tracker.evaluate(space.name, current, space.setup(current))
        moved = True
        while moved:
            moved = False
            for name, choices in space.params.items():
                for value in choices:
                    values = {**current, name: value}
                    if values == current or not space.valid(values):
                        continue
                    trial = tracker.evaluate(space.name, values, space.setup(values))
                    if trial.loss < best.loss:
                        best, moved = trial, True
                current = dict(best.values)
        return best
    except SearchStoppedError:
        return best
