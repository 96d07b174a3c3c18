"""`lextra harness`: lm-eval's `simple_evaluate` on the `lextra` model, offline (a task whose data is not local fails
at once instead of downloading), with lextra's output files."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lextra.errors import ConfigError

#: the switches that keep `datasets`, `evaluate`, `huggingface_hub` and `transformers` off the network
OFFLINE = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_EVALUATE_OFFLINE")


def offline() -> None:
    """Turn every Hugging Face library's offline switch on (before lm_eval and datasets are imported)."""
    for name in OFFLINE:
        os.environ[name] = "1"


def require_lm_eval() -> None:
    """Refuse in one line when lm-eval is not installed."""
    import importlib.util

    if importlib.util.find_spec("lm_eval") is None:
        raise ConfigError("lextra harness needs lm-evaluation-harness: pip install 'lextra[harness]'")


@dataclass
class HarnessSettings:
    """What `simple_evaluate` runs: task names (or YAML files), folders of task YAMLs, the built-in tasks or not,
    few-shot examples, documents per task (None: all), the seed and bootstrap iterations of the standard errors."""

    tasks: list[str] = field(default_factory=list)
    include_path: list[str] = field(default_factory=list)
    builtin: bool = True
    num_fewshot: int | None = None
    limit: int | None = None
    seed: int = 0
    bootstrap_iters: int = 1000
    #: keep each document's requests and responses (results["samples"])
    log_samples: bool = False

    def validate(self) -> HarnessSettings:
        if not self.tasks:
            raise ConfigError("lextra harness needs --tasks (lm-eval task names, or YAML files)")
        missing = [p for p in self.include_path if not Path(p).is_dir()]
        if missing:
            raise ConfigError(f"--include-path {missing[0]} is not a folder of lm-eval task YAMLs")
        return self


def task_manager(settings: HarnessSettings) -> Any:
    """lm-eval's TaskManager over the include paths (and its built-in tasks unless `builtin` is off), refusing
    unknown task names in one line."""
    offline()
    from lm_eval.tasks import TaskManager

    if settings.include_path:  # indexing lm-eval's own 14k task files takes ~30 s: only when a task is not local
        manager = TaskManager(include_path=settings.include_path, include_defaults=False)
        if all(Path(t).is_file() or manager.match_tasks([t]) for t in settings.tasks) or not settings.builtin:
            return _known(manager, settings)
    return _known(TaskManager(include_path=settings.include_path or None, include_defaults=settings.builtin), settings)


def _known(manager: Any, settings: HarnessSettings) -> Any:
    """`manager`, once every task of `settings` is a file or a task it knows."""
    unknown = [t for t in settings.tasks if not Path(t).is_file() and not manager.match_tasks([t])]
    if unknown:
        where = f" in {', '.join(settings.include_path)}" if settings.include_path else ""
        raise ConfigError(f"lm-eval knows no task {unknown[0]!r}{where}; give --include-path DIR for local tasks")
    return manager


def run_harness(lm: Any, settings: HarnessSettings) -> dict[str, Any]:
    """`simple_evaluate` of `lm` (a `LextraLM`) on the settings' tasks; lm-eval's results dictionary."""
    settings.validate()
    manager = task_manager(settings)
    from lm_eval import simple_evaluate

    results = simple_evaluate(
        model=lm,
        tasks=list(settings.tasks),
        num_fewshot=settings.num_fewshot,
        limit=settings.limit,
        task_manager=manager,
        log_samples=settings.log_samples,
        bootstrap_iters=settings.bootstrap_iters,
        random_seed=settings.seed,
        numpy_random_seed=settings.seed,
        torch_random_seed=settings.seed,
        fewshot_random_seed=settings.seed,
    )
    if results is None:  # only on ranks other than 0, which lextra never runs
        raise ConfigError("lm-eval returned no results")
    return dict(results)


def metric_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (task, metric, filter) of lm-eval's results: its value and standard error (None when lm-eval
    gives none)."""
    rows = []
    for task, values in results.get("results", {}).items():
        for key, value in values.items():
            # metrics are "METRIC,FILTER"; "alias" and "sample_len" are not
            if "," not in key or "_stderr," in key or not isinstance(value, int | float):
                continue
            metric, _, filtered = key.partition(",")
            stderr = values.get(f"{metric}_stderr,{filtered}")
            rows.append({"task": task, "metric": metric, "filter": filtered, "value": float(value),
                         "stderr": float(stderr) if isinstance(stderr, int | float) else None})  # fmt: skip
    return rows


def summary(results: dict[str, Any], label: str, model: str, args: dict[str, Any], tasks: Sequence[str]) -> dict:
    """What lextra saves as results.json: the model, its label and arguments, the tasks asked, lm-eval's version,
    each task's metrics (`metric_rows`), documents and version."""
    from lm_eval import __version__

    return {
        "model": model,
        "label": label,
        "model_args": args,
        "tasks": list(tasks),
        "lm_eval": __version__,
        "metrics": metric_rows(results),
        "n_samples": results.get("n-samples", {}),
        "versions": results.get("versions", {}),
    }
