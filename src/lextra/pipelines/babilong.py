"""`lextra babilong`: BABILong's qa1-qa5 run as `lextra ruler` runs RULER (`run_ruler` with `BabilongSettings`), and
written out as offline lm-eval tasks (`write_task_yamls`: a jsonl of samples and a YAML per (task, length), scored
through `lextra.evaluate.babilong.process_results`, so lextra must be installed where lm-eval runs)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from lextra.data import Document, Tokenizer
from lextra.evaluate.babilong import BABILONG_TASKS, LABELS, BabilongTask, build_babilong_task
from lextra.io import atomic_write_text
from lextra.pipelines.ruler import RulerSettings
from lextra.registry import Registry
from lextra.tasks.ruler import ChatFormat, RulerTask, haystack_documents

#: the tag every written task carries (`--tasks babilong_offline` runs them all)
TAG = "babilong_offline"
UTILS = '"""lm-eval hooks of lextra\'s offline BABILong tasks (written by `lextra babilong tasks`)."""\n\n' \
    "from lextra.evaluate.babilong import process_results  # noqa: F401\n"  # fmt: skip


@dataclass
class BabilongSettings(RulerSettings):
    """`RulerSettings` over BABILong's tasks (default all five)."""

    tasks: list[str] = field(default_factory=lambda: BABILONG_TASKS.names())
    registry: ClassVar[Registry[RulerTask]] = BABILONG_TASKS
    suite: ClassVar[str] = "BABILong"

    def build(self, tokenizer: Tokenizer, documents: Sequence[Document] | None, chat: ChatFormat | None):
        """The tasks, their facts hidden in `documents` (default: the haystack corpus's test split)."""
        documents = documents if documents is not None else haystack_documents(self.haystack)
        return {n: build_babilong_task(n, tokenizer, documents, chat, **self.options.get(n, {})) for n in self.tasks}


def write_task_yamls(
    out: str | Path, settings: BabilongSettings, tokenizer: Tokenizer, documents: Sequence[Document] | None = None
) -> list[str]:
    """The samples of every (task, length) of `settings` (lengths as given) as lm-eval tasks in `out`; their names."""
    settings.validate()
    if not settings.lengths:
        from lextra.errors import ConfigError

        raise ConfigError("writing BABILong tasks needs --lengths (token lengths of the prompts)")
    out = Path(out)
    tasks = settings.build(tokenizer, documents, None)
    names = []
    for name, task in tasks.items():
        assert isinstance(task, BabilongTask)
        for length in settings.resolved_lengths(2):
            rows = []
            for index in range(settings.samples):
                sample = task.sample(task.prompt_tokens(length, settings.prompt_length), index, settings.seed)
                rows.append({"input": sample.text, "target": sample.references[0], "question": sample.question,
                             "labels": list(LABELS[task.qa]), "index": index})  # fmt: skip
            task_name = f"{TAG}_{name}_{length}"
            data = out / f"{task_name}.jsonl"
            atomic_write_text(data, "".join(json.dumps(r) + "\n" for r in rows))
            atomic_write_text(out / f"{task_name}.yaml", task_yaml(task_name, data.resolve(), task.budget))
            names.append(task_name)
    atomic_write_text(out / "utils.py", UTILS)
    return names


def task_yaml(name: str, data: Path, budget: int) -> str:
    """One lm-eval task: greedy generation of `budget` tokens after the sample's prompt, BABILong's accuracy."""
    spec: dict[str, Any] = {
        "task": name,
        "tag": [TAG],
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data)}},
        "test_split": "test",
        "output_type": "generate_until",
        "doc_to_text": "{{input}}",
        "doc_to_target": "{{target}}",
        "generation_kwargs": {"until": [], "max_gen_toks": budget, "do_sample": False, "temperature": 0.0},
        "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
    }
    lines = [f"{key}: {json.dumps(value)}" for key, value in spec.items()]
    lines.insert(lines.index('output_type: "generate_until"'), "process_results: !function utils.process_results")
    return "\n".join(lines) + "\n"
