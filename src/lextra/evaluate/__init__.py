"""Evaluation: perplexity under several protocols at many lengths; retrieval tasks live in `evaluate.retrieval`."""

from lextra.evaluate.perplexity import (
    PROTOCOLS,
    EvalConfig,
    Evaluation,
    PerplexityPoint,
    evaluate_model,
    evaluation_documents,
)

__all__ = ["PROTOCOLS", "EvalConfig", "Evaluation", "PerplexityPoint", "evaluate_model", "evaluation_documents"]
