"""Retrieval beyond the training length: passkey, lines, key-value and code-key prompts, training batches for
them (registered in `lextra.train.BATCH_SOURCES` on import), greedy and likelihood-rank scoring, and next-line
code completion by context length."""

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
    default_lengths,
    evaluate_retrieval,
)
from lextra.evaluate.retrieval.sources import RetrievalSource, evaluation_task, register_task_spec
from lextra.evaluate.retrieval.tasks import TASK_NAMES, TASKS, RetrievalTask, Sample, build_task
from lextra.training_tasks import TaskSpec, parse_task_spec

__all__ = [
    "DEFAULT_DEPTHS",
    "DEFAULT_MULTIPLES",
    "TASKS",
    "TASK_NAMES",
    "CompletionBucket",
    "CompletionExample",
    "CompletionResult",
    "LineScores",
    "RetrievalCell",
    "RetrievalExample",
    "RetrievalResult",
    "RetrievalScores",
    "RetrievalSource",
    "RetrievalTask",
    "Sample",
    "TaskSpec",
    "build_task",
    "default_lengths",
    "evaluate_completion",
    "evaluate_retrieval",
    "evaluation_task",
    "parse_task_spec",
    "register_task_spec",
]
