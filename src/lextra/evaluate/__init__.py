"""Evaluation: perplexity under several protocols at many lengths; retrieval tasks live in `evaluate.retrieval`."""

from lextra.evaluate.perplexity import PROTOCOLS, EvalConfig, evaluate_model, evaluation_documents

__all__ = ["PROTOCOLS", "EvalConfig", "evaluate_model", "evaluation_documents"]
