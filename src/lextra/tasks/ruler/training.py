"""Training rows from the RULER generators, so a small model can be fine-tuned on the suite's formats at L_tr and
then evaluated on them at longer lengths: `lextra retrieval train --task ruler.niah+lm`.

Task names: `ruler.<task>` for each task of `RULER_TASKS` and `ruler.niah` (a random one of the eight
needle-in-a-haystack variants per row). A row is a RULER prompt followed by its answer, the references joined
by ", " after a space and ending with "."; the whole row is exactly the training length. Rows are drawn from the
training run's own generator (not from RULER's per-sample seeds) and essays from the corpus's train split, while
evaluation prompts hide their needles in the test split.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from lextra.data import Tokenizer
from lextra.data.prepare import PreparedData
from lextra.errors import ConfigError
from lextra.tasks.registry import TRAINING_TASKS, TrainingTask
from lextra.tasks.ruler.haystack import DEFAULT_HAYSTACK, haystack_documents
from lextra.tasks.ruler.tasks import RULER_TASKS, RulerTask, build_ruler_task

#: the needle-in-a-haystack tasks `ruler.niah` mixes
NIAH_TASKS = tuple(name for name in RULER_TASKS.names() if name.startswith("niah_"))


class RulerRows:
    """Training rows of one or more RULER tasks (one task per row, chosen by the row's generator)."""

    def __init__(self, name: str, tasks: Sequence[RulerTask]) -> None:
        if not tasks:
            raise ConfigError(f"training task {name!r} has no RULER tasks")
        self.name, self.tasks = name, list(tasks)

    def training_row(self, length: int, rng: random.Random) -> list[int]:
        """One task's `RulerTask.training_row`, the task drawn from `rng`."""
        return rng.choice(self.tasks).training_row(length, rng)

    def check(self, length: int) -> None:
        """Draw one row of each task at `length` now, so a too-short training length fails before training."""
        for task in self.tasks:
            try:
                task.training_row(length, random.Random(0))
            except ConfigError as error:
                raise ConfigError(f"training task {self.name!r} at --train-len {length - 1}: {error}") from None


def build_ruler_rows(name: str, tokenizer: Tokenizer, haystack: str = DEFAULT_HAYSTACK) -> RulerRows:
    """`ruler.niah` or `ruler.<task>` over `tokenizer`; an essay haystack reads the train split of `haystack`."""
    short = name.removeprefix("ruler.")
    names = list(NIAH_TASKS) if short == "niah" else [short]
    tasks = []
    for task_name in names:
        cls = RULER_TASKS.get(task_name)
        documents = haystack_documents(haystack, split="train") if cls.needs_documents else None
        tasks.append(build_ruler_task(task_name, tokenizer, documents))
    return RulerRows(name, tasks)


def _register_rows(name: str) -> None:
    """`name` (`ruler.niah`, `ruler.<task>`) as a training task of RULER rows, checked at the run's length."""

    class RulerTraining(TrainingTask):
        summary = "RULER prompts and answers as training rows (evaluated with `lextra ruler`)"
        retrieval_evaluated = False

        @classmethod
        def rows(cls, config: Any, data: PreparedData, options: dict[str, Any]) -> RulerRows:
            rows = build_ruler_rows(name, data.tokenizer)
            rows.check(config.model.train_len + 1)
            return rows

    TRAINING_TASKS.register(name)(RulerTraining)


#: the training task names this module adds to `TRAINING_TASKS`
RULER_TRAINING_TASKS = ("ruler.niah", *(f"ruler.{name}" for name in RULER_TASKS.names()))

for _name in RULER_TRAINING_TASKS:
    _register_rows(_name)
