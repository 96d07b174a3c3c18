"""`lextra ruler` and a study's `[ruler]` section: every (task, length) cell of the RULER suite, resumable.

A cell (`cells/<task>-<length>.json`) holds each sample's answer under the key it was computed for (not the number
of samples): a sample is a pure function of (task, length, index, seed), so a run decodes only the samples a cell
lacks, saving after every batch.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from tqdm import tqdm

from lextra.data import Document, Tokenizer
from lextra.errors import ConfigError, DataError
from lextra.evaluate.prefix import evaluation_prefix
from lextra.evaluate.ruler import (
    DEFAULT_THRESHOLD,
    RulerAnswer,
    RulerResult,
    answer_samples,
    cell_from_answers,
    check_vocabulary,
    sorted_lengths,
)
from lextra.extend import InferenceSetup
from lextra.io import atomic_write_json
from lextra.pipelines.log import log
from lextra.pipelines.sharing import wait_for
from lextra.registry import Registry, parse_spec, split_specs
from lextra.reporting.ruler import save_ruler_outputs
from lextra.tasks.ruler import (
    DEFAULT_HAYSTACK,
    PROMPT_LENGTHS,
    RULER_TASKS,
    ChatFormat,
    PromptTooShortError,
    RulerTask,
    build_ruler_task,
    haystack_documents,
)
from lextra.train import Distributed

#: lengths as multiples of L_tr when none are given
DEFAULT_MULTIPLES = (1, 2, 4)
#: the keys a study's [ruler] section takes
SECTION_KEYS = frozenset(
    {"models", "tasks", "multiples", "samples", "seed", "threshold", "batch", "haystack", "prompt_length"}
)


def parse_task_list(
    spec: str | Sequence[str], registry: Registry[RulerTask] = RULER_TASKS
) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """`all` (every task in `registry`) or task specs (`lextra.registry.split_specs`: `niah_single_1;vt,hops=2`)
    -> (distinct known names in the order given, their typed options)."""
    items = split_specs(spec, "task")
    known = registry.names()
    if items == ["all"]:
        return list(known), {}
    if not items:
        raise ConfigError(f"--tasks needs 'all' or task names; known: {', '.join(known)}")
    names: list[str] = []
    options: dict[str, dict[str, Any]] = {}
    for item in items:
        name = parse_spec(item, registry.kind).name
        if name not in registry:
            raise ConfigError(f"unknown {registry.kind} {name!r}; use 'all' or names from: {', '.join(known)}")
        name, values = registry.parse(item)
        names.append(name)
        if values:
            options.setdefault(name, {}).update(values)
    return list(dict.fromkeys(names)), options


def parse_tasks(spec: str | Sequence[str], registry: Registry[RulerTask] = RULER_TASKS) -> list[str]:
    """`parse_task_list`'s names, task options refused."""
    names, options = parse_task_list(spec, registry)
    if options:
        raise ConfigError(f"tasks {spec!r} set options ({sorted(options)}); give them as RulerSettings.options")
    return names


@dataclass
class RulerSettings:
    """What a RULER run evaluates: tasks, prompt lengths (default L_tr x `multiples`), samples per cell and their
    seed, the effective-length threshold, the batch, task options, the essay corpus, and how a length sizes the
    prompts (`PROMPT_LENGTHS`)."""

    tasks: list[str] = field(default_factory=lambda: RULER_TASKS.names())
    lengths: list[int] | None = None
    multiples: tuple[int, ...] = DEFAULT_MULTIPLES
    samples: int = 10
    seed: int = 0
    threshold: float = DEFAULT_THRESHOLD
    batch_size: int = 8
    #: task -> {option: value}, e.g. {"vt": {"hops": 2}}
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    haystack: str = DEFAULT_HAYSTACK
    prompt_length: str = "ruler"
    #: the tasks' registry and the suite's name in the results (a subclass runs another suite's tasks)
    registry: ClassVar[Registry[RulerTask]] = RULER_TASKS
    suite: ClassVar[str] = "RULER"

    def resolved_lengths(self, train_len: int) -> list[int]:
        """The prompt lengths, ascending: the given ones, else L_tr x `multiples`."""
        return sorted_lengths(self.lengths or [train_len * m for m in self.multiples])

    def validate(self) -> RulerSettings:
        self.tasks = parse_tasks(self.tasks, self.registry)
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
            self.registry.check_options(name, options)
        if self.prompt_length not in PROMPT_LENGTHS:
            raise ConfigError(
                f"unknown RULER prompt length {self.prompt_length!r}; use {' or '.join(PROMPT_LENGTHS)} (ruler: the "
                "length less the answer budget, RULER's rule; exact: prompts of the whole length)"
            )
        return self

    def build(
        self, tokenizer: Tokenizer, documents: Sequence[Document] | None, chat: ChatFormat | None
    ) -> dict[str, RulerTask]:
        """The tasks, built for `tokenizer` (an essay haystack reads `documents`, default: `haystack`'s)."""
        if documents is None and any(RULER_TASKS.get(n).needs_documents for n in self.tasks):
            documents = haystack_documents(self.haystack)
        return {n: build_ruler_task(n, tokenizer, documents, chat, **self.options.get(n, {})) for n in self.tasks}


def settings_from_section(section: Mapping[str, Any]) -> RulerSettings:
    """A study's `[ruler]` section (its keys checked by `parse_study`; `models` is read by the study) as validated
    settings."""
    tasks, options = parse_task_list(section.get("tasks", "all"))
    settings = RulerSettings(
        tasks=tasks,
        options=options,
        multiples=tuple(int(m) for m in section.get("multiples", DEFAULT_MULTIPLES)),
        samples=section.get("samples", 10),
        seed=section.get("seed", 0),
        threshold=float(section.get("threshold", DEFAULT_THRESHOLD)),
        batch_size=section.get("batch", 8),
        haystack=str(section.get("haystack", DEFAULT_HAYSTACK)),
        prompt_length=str(section.get("prompt_length", "ruler")),
    )
    return settings.validate()


def cell_path(out: Path, task: str, length: int) -> Path:
    """Where a cell's answers are saved."""
    return out / "cells" / f"{task}-{length}.json"


def read_answers(path: Path, key: Mapping[str, Any]) -> dict[int, RulerAnswer]:
    """The answers saved in `path` when it holds `key`, by sample index (none for a missing, torn or foreign file)."""
    if not path.exists():
        return {}
    try:
        saved = json.loads(path.read_text())
        if saved.get("key") != json.loads(json.dumps(key)):
            return {}
        answers = [RulerAnswer.from_dict(a) for a in saved["answers"]]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError):
        return {}  # recompute it
    return {a.index: a for a in answers}


def cell_key(
    key: Mapping[str, Any] | None,
    label: str,
    task: RulerTask,
    length: int,
    settings: RulerSettings,
    tokenizer: Tokenizer,
    chat: ChatFormat | None,
    setup: InferenceSetup,
    prefix: Sequence[int] = (),
) -> dict[str, Any]:
    """What a cell's answers depend on (the model's `key` among them)."""
    return {
        **(key or {}),
        "label": label,
        "task": task.name,
        "options": task.options,
        "length": length,
        "seed": settings.seed,
        "tokenizer": tokenizer.name,
        "chat": None if chat is None else [chat.prefix, chat.suffix],
        "mask": setup.mask_spec,
        "haystack": settings.haystack if task.needs_documents else None,
        "prompt_length": settings.prompt_length,
        "bos": list(prefix),
    }


def preflight(
    model: Any, tasks: Mapping[str, RulerTask], lengths: Sequence[int], seed: int, prompt_length: str = "ruler"
) -> None:
    """Draw the first sample of every (task, length) so that bad lengths and tokenizers fail before any work,
    every task too long for its length named in one error."""
    short: list[tuple[PromptTooShortError, int]] = []
    for task in tasks.values():
        prefix = evaluation_prefix(model, task.tokenizer)
        for length in lengths:
            try:
                sample = task.sample(task.prompt_tokens(length, prompt_length), 0, seed, prefix=prefix)
            except PromptTooShortError as error:
                short.append((error, length))
                break
            check_vocabulary(model, [sample], task.tokenizer)
    if len(short) == 1:
        raise short[0][0]
    if short:
        needs = ", ".join(f"{e.task!r} needs {e.needed} (asked {length})" for e, length in short)
        raise ConfigError(
            f"{len(short)} tasks do not fit their cells with this tokenizer (prompt and answer budget): {needs}; use "
            "longer lengths or drop them"
        )


@dataclass
class RulerTarget:
    """What a RULER run evaluates and how its cells and results name it: the model, its tokenizer, the method
    label, the model's cell key, the inference setup applied to it, the name in the results, the chat wrapping and
    the essay documents (default: the settings' haystack)."""

    model: Any
    tokenizer: Tokenizer
    label: str = ""
    key: Mapping[str, Any] | None = None
    setup: InferenceSetup = field(default_factory=InferenceSetup)
    name: str | None = None
    chat: ChatFormat | None = None
    documents: Sequence[Document] | None = None


def run_ruler(
    target: RulerTarget,
    settings: RulerSettings,
    out: str | Path,
    *,
    progress: bool = True,
    world: Distributed | None = None,
) -> RulerResult:
    """Every (task, length) cell of `settings` for `target`, reusing saved answers; writes the outputs in `out`
    and returns the result. Under torchrun (`world`) each process answers every size-th cell, then waits for the
    others' files (`wait_for`, no collective's timeout)."""
    world = world or Distributed()
    model, tokenizer, chat, label = target.model, target.tokenizer, target.chat, target.label
    settings.validate()
    out = Path(out)
    lengths = settings.resolved_lengths(model.config.train_len)
    tasks = settings.build(tokenizer, target.documents, chat)
    preflight(model, tasks, lengths, settings.seed, settings.prompt_length)
    prefix = evaluation_prefix(model, tokenizer)
    wanted = range(settings.samples)
    keys = {
        (name, n): cell_key(target.key, label, task, n, settings, tokenizer, chat, target.setup, prefix)
        for name, task in tasks.items()
        for n in lengths
    }
    answers = {cell: read_answers(cell_path(out, *cell), keys[cell]) for cell in keys}
    mine = list(keys)[world.rank :: world.size]
    if world.size > 1:
        log("ruler", f"process {world.rank} of {world.size}: {len(mine)} of {len(keys)} cells")
    _answer_missing(target, settings, tasks, {cell: answers[cell] for cell in mine}, keys, out, progress)

    def complete(cell: tuple[str, int]) -> bool:
        answers[cell] = read_answers(cell_path(out, *cell), keys[cell])
        return all(i in answers[cell] for i in wanted)

    wait_for([cell for cell in keys if cell not in mine], complete)
    cells = {
        name: {n: cell_from_answers(task, n, [answers[name, n][i] for i in wanted]) for n in lengths}
        for name, task in tasks.items()
    }
    result = RulerResult(
        label=label,
        tasks=list(tasks),
        lengths=lengths,
        samples=settings.samples,
        seed=settings.seed,
        threshold=float(settings.threshold),
        cells=cells,
        chat=chat is not None,
        model=target.name,
        suite=None if settings.suite == "RULER" else settings.suite,
    )
    if world.is_main:
        save_ruler_outputs(out, result)
    world.barrier()  # the outputs written before any process returns
    return result


def _answer_missing(
    target: RulerTarget,
    settings: RulerSettings,
    tasks: Mapping[str, RulerTask],
    answers: Mapping[tuple[str, int], dict[int, RulerAnswer]],
    keys: Mapping[tuple[str, int], Any],
    out: Path,
    progress: bool,
) -> None:
    """Answer the samples each cell of `answers` lacks, a length's cells sharing batches, each batch saved."""
    wanted = range(settings.samples)
    missing = {cell: [i for i in wanted if i not in held] for cell, held in answers.items()}
    total = len(answers) * settings.samples
    bar = tqdm(total=total, initial=total - sum(map(len, missing.values())), disable=not progress, unit="sample",
               desc=f"ruler {target.label}", file=sys.stderr)  # fmt: skip
    for length in dict.fromkeys(n for _, n in answers):
        todo = {name: missing.get((name, length), []) for name in tasks}
        pending = [task for name, task in tasks.items() if todo[name]]
        for batch in answer_samples(
            target.model, pending, length, todo, settings.seed, batch_size=settings.batch_size,
            prompt_length=settings.prompt_length,
        ):  # fmt: skip
            for name, answer in batch:
                answers[name, length][answer.index] = answer
            for name in dict.fromkeys(name for name, _ in batch):
                held = answers[name, length]
                record = {"key": keys[name, length], "answers": [held[i].to_dict() for i in sorted(held)]}
                atomic_write_json(cell_path(out, name, length), record)
            bar.set_postfix_str(f"{length} tokens")
            bar.update(len(batch))
    bar.close()


def read_ruler_result(path: str | Path) -> RulerResult:
    """The result a `lextra ruler` run saved: its output folder or its results.json."""
    path = Path(path)
    file = path if path.suffix == ".json" else path / "results.json"
    try:
        return RulerResult.from_dict(json.loads(file.read_text()))
    except FileNotFoundError:
        raise DataError(f"no RULER results at {file}; run `lextra ruler MODEL --out {path}` first") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as err:
        raise DataError(f"{file} is not a `lextra ruler` results.json ({type(err).__name__}: {err})") from None
