"""Retrieval beyond the training length: the tasks of `lextra.tasks.retrieval` scored over a length x depth grid
(greedy and likelihood-rank scoring), and next-line code completion by context length."""

from lextra.evaluate.retrieval.completion import (
    CompletionBucket,
    CompletionExample,
    CompletionResult,
    LineScores,
    evaluate_completion,
)
from lextra.evaluate.retrieval.evaluate import (
    DEFAULT_DEPTHS,
    DEFAULT_MULTIPLES,
    RetrievalCell,
    RetrievalExample,
    RetrievalResult,
    RetrievalScores,
    check_retrieval_task,
    default_lengths,
    evaluate_retrieval,
    evaluation_task,
)

__all__ = [
    "DEFAULT_DEPTHS",
    "DEFAULT_MULTIPLES",
    "CompletionBucket",
    "CompletionExample",
    "CompletionResult",
    "LineScores",
    "RetrievalCell",
    "RetrievalExample",
    "RetrievalResult",
    "RetrievalScores",
    "check_retrieval_task",
    "default_lengths",
    "evaluate_completion",
    "evaluate_retrieval",
    "evaluation_task",
]
