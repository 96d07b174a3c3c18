"""`lextra tune`: search the settings of training-free extension methods and RoPE scalings for a target length within
a time budget, and write the best as a setup file (`lextra.extend.setup_file`)."""

from lextra.pipelines.tune.evolution import EvolutionConfig, crossover, evolution_search, monotone, mutate, yarn_factors
from lextra.pipelines.tune.objective import OBJECTIVES, MeasuredObjective, ObjectiveSettings, reset, rope_geometry
from lextra.pipelines.tune.run import TuneSettings, run_search, verify
from lextra.pipelines.tune.search import Budget, Score, Tracker, coordinate_search
from lextra.pipelines.tune.space import METHODS, parse_methods

__all__ = [
    "METHODS",
    "OBJECTIVES",
    "Budget",
    "EvolutionConfig",
    "MeasuredObjective",
    "ObjectiveSettings",
    "Score",
    "Tracker",
    "TuneSettings",
    "coordinate_search",
    "crossover",
    "evolution_search",
    "monotone",
    "mutate",
    "parse_methods",
    "reset",
    "rope_geometry",
    "run_search",
    "verify",
    "yarn_factors",
]
