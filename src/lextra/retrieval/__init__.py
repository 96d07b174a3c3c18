"""Retrieval beyond the training length: passkey, lines, key-value and code-key prompts, training batches for
them (registered in `lextra.train.BATCH_SOURCES` on import), greedy and likelihood-rank scoring, and next-line
code completion by context length."""

from lextra.retrieval.sources import RetrievalSource, TaskSpec, parse_task_spec, register_task_spec
from lextra.retrieval.tasks import TASK_NAMES, RetrievalTask, Sample, build_task

__all__ = [
    "TASK_NAMES",
    "RetrievalSource",
    "RetrievalTask",
    "Sample",
    "TaskSpec",
    "build_task",
    "parse_task_spec",
    "register_task_spec",
]
