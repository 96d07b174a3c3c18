"""`retrieval compare`: fine-tune each scheme on a retrieval task with one budget, evaluate every variant (a scheme
plus an optional RoPE scaling, e.g. `rope+dynamic`) on the same prompts, and write one table and the heatmaps."""

from __future__ import annotations

import copy
import json
import uuid
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch

from lextra.attention.plan import stated_plan
from lextra.data.shards import text_data_for_model
from lextra.devices import resolve_device
from lextra.errors import ConfigError
from lextra.evaluate.retrieval import (
    DEFAULT_DEPTHS,
    DEFAULT_MULTIPLES,
    RetrievalResult,
    default_lengths,
    evaluate_retrieval,
    evaluation_task,
)
from lextra.io import atomic_write_json, atomic_write_text
from lextra.model import read_model_meta
from lextra.pipelines.loading import ModelOptions, load_lextra, setup_from
from lextra.pipelines.log import log
from lextra.pipelines.sharing import share_out
from lextra.positions import SCHEMES
from lextra.positions.scaling import parse_rope_scaling
from lextra.registry import split_compound
from lextra.reporting.retrieval import plot_heatmap, retrieval_tables
from lextra.tasks.registry import parse_task_spec
from lextra.tasks.ruler import RULER_TRAINING_TASKS
from lextra.train import CHECKPOINTS, FINAL, Distributed, TrainConfig, train


@dataclass
class RetrievalEval:
    """How retrieval is evaluated: prompt lengths (default L_tr x `multiples`; with `answer_inside`, prompt +
    answer), needle depths, prompts per cell, candidates ranked per prompt, the prompts' seed and how many are
    scored together."""

    lengths: list[int] | None = None
    depths: list[float] = field(default_factory=lambda: list(DEFAULT_DEPTHS))
    samples: int = 20
    candidates: int = 5
    seed: int = 0
    batch_size: int = 8
    multiples: tuple[int, ...] = DEFAULT_MULTIPLES
    answer_inside: bool = False

    def resolved_lengths(self, train_len: int) -> list[int]:
        """The prompt lengths: the given ones, else L_tr x `multiples`."""
        return self.lengths or default_lengths(train_len, self.multiples)

    def run(self, model: Any, task: Any, label: str, progress: bool = True) -> RetrievalResult:
        """`evaluate_retrieval` of `model` on `task` with these settings."""
        return evaluate_retrieval(
            model,
            task,
            self.resolved_lengths(model.config.train_len),
            self.depths,
            samples=self.samples,
            seed=self.seed,
            batch_size=self.batch_size,
            progress=progress,
            label=label,
            answer_inside=self.answer_inside,
        )


def parse_scaled_variant(spec: str) -> tuple[str, str | None]:
    """`rope` -> ("rope", None); `rope+dynamic` -> ("rope", "dynamic:1"); `coca+yarn:4` -> ("coca", "yarn:4")."""
    parts = split_compound(spec.strip())
    if len(parts) > 2:
        raise ConfigError(f"variant {spec!r}: give a scheme and at most one RoPE scaling, SCHEME[+SCALING]")
    scheme, scaling = parts[0], (parts[1] if len(parts) > 1 else "")
    SCHEMES.parse(scheme)
    if scaling:
        parse_rope_scaling(scaling)  # refuses unknown types and options
        if not any(c in scaling for c in ":,{"):
            scaling += ":1"
    return scheme, scaling or None


def train_on_task(
    config: TrainConfig,
    task: str,
    out: str | Path,
    *,
    resume: bool,
    progress: bool,
    device: str | torch.device | None = None,
) -> Path:
    """Train `config` on the retrieval task spec `task` (NAME, NAME+lm, NAME:RATIO; NAME a retrieval task or one of
    `RULER_TRAINING_TASKS`) on `device`; returns the final model."""
    config = copy.deepcopy(config)
    config.task = task
    return train(config, out, resume=resume, progress=progress, device=device)


def compare_pretrained(folder: str | Path, scheme: str) -> str:
    """The `lextra compare` model of `scheme` under `folder`, or an error naming the missing path."""
    path = Path(folder) / "models" / scheme / "model"
    if not (path / "config.json").exists():
        raise ConfigError(f"--init-from-compare: no {scheme} model at {path}; run `lextra compare` with it first")
    return str(path)


def compare_retrieval(
    variants: list[str],
    base: TrainConfig,
    task: str,
    settings: RetrievalEval,
    out: str | Path,
    *,
    init_from_compare: str | None = None,
    progress: bool = True,
    device: str | torch.device | None = None,
) -> dict[str, RetrievalResult]:
    """Train each distinct scheme once on `task`, evaluate each variant, all on `device` (None: CUDA when
    available); write the summary and return the results. Under torchrun the evaluations are shared out."""
    out = Path(out)
    device = resolve_device(device)
    if not variants:
        raise ConfigError("--schemes needs at least one variant")
    if parse_task_spec(task).name in RULER_TRAINING_TASKS:
        raise ConfigError(
            f"retrieval compare evaluates retrieval tasks; train on {task!r} with `lextra retrieval train` and "
            "evaluate with `lextra ruler`"
        )
    parsed = {v: parse_scaled_variant(v) for v in variants}
    models: dict[str, Path] = {}
    for scheme, _ in parsed.values():  # every process trains each scheme, in one order (a collective under torchrun)
        if scheme not in models:
            models[scheme] = _trained(scheme, base, task, out, init_from_compare, progress, device)
    world = Distributed.from_environment(device)
    run = world.first(uuid.uuid4().hex)  # this invocation: each result file is marked with it once written
    results: dict[str, RetrievalResult] = {}

    def evaluate(label: str) -> None:
        scheme, scaling = parsed[label]
        model = load_lextra(models[scheme], ModelOptions(setup_from(rope_scaling=scaling)), device).model
        _log(f"evaluating {label}")
        meta = read_model_meta(models[scheme])
        prompts = evaluation_task(task, text_data_for_model(meta, base.data), settings.candidates - 1)
        result = settings.run(model, prompts, label, progress)
        result.model = str(models[scheme])
        name = _file_name(label)
        atomic_write_json(out / "results" / f"{name}.json", result.to_dict())
        plot_heatmap(result, out / "heatmaps" / f"{name}.png")
        atomic_write_text(_run_marker(out, label), run)
        results[label] = result

    def written(label: str) -> bool:  # reads another process's result once its marker names this invocation
        marker = _run_marker(out, label)
        if label not in results and marker.exists() and marker.read_text() == run:
            path = out / "results" / f"{_file_name(label)}.json"
            results[label] = RetrievalResult.from_dict(json.loads(path.read_text()))
        return label in results

    share_out(list(parsed), world, evaluate, written)
    results = {label: results[label] for label in parsed}
    if world.is_main:
        summary = {"task": task, "variants": {label: r.to_dict() for label, r in results.items()}}
        atomic_write_json(out / "summary.json", summary)
        atomic_write_text(out / "table.md", retrieval_tables(results) + "\n")
    world.barrier()  # the summary written before any process returns
    return results


def _trained(
    scheme: str,
    base: TrainConfig,
    task: str,
    out: Path,
    init_from_compare: str | None,
    progress: bool,
    device: torch.device,
) -> Path:
    """The final model of `scheme` fine-tuned on `task` under `out/models/` (reused, resumed or trained)."""
    run_dir = out / "models" / scheme
    final = run_dir / FINAL
    if (final / "config.json").exists():
        _log(f"reusing {final}")
    else:
        _log(f"training {scheme}")
        config = copy.deepcopy(base)
        config.model.layer_plan = stated_plan(scheme)
        if init_from_compare:
            config.init_from = compare_pretrained(init_from_compare, scheme)
        resume = (run_dir / CHECKPOINTS).exists()
        final = train_on_task(config, task, run_dir, resume=resume, progress=progress, device=device)
    trained_on = read_model_meta(final).get("train", {}).get("task")
    if trained_on != task:
        raise ConfigError(f"{final} was trained on task {trained_on!r}, not {task!r}; use a new --out folder")
    return final


def _file_name(label: str) -> str:
    return label.replace(":", "-").replace("+", "_")


def _run_marker(out: Path, label: str) -> Path:
    """The file naming the invocation that wrote a variant's result (how the other processes know it is new)."""
    return out / "results" / f".{_file_name(label)}.run"


_log = partial(log, "retrieval")
