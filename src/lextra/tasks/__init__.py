"""Seeded generators and scorers of the field's length-generalization tasks (`lextra.tasks.base`), registered in
`lextra.training_tasks.TRAINING_TASKS`; `lextra.tasks.encoding` turns their examples into model tensors."""

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
