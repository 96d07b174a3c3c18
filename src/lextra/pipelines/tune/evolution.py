"""LongRoPE's evolutionary search of per-dimension RoPE rescale factors (Ding et al. 2024, arXiv 2402.13753), as
microsoft/LongRoPE `evolution/` does it ("dim_mono"; docs/tuning.md). Factors are one per rotated pair k
(inv_freq_k / factor_k), on a grid of `step` from 1 to s = T / L, never decreasing with k; a mutation gives up after
`max_mutation_try` sweeps, and the search stops when the budget is spent.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass

from lextra.extend import InferenceSetup
from lextra.pipelines.tune.search import SearchStoppedError, Tracker, Trial
from lextra.positions.scaling import RopeScaling, frequencies, rope_inv_freq

Factors = tuple[float, ...]


@dataclass(frozen=True)
class EvolutionConfig:
    """LongRoPE's hyper-parameters (`dim_mono_llama.json`) and the grid step of the factors."""

    population: int = 64
    parents: int = 32
    mutations: int = 16
    crossovers: int = 16
    max_crossover_try: int = 20
    max_mutation_try: int = 1000
    step: float = 0.01
    iterations: int = 40

    def __post_init__(self) -> None:
        from lextra.validate import check_int, check_range

        for name in ("population", "parents", "iterations", "max_crossover_try", "max_mutation_try"):
            check_int(f"evolution: {name}", getattr(self, name), 1)
        for name in ("mutations", "crossovers"):
            check_int(f"evolution: {name}", getattr(self, name), 0)
        check_int("evolution: parents", self.parents, 1, self.population, hint="parents <= population (LongRoPE)")
        check_range("evolution: step", self.step, 0.0, low_open=True)


def monotone(factors: Sequence[float]) -> bool:
    """LongRoPE's constraint: factors never decrease along the dimensions."""
    return all(b >= a for a, b in itertools.pairwise(factors))


def _grid(low: float, high: float, step: float) -> list[float]:
    """numpy.arange(low, high, step) as the code builds its choices (end excluded)."""
    count = max(0, int(-(-(high - low) // step)))
    return [round(low + i * step, 10) for i in range(count) if low + i * step < high - 1e-12]


def mutate(
    factors: Factors, scale: float, step: float, seen: set[Factors], rng: random.Random, tries: int = 1000
) -> Factors | None:
    """LongRoPE's `dim_mono` mutation (module docstring): a new monotone vector, or None after `tries` sweeps."""
    top = max(scale, 1.0)
    current = list(factors)
    for _ in range(tries):
        if rng.random() < 0.3:
            for dim in range(len(current)):
                if dim == 0:
                    choices = _grid(1.0, current[1], step) if len(current) > 1 else _grid(1.0, top + step, step)
                elif dim == len(current) - 1:
                    choices = _grid(current[dim - 1], top + step, step)
                else:
                    choices = _grid(current[dim - 1], current[dim + 1] + step, step)
                if choices:
                    current[dim] = choices[rng.randrange(len(choices))]
        candidate = tuple(current)
        if candidate not in seen and monotone(candidate):
            return candidate
    return None


def crossover(first: Factors, second: Factors, seen: set[Factors], rng: random.Random, tries: int) -> Factors | None:
    """LongRoPE's `dim_mono` crossover (module docstring): a new monotone child, or None."""
    if all(abs(a - b) < 1e-8 for a, b in zip(first, second, strict=True)):
        return None
    child = list(first)
    for _ in range(tries):
        for i in range(len(child)):
            if rng.random() < 0.3:
                if rng.random() < 0.5:
                    child[i] = second[i]
                candidate = tuple(child)
                if candidate in seen or not monotone(candidate):
                    continue
                return candidate
    return None


def yarn_factors(head_dim: int, base: float, train_len: int, scale: float) -> Factors:
    """LongRoPE's initial factors: theta_k / inv_freq_k of YaRN at scale s (beta_fast 32, beta_slow 1)."""
    scaling = RopeScaling("yarn", factor=scale, original_max_position_embeddings=train_len)
    yarn, _ = frequencies(scaling, head_dim, base, None)
    plain = rope_inv_freq(head_dim, base)
    return tuple(round(float(v), 6) for v in (plain / yarn.to(plain.dtype)).tolist())


def longrope_setup(factors: Sequence[float], scale: float, train_len: int) -> InferenceSetup:
    """The setup of a factor vector: LongRoPE scaling with these `long_factor`s past L and ones up to L (the
    short factors LongRoPE keeps for short inputs), default attention factor sqrt(1 + ln s / ln L)."""
    half = len(factors)
    return InferenceSetup(
        rope_scaling={
            "rope_type": "longrope",
            "factor": float(scale),
            "original_max_position_embeddings": int(train_len),
            "short_factor": [1.0] * half,
            "long_factor": [float(f) for f in factors],
        },
        extension=None,
    )


def evolution_search(
    initial: Factors,
    scale: float,
    train_len: int,
    tracker: Tracker,
    config: EvolutionConfig,
    rng: random.Random,
) -> Trial | None:
    """LongRoPE's search from `initial` (module docstring) within the tracker's budget; the best trial."""
    seen: set[Factors] = set()
    scored: dict[Factors, Trial] = {}
    best: Trial | None = None

    def measure(factors: Factors) -> None:
        nonlocal best
        seen.add(factors)
        trial = tracker.evaluate("longrope", {"factors": list(factors)}, longrope_setup(factors, scale, train_len))
        scored[factors] = trial
        best = trial if best is None or trial.loss < best.loss else best

    try:
        measure(tuple(initial))
        population = [tuple(initial)]
        for _ in range(config.population - 1):
            child = mutate(tuple(initial), scale, config.step, seen, rng, config.max_mutation_try)
            if child is None:
                break
            measure(child)
            population.append(child)
        for _ in range(config.iterations):
            parents = sorted(population, key=lambda f: scored[f].loss)[: config.parents]
            population = list(parents)
            for _ in range(config.mutations):
                child = mutate(
                    parents[rng.randrange(len(parents))], scale, config.step, seen, rng, config.max_mutation_try
                )
                if child is not None:
                    measure(child)
                    population.append(child)
            for _ in range(config.crossovers if len(parents) > 1 else 0):
                i, j = sorted(rng.sample(range(len(parents)), 2))
                child = crossover(parents[i], parents[j], seen, rng, config.max_crossover_try)
                if child is None:
                    child = mutate(parents[i], scale, config.step, seen, rng, config.max_mutation_try)
                if child is not None:
                    measure(child)
                    population.append(child)
    except SearchStoppedError:
        pass
    return best
