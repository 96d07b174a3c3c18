"""`lextra study` on a config with `kind = "tasks"`: length-generalization tasks, several seeds, intervals and the
papers' values side by side."""

from lextra.pipelines.task_study.config import Published, TaskModelSpec, TaskStudyConfig, parse_task_study
from lextra.pipelines.task_study.run import TaskStudy

__all__ = ["Published", "TaskModelSpec", "TaskStudy", "TaskStudyConfig", "parse_task_study"]
