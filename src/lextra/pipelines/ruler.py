"""`lextra ruler` and a study's `[ruler]` section: every (task, length) cell of the RULER suite, resumable.

Layout of the output folder: `cells/<task>-<length>.json` (one cell each, with the key it was computed for),
`results.json`, `results.csv`, `table.md`, `heatmap.png`. A cell whose file holds the same key (model, settings,
tokenizer, task options) is read back instead of recomputed, as `lextra study` cells are; any change recomputes it.
The pending cells of one length are computed together (their samples share batches) and saved when it is done.
Every (task, length) is drawn once before the model runs, so a length too short for a task, or a tokenizer that
cannot encode a prompt, fails at once.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from lextra.data import Document, Tokenizer
from lextra.errors import ConfigError
from lextra.evaluate.ruler import (
    DEFAULT_HAYSTACK,
    DEFAULT_THRESHOLD,
    RULER_TASK_NAMES,
    RULER_TASKS,
    ChatFormat,
    RulerCell,
    RulerResult,
    RulerTask,
    build_ruler_task,
    check_vocabulary,
    evaluate_length,
    haystack_documents,
    sorted_lengths,
)
from lextra.io import atomic_write_json
from lextra.reporting.ruler import save_ruler_outputs

#: lengths as multiples of L_tr when none are given
DEFAULT_MULTIPLES = (1, 2, 4)
#: the keys a study's [ruler] section takes
SECTION_KEYS = frozenset({"models", "tasks", "multiples", "samples", "seed", "threshold", "batch", "haystack"})


def parse_tasks(spec: str | Sequence[str]) -> list[str]:
    """`all`, a comma-separated string or a list of task names -> distinct known names, in the order given."""
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    names = [n.strip() for n in names if n.strip()]
    if names == ["all"]:
        return list(RULER_TASK_NAMES)
    if not names:
        raise ConfigError(f"--tasks needs 'all' or task names; known: {', '.join(RULER_TASK_NAMES)}")
    for name in names:
        if name not in RULER_TASK_NAMES:
            raise ConfigError(f"unknown RULER task {name!r}; use 'all' or names from: {', '.join(RULER_TASK_NAMES)}")
    return list(dict.fromkeys(names))


@dataclass
class RulerSettings:
    """What a RULER run evaluates: tasks, prompt lengths (default L_tr x `multiples`), samples per cell, the seed
    of the samples, the effective-length threshold, samples decoded together, task options, the essay corpus."""

    tasks: list[str] = field(default_factory=lambda: list(RULER_TASK_NAMES))
    lengths: list[int] | None = None
    multiples: tuple[int, ...] = DEFAULT_MULTIPLES
    samples: int = 10
    seed: int = 0
    threshold: float = DEFAULT_THRESHOLD
    batch_size: int = 8
    #: task -> {option: value}, e.g. {"vt": {"hops": 2}}
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    haystack: str = DEFAULT_HAYSTACK

    def resolved_lengths(self, train_len: int) -> list[int]:
        """The prompt lengths, ascending: the given ones, else L_tr x `multiples`."""
        return sorted_lengths(self.lengths or [train_len * m for m in self.multiples])

    def validate(self) -> RulerSettings:
        self.tasks = parse_tasks(self.tasks)
        for what, value in (("samples", self.samples), ("batch size", self.batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"RULER {what} must be an integer >= 1, got {value!r}")
        if self.lengths is not None and (not self.lengths or any(int(n) < 1 for n in self.lengths)):
            raise ConfigError(f"RULER lengths must be positive integers, got {self.lengths}")
        if not self.multiples or any(int(m) < 1 for m in self.multiples):
            raise ConfigError(f"RULER multiples of L_tr must be positive integers, got {list(self.multiples)}")
        if not 0.0 <= float(self.threshold) <= 100.0:
            raise ConfigError(f"the effective-length threshold is a score in [0, 100], got {self.threshold}")
        for name, options in self.options.items():
            RULER_TASKS.check_options(name, options)
        return self

    def build(self, tokenizer: Tokenizer, documents: Sequence[Document] | None, chat: ChatFormat | None):
        """The tasks, built for `tokenizer` (an essay haystack reads `documents`, default: `haystack`'s)."""
        if documents is None and any(RULER_TASKS.get(n).needs_documents for n in self.tasks):
            documents = haystack_documents(self.haystack)
        return {n: build_ruler_task(n, tokenizer, documents, chat, **self.options.get(n, {})) for n in self.tasks}


def settings_from_section(section: Mapping[str, Any]) -> RulerSettings:
    """A study's `[ruler]` section (keys `SECTION_KEYS`; `models` is read by the study) as validated settings."""
    unknown = sorted(set(section) - SECTION_KEYS)
    if unknown:
        raise ConfigError(f"[ruler]: unknown keys {unknown}; known: {sorted(SECTION_KEYS)}")
    settings = RulerSettings(
        tasks=parse_tasks(section.get("tasks", "all")),
        multiples=tuple(int(m) for m in section.get("multiples", DEFAULT_MULTIPLES)),
        samples=section.get("samples", 10),
        seed=section.get("seed", 0),
        threshold=float(section.get("threshold", DEFAULT_THRESHOLD)),
        batch_size=section.get("batch", 8),
        haystack=str(section.get("haystack", DEFAULT_HAYSTACK)),
    )
    return settings.validate()


def cell_path(out: Path, task: str, length: int) -> Path:
    return out / "cells" / f"{task}-{length}.json"


def read_cell(path: Path, key: Mapping[str, Any]) -> RulerCell | None:
    """The saved cell when its file holds `key`, else None."""
    if not path.exists():
        return None
    try:
        saved = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None  # a torn or foreign file: recompute it
    if saved.get("key") != json.loads(json.dumps(key)):
        return None
    return RulerCell.from_dict(saved["result"])


def cell_key(
    key: Mapping[str, Any] | None,
    label: str,
    task: RulerTask,
    length: int,
    settings: RulerSettings,
    tokenizer: Tokenizer,
    chat: ChatFormat | None,
    mask: str | None,
) -> dict[str, Any]:
    """What a cell's result depends on: the model (`key`), the method label, the task and its options, the
    length, samples and seed, the tokenizer, the chat wrapping, the mask and the essay corpus."""
    return {
        **(key or {}),
        "label": label,
        "task": task.name,
        "options": task.options,
        "length": length,
        "samples": settings.samples,
        "seed": settings.seed,
        "tokenizer": tokenizer.name,
        "chat": None if chat is None else [chat.prefix, chat.suffix],
        "mask": mask,
        "haystack": settings.haystack if task.needs_documents else None,
    }


def preflight(model: Any, tasks: Mapping[str, RulerTask], lengths: Sequence[int], seed: int) -> None:
    """Draw the first sample of every (task, length) so that bad lengths and tokenizers fail before any work."""
    for task in tasks.values():
        for length in lengths:
            check_vocabulary(model, [task.sample(length, 0, seed)], task.tokenizer)


def run_ruler(
    model: Any,
    tokenizer: Tokenizer,
    settings: RulerSettings,
    out: str | Path,
    *,
    documents: Sequence[Document] | None = None,
    chat: ChatFormat | None = None,
    mask: str | None = None,
    label: str = "",
    model_name: str | None = None,
    key: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> RulerResult:
    """Every (task, length) cell of `settings` for `model`, reusing saved cells whose key matches; writes the
    outputs in `out` and returns the result. `key` names the model (weights checksum, method labels): a cell
    computed for another key is recomputed. `model_name` (its folder or name) is recorded in the result. `mask`
    is a lextra GPT's mask (a Hugging Face adapter holds its own)."""
    settings.validate()
    out = Path(out)
    lengths = settings.resolved_lengths(model.config.train_len)
    tasks = settings.build(tokenizer, documents, chat)
    preflight(model, tasks, lengths, settings.seed)
    cells: dict[str, dict[int, RulerCell]] = {name: {} for name in tasks}
    bar = tqdm(total=len(tasks) * len(lengths), disable=not progress, desc=f"ruler {label}", file=sys.stderr)
    for length in lengths:
        keys = {
            name: cell_key(key, label, task, length, settings, tokenizer, chat, mask) for name, task in tasks.items()
        }
        pending = []
        for name, task in tasks.items():
            cell = read_cell(cell_path(out, name, length), keys[name])
            if cell is None:
                pending.append(task)
            else:
                cells[name][length] = cell
                bar.update(1)
        if pending:  # the tasks still to run at this length share batches
            computed = evaluate_length(
                model, pending, length, settings.samples, settings.seed, batch_size=settings.batch_size, mask=mask
            )
            for name, cell in computed.items():
                atomic_write_json(cell_path(out, name, length), {"key": keys[name], "result": cell.to_dict()})
                cells[name][length] = cell
                bar.update(1)
    bar.close()
    result = RulerResult(
        label=label,
        tasks=list(tasks),
        lengths=lengths,
        samples=settings.samples,
        seed=settings.seed,
        threshold=float(settings.threshold),
        cells=cells,
        chat=chat is not None,
        model=model_name,
    )
    save_ruler_outputs(out, result)
    return result
