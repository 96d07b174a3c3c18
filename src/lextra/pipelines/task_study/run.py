"""Run a length-generalization study: every (task, model, seed) trained and scored once, cached as a cell
(`cells/tasks/<task>-<model>-seed<k>.json`, keyed by the training config and the scoring settings), so an
interrupted study resumes cell by cell; `jobs` cells run side by side in worker processes of one thread each."""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from lextra.evaluate.tasks import evaluate_task, load_task_model
from lextra.pipelines.compare import train_or_reuse
from lextra.pipelines.log import log
from lextra.pipelines.study.cells import cell_path, read_cell, write_cell
from lextra.pipelines.study.workers import run_cells
from lextra.pipelines.task_study.config import TaskModelSpec, TaskStudyConfig
from lextra.reporting.tasks import TaskStudyResults, UnitScores
from lextra.tasks import build_task
from lextra.train import TrainConfig


@dataclass(frozen=True)
class Unit:
    """One cell: a task spec, a model, a seed and a data seed (None: the data follows the seed)."""

    task: str
    model: TaskModelSpec
    seed: int
    data_seed: int | None = None

    @property
    def name(self) -> str:
        data = "" if self.data_seed is None else f"-data{self.data_seed}"
        return f"{self.task.replace(',', '_').replace('=', '')}-{self.model.label}-seed{self.seed}{data}"

    def train_config(self, config: TaskStudyConfig) -> TrainConfig:
        """The cell's training config in the study `config`."""
        return config.train_config(self.model, self.task, self.seed, self.data_seed)


class TaskStudy:
    """A task study in `out` on `device`; `jobs` > 1 runs cells in that many worker processes (one thread each)."""

    def __init__(
        self,
        config: TaskStudyConfig,
        out: str | Path,
        *,
        progress: bool = True,
        commit: str = "unknown",
        device: str | None = None,
        jobs: int = 1,
    ) -> None:
        self.config, self.out, self.progress, self.commit = config, Path(out), progress, commit
        self.device, self.jobs = device, jobs
        self._keys: dict[str, dict[str, Any]] = {}

    def units(self) -> list[Unit]:
        c = self.config
        return [Unit(task, model, seed, data) for task in c.tasks for model in c.models for seed, data in c.runs()]

    def key(self, unit: Unit) -> dict[str, Any]:
        """What a cell's result depends on: the training config and the scoring settings (worked out once)."""
        if unit.name not in self._keys:
            config = self.config
            inside, beyond = config.lengths_for(build_task(unit.task), unit.task)
            self._keys[unit.name] = {
                "train": unit.train_config(config).to_dict(),
                "inside": inside,
                "beyond": beyond,
                "samples": config.samples,
            }
        return self._keys[unit.name]

    def path(self, unit: Unit) -> Path:
        return cell_path(self.out, "tasks", unit.name)

    def compute(self, unit: Unit) -> dict[str, Any]:
        """Train (or reuse) the unit's model, score it inside and beyond its training range, save the cell."""
        key = self.key(unit)
        start = time.time()
        config = unit.train_config(self.config)
        run_dir = self.out / "models" / unit.name
        folder = train_or_reuse(config, run_dir, self.progress, self.device)
        trained = time.time() - start
        run = load_task_model(folder, self.device or "cpu")
        seed = 1_000 + unit.seed  # test examples differ from training's
        inside = evaluate_task(run, key["inside"], samples=self.config.samples, seed=seed)
        beyond = evaluate_task(run, key["beyond"], samples=self.config.samples, seed=seed)
        result = UnitScores(
            task=unit.task, model=unit.model.label, seed=unit.seed, inside=inside, beyond=beyond,
            train_seconds=round(trained, 1), score_seconds=round(time.time() - start - trained, 1),
            data_seed=unit.data_seed,
        )  # fmt: skip
        write_cell(self.path(unit), key, result.to_dict(), time.time() - start, self.commit)
        return result.to_dict()

    def saved(self, unit: Unit) -> UnitScores | None:
        record = read_cell(self.path(unit), self.key(unit))
        return None if record is None else UnitScores.from_dict(record["result"])

    def run(self) -> TaskStudyResults:
        """Every cell, computed where missing (in `jobs` processes), then the results of all."""
        units = self.units()
        missing = [u for u in units if self.saved(u) is None]
        log("study", f"{len(units) - len(missing)} of {len(units)} cells saved; computing {len(missing)}")
        args = {"config": self.config, "out": str(self.out), "commit": self.commit, "device": self.device}
        run_cells(missing, lambda u: u.name, self.compute, partial(_compute_in_worker, args), self.jobs)
        scores = [self.saved(u) for u in units]
        return TaskStudyResults(self.config, [s for s in scores if s is not None])


def _compute_in_worker(args: dict[str, Any], unit: Unit) -> None:
    """A worker process's cell (no progress bars: several workers share the terminal)."""
    TaskStudy(args["config"], args["out"], progress=False, commit=args["commit"], device=args["device"]).compute(unit)
