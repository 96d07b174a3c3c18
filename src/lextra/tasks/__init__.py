"""The tasks a model trains and is tested on, each a seeded generator registered in its registry: the field's
length-generalization tasks (`lextra.tasks.base`; `lextra.tasks.encoding` turns their examples into model
tensors), retrieval prompts (`lextra.tasks.retrieval`) and RULER's (`lextra.tasks.ruler`), all of them training
tasks of `lextra.tasks.registry.TRAINING_TASKS` (retrieval and RULER rows through `lextra.tasks.rows`)."""

from lextra.tasks import registered  # noqa: F401  (registers every task module of the package)
from lextra.tasks.base import (
    PAD,
    SPECIALS,
    AlgorithmicTask,
    LengthRange,
    Suite,
    TaskBatch,
    algorithmic_task,
    build_task,
    check_task_mask,
    task_rng,
)
from lextra.tasks.encoding import IGNORE, EncodedBatch, TaskBatches, encode, generate_rows, parse_lengths

__all__ = [
    "IGNORE",
    "PAD",
    "SPECIALS",
    "AlgorithmicTask",
    "EncodedBatch",
    "LengthRange",
    "Suite",
    "TaskBatch",
    "TaskBatches",
    "algorithmic_task",
    "build_task",
    "check_task_mask",
    "encode",
    "generate_rows",
    "parse_lengths",
    "task_rng",
]
