"""Pipelines: orchestration over the library (compare, study, analyses over checkpoints), public helpers only."""
