"""Run a study: train every model and seed, then fill each result cell once (`cells/<section>/<name>.json`,
recomputed only when its key, the weights' checksum and settings, changes)."""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from lextra.analysis import dispersion, empirical_scores, receptive_field
from lextra.attention import build_mask
from lextra.data import PreparedData, PreparedShards, prepare_data
from lextra.devices import resolve_device
from lextra.evaluate import EvalConfig, Evaluation, evaluate_model
from lextra.evaluate.retrieval import RetrievalResult, evaluate_retrieval, evaluation_task
from lextra.io import atomic_write_json, sha256_file
from lextra.methods import calibration_windows
from lextra.model import WEIGHTS_FILE
from lextra.pipelines.compare import train_or_reuse
from lextra.pipelines.loading import ModelOptions, load_lextra, setup_from
from lextra.pipelines.log import log
from lextra.pipelines.sharing import share_out
from lextra.pipelines.study.cells import cell_path, read_cell, write_cell
from lextra.pipelines.study.config import ModelSpec, StudyConfig
from lextra.pipelines.study.until_learned import UntilLearned
from lextra.pipelines.study.workers import run_cells
from lextra.reporting.study_results import (
    DispersionMeans,
    ModelAnalysis,
    ReceptiveFieldSummary,
    StudyResults,
    WindowSweep,
)
from lextra.train import Distributed, TrainConfig


@dataclass
class Cell:
    """One result of a study: its file's section and name, its cache key, how to compute it, the class that types
    it (None: saved as it is) and, where the result counts its own compute seconds, how to read them."""

    section: str
    name: str
    key: dict[str, Any]
    compute: Callable[[], Any]
    kind: Any = None
    seconds: Callable[[Any], float] | None = None


@dataclass(frozen=True)
class RetrievalPrompts:
    """The prompts a retrieval study scores every model on: the task, its lengths (L_tr x multiples), needle depths,
    prompts per (length, depth), and whether a length counts the answer."""

    task: str
    lengths: list[int]
    depths: list[float]
    samples: int
    answer_inside: bool

    @classmethod
    def of(cls, section: dict[str, Any], config: StudyConfig) -> RetrievalPrompts:
        """The `[retrieval]` section's prompts (its defaults: passkey, 10 per cell, 5 depths, the study's
        multiples)."""
        multiples = section.get("multiples", config.multiples)
        return cls(
            task=section.get("task", "passkey"),
            lengths=[config.train_len * int(m) for m in multiples],
            depths=[float(d) for d in section.get("depths", [0.0, 0.25, 0.5, 0.75, 1.0])],
            samples=int(section.get("samples", 10)),
            answer_inside=bool(section.get("answer_inside", False)),
        )


class Study:
    """One study run in `out` on `device` (None: CUDA when available; cells computed anywhere are reused). Under
    torchrun the processes train each model together and share out the other cells; else `jobs` > 1 trains the
    missing models in worker processes."""

    def __init__(
        self,
        config: StudyConfig,
        out: str | Path,
        *,
        progress: bool = True,
        commit: str = "unknown",
        device: str | torch.device | None = None,
        jobs: int = 1,
    ) -> None:
        self.config, self.out, self.progress, self.commit = config, Path(out), progress, commit
        self.device, self.jobs = resolve_device(device), jobs
        #: the code versions that computed the cells used (recorded in each cell)
        self.commits: set[str] = set()
        self._data: PreparedData | None = None
        self._world: Distributed | None = None
        self.models: dict[tuple[str, int], Path] = {}
        self._checksums: dict[tuple[str, int], str] = {}
        self._rounds: dict[tuple[str, int], tuple[Path, list[float]]] = {}
        #: compute seconds of every cell used, whether computed now or in an earlier invocation
        self.seconds = 0.0

    # --- plumbing -------------------------------------------------------------------------------------------
    @property
    def data(self) -> PreparedData:
        """What evaluations read: the prepared folder of `[train] data` (checked against the study's tokenizer),
        else the corpus tokenized now."""
        if self._data is None:
            train = self.config.train
            if train.data is not None:
                shards = PreparedShards.open(train.data)
                shards.check_tokenizer(train.tokenizer)
                self._data = shards.prepared_data()
            else:
                self._data = prepare_data(train.corpus, train.tokenizer, train.limit_chars)
        return self._data

    @property
    def world(self) -> Distributed:
        """The torchrun processes running this study (one without torchrun)."""
        if self._world is None:
            self._world = Distributed.from_environment(self.device)
        return self._world

    def cells(self, jobs: Sequence[Cell]) -> list[Any]:
        """Each cell's cached result, else computed and saved (under torchrun, shared out: `share_out`)."""
        results: dict[int, Any] = {}

        def compute(i: int) -> None:
            results[i] = self._compute(jobs[i])

        def saved(i: int) -> bool:  # reads a cached cell, or another process's once it is written
            if i not in results:
                record = self._saved(jobs[i])
                if record is None:
                    return False
                results[i] = self._reuse(jobs[i], record)
            return True

        share_out(range(len(jobs)), self.world, compute, saved)
        return [results[i] for i in range(len(jobs))]

    def train_cell(self, name: str, config: TrainConfig, run_dir: Path) -> Path:
        """A training cell: the trained (or reused) model folder. Every process trains it, together (DDP/FSDP)."""
        job = Cell("training", name, config.to_dict(), partial(self._train, config, run_dir))
        record = self._trained(name, config)
        return Path(self._compute(job) if record is None else self._reuse(job, record))

    def _trained(self, name: str, config: TrainConfig) -> dict[str, Any] | None:
        """A training cell's saved record while its folder exists (a cell copied without its folder: None)."""
        record = read_cell(cell_path(self.out, "training", name), config.to_dict())
        return record if record is not None and Path(record["result"]).exists() else None

    def train_cells(
        self, cells: Sequence[tuple[str, TrainConfig, Path]], landed: Callable[[str, Path], object] | None = None
    ) -> list[Path]:
        """Training cells (name, config, folder), the missing ones first trained in `jobs` worker processes;
        `landed(name, folder)` is called once per cell as its model is ready, the trained ones first."""
        ready: dict[str, Path] = {}

        def land(cell: tuple[str, TrainConfig, Path]) -> None:
            ready[cell[0]] = self.train_cell(*cell)
            if landed is not None:
                landed(cell[0], ready[cell[0]])

        if self.jobs > 1 and self.world.size == 1:
            missing = [cell for cell in cells if self._trained(cell[0], cell[1]) is None]
            for cell in cells:
                if cell not in missing:
                    land(cell)
            worker = partial(_train_in_worker, str(self.out), self.commit, str(self.device))
            run_cells(missing, lambda cell: cell[0], worker, worker, self.jobs, land)
        for cell in cells:
            if cell[0] not in ready:
                land(cell)
        return [ready[cell[0]] for cell in cells]

    def _saved(self, job: Cell) -> dict[str, Any] | None:
        """The saved record of `job` when it was computed for its key, else None."""
        return read_cell(cell_path(self.out, job.section, job.name), job.key)

    def _reuse(self, job: Cell, record: dict[str, Any]) -> Any:
        """A saved record's result, typed; its compute seconds and commit are counted."""
        self.seconds += record.get("seconds", 0.0)
        self.commits.add(record.get("commit", "unknown"))
        return record["result"] if job.kind is None else job.kind.from_dict(record["result"])

    def _compute(self, job: Cell) -> Any:
        """Compute a cell, save it with its key, seconds and commit, and return its result."""
        log("study", f"{job.section}: {job.name}")
        start = time.time()
        result = job.compute()
        seconds = time.time() - start if job.seconds is None else job.seconds(result)
        self.seconds += seconds
        self.commits.add(self.commit)
        record = result if job.kind is None else result.to_dict()
        write_cell(cell_path(self.out, job.section, job.name), job.key, record, seconds, self.commit)
        return result

    def weights(self, label: str, seed: int) -> str:
        """The checksum of a trained model's weights (read once per model: every cell key holds it)."""
        if (label, seed) not in self._checksums:
            self._checksums[(label, seed)] = sha256_file(self.models[(label, seed)] / WEIGHTS_FILE)
        return self._checksums[(label, seed)]

    def _train(self, config: TrainConfig, run_dir: Path) -> str:
        """A training cell's value: the trained (or reused) model folder."""
        return str(train_or_reuse(config, run_dir, self.progress, self.device))

    def eval_config(self, **fields: Any) -> EvalConfig:
        """A perplexity cell's validated `EvalConfig` of the study's documents, precision (resolved for its device)
        and span (the longest length), named in the cell's key."""
        fields.setdefault("span", max(self.config.lengths))
        fields.setdefault("documents", self.config.documents)
        ev = EvalConfig(**fields, precision=self.config.eval_precision).validate()
        return ev.for_device(self.device)

    def _evaluate(self, label: str, seed: int, ev: EvalConfig, progress: bool, name: str) -> Evaluation:
        """A perplexity cell's value: model `label` (seed `seed`) evaluated under `ev`."""
        return evaluate_model(self.load(label, seed), self.data, ev, progress=progress, label=name)

    def load(self, label: str, seed: int = 0):
        """The trained model of (label, seed) on the study's device, in eval mode."""
        return load_lextra(self.models[(label, seed)], device=self.device).model.eval()

    # --- stages ---------------------------------------------------------------------------------------------
    def train_all(self) -> None:
        places = [(spec, seed) for spec in self.config.models for seed in self.config.seeds]
        folders = [self.out / "models" / spec.label / f"seed{seed}" for spec, seed in places]
        cells = [
            (f"{spec.label}-seed{seed}", train_config(self.config, spec, seed), folder)
            for (spec, seed), folder in zip(places, folders, strict=True)
        ]
        for (spec, seed), folder in zip(places, self.train_cells(cells), strict=True):
            self.models[(spec.label, seed)] = folder

    def perplexity(self) -> dict[str, dict[str, dict[int, Evaluation]]]:
        """{mask: {label: {seed: evaluation}}} under every protocol at every length."""
        labels = [spec.label for spec in self.config.models]
        places = list(itertools.product(self.config.masks, labels, self.config.seeds))
        jobs = []
        for mask, label, seed in places:
            ev = self.eval_config(lengths=self.config.lengths, protocols=list(self.config.protocols), mask=mask)
            key = {"weights": self.weights(label, seed), "eval": ev.to_dict()}
            compute = partial(self._evaluate, label, seed, ev, self.progress, label)
            jobs.append(Cell("perplexity", f"{label}-{mask}-seed{seed}", key, compute, Evaluation))
        results: dict[str, dict[str, dict[int, Evaluation]]] = {}
        for (mask, label, seed), result in zip(places, self.cells(jobs), strict=True):
            results.setdefault(mask, {}).setdefault(label, {})[seed] = result
        return results

    def analysis(self) -> dict[str, ModelAnalysis]:
        """Per model (seed 0): empirical resolution at L_tr and 2 L_tr (causal and BCA), ERF, dispersion."""
        section = self.config.analysis or {}
        documents = int(section.get("documents", 4))
        L = self.config.train_len
        seed, jobs = self.config.seeds[0], []
        for spec in self.config.models:
            key = {"weights": self.weights(spec.label, seed), "documents": documents, "lengths": self.config.lengths}
            jobs.append(Cell("analysis", spec.label, key, partial(self._analyse, spec, documents, L), ModelAnalysis))
        return {spec.label: result for spec, result in zip(self.config.models, self.cells(jobs), strict=True)}

    def _analyse(self, spec: ModelSpec, documents: int, L: int) -> ModelAnalysis:
        model = self.load(spec.label)
        lengths = self.config.lengths
        texts = calibration_windows(self.data, max(lengths), documents, "test")
        with torch.no_grad():
            resolution = {
                mask: {n: empirical_scores(model, texts[:, :n], build_mask(mask, L)).r for n in lengths[:2]}
                for mask in ("causal", "bca")
            }
            dispersion_means = {n: DispersionMeans.of(dispersion(model, texts[:, :n], "causal")) for n in lengths}
        erf_length = min(max(lengths), 8 * L)
        segments = calibration_windows(self.data, erf_length, documents, "test")
        field = receptive_field(model, segments, "causal")
        summary = ReceptiveFieldSummary(length=erf_length, erf=field.erf, share_last_L_tr=field.share_within(L))
        return ModelAnalysis(resolution=resolution, dispersion=dispersion_means, receptive_field=summary)

    def window_sweep(self, analysis: dict[str, ModelAnalysis]) -> dict[str, WindowSweep]:
        """Sliding-protocol perplexity at the longest length under window:w, for each model and w."""
        section = self.config.window_sweep or {}
        length, seed = max(self.config.lengths), self.config.seeds[0]
        places = list(itertools.product(section.get("models", []), section.get("widths", [])))
        jobs = []
        for label, width in places:
            ev = self.eval_config(lengths=[length], protocols=["sliding"], mask=f"window:{width}")
            key = {"weights": self.weights(label, seed), "eval": ev.to_dict()}
            jobs.append(
                Cell("window", f"{label}-w{width}", key, partial(self._evaluate, label, 0, ev, False, ""), Evaluation)
            )
        rows: dict[str, dict[int, float]] = {label: {} for label in section.get("models", [])}
        intervals: dict[str, dict[int, list[float]]] = {label: {} for label in rows}
        for (label, width), result in zip(places, self.cells(jobs), strict=True):
            rows[label][width] = result.ppl("sliding", length)
            intervals[label].update(_interval(result, length, width))
        return {
            label: WindowSweep(
                ppl=row,
                erf=analysis[label].receptive_field.erf if label in analysis else None,
                intervals=intervals[label] or None,  # None: one document, no interval
            )
            for label, row in rows.items()
        }

    def retrieval(self) -> dict[str, dict[int, RetrievalResult]]:
        """Fine-tune each variant's LM model of every seed on the task; accuracy at every length and depth, per
        variant and seed (the same prompts for every model)."""
        section = dict(self.config.retrieval or {})
        prompts = RetrievalPrompts.of(section, self.config)
        variants = self._retrieval_variants(section)
        configs = {
            (label, seed): self._fine_tune_config(label, seed, prompts.task, section)
            for _, label, _ in variants
            for seed in self.config.seeds
        }
        tuned: dict[tuple[str, int], Path] = {}

        def compute(variant: str, label: str, seed: int, scaling: Any) -> RetrievalResult:
            return self._score(prompts, tuned[(label, seed)], variant, scaling)

        def key(label: str, seed: int, scaling: Any) -> dict[str, Any]:
            """The training configs of the LM model and its fine-tuning (no folder or checksum: cells copied to
            another machine are reused there)."""
            lm = train_config(self.config, self.config.model(label), seed).to_dict()
            tune = {k: v for k, v in configs[(label, seed)].to_dict().items() if k != "init_from"}
            inside = {"answer_inside": True} if prompts.answer_inside else {}  # absent: earlier cells' keys hold
            return {"model": lm, "fine_tune": tune, "scaling": scaling, "lengths": prompts.lengths,
                    "samples": prompts.samples, "depths": prompts.depths, **inside}  # fmt: skip

        places = [(variant, label, seed) for variant, label, _ in variants for seed in self.config.seeds]
        jobs = [
            Cell(
                "retrieval",
                variant if len(self.config.seeds) == 1 else f"{variant}-seed{seed}",
                key(label, seed, scaling),
                partial(compute, variant, label, seed, scaling),
                RetrievalResult,
            )
            for variant, label, scaling in variants
            for seed in self.config.seeds
        ]
        found = self._tuned_cells(places, jobs, configs, tuned)
        if "until_learned" in section:
            rule = UntilLearned.from_section(section["until_learned"], "study")
            scalings = {variant: scaling for variant, _, scaling in variants}
            self._until_learned(rule, prompts, places, jobs, found, scalings, configs, tuned)
        results: dict[str, dict[int, RetrievalResult]] = {}
        for i, (variant, _, seed) in enumerate(places):
            results.setdefault(variant, {})[seed] = found[i]
        return results

    def _score(self, prompts: RetrievalPrompts, folder: Path, variant: str, scaling: Any) -> RetrievalResult:
        """A retrieval cell's value: the fine-tuned model in `folder` (with its variant's RoPE scaling) on the
        study's prompts."""
        model = load_lextra(folder, ModelOptions(setup_from(rope_scaling=scaling)), self.device).model.eval()
        return evaluate_retrieval(
            model, evaluation_task(prompts.task, self.data), prompts.lengths, prompts.depths, samples=prompts.samples,
            progress=self.progress, label=variant, answer_inside=prompts.answer_inside,
        )  # fmt: skip

    def _until_learned(
        self,
        rule: UntilLearned,
        prompts: RetrievalPrompts,
        places: list[tuple[str, str, int]],
        cells: list[Cell],
        found: dict[int, Any],
        scalings: dict[str, Any],
        configs: dict[tuple[str, int], TrainConfig],
        tuned: dict[tuple[str, int], Path],
    ) -> None:
        """Where a model's unscaled variant is under `rule`'s bar at L_tr, each of its cells in `found` replaced by
        the cell of its model after the rule's extra rounds (computed, or read)."""
        L = self.config.train_len

        def held_out(model: Any) -> float:
            task = evaluation_task(prompts.task, self.data)
            result = evaluate_retrieval(model, task, [L], prompts.depths, samples=prompts.samples,
                                        seed=rule.prompt_seed, answer_inside=prompts.answer_inside)  # fmt: skip
            return result.by_length[L].exact

        def extended(variant: str, label: str, seed: int) -> RetrievalResult:
            folder, scores = self._extra_rounds(rule, label, seed, configs[(label, seed)], tuned, held_out)
            result = self._score(prompts, folder, variant, scalings[variant])
            result.extra_steps, result.held_out_exact = len(scores) * rule.steps, scores
            return result

        under = {(label, seed) for i, (variant, label, seed) in enumerate(places)
                 if scalings[variant] is None and found[i].by_length[L].exact < rule.bar}  # fmt: skip
        again = [i for i, (_, label, seed) in enumerate(places) if (label, seed) in under]
        rounds = [
            Cell(
                "retrieval",
                f"{cells[i].name}-until-learned",
                {**cells[i].key, "until_learned": rule.to_dict()},
                partial(extended, *places[i]),
                RetrievalResult,
            )
            for i in again
        ]
        missing = [(places[i][1], places[i][2]) for i, cell in zip(again, rounds, strict=True) if not self._saved(cell)]
        for label, seed in dict.fromkeys(missing):  # every process, in one order: training is a collective
            self._extra_rounds(rule, label, seed, configs[(label, seed)], tuned, held_out)
        found.update(zip(again, self.cells(rounds), strict=True))

    def _tuned_cells(
        self,
        places: list[tuple[str, str, int]],
        cells: list[Cell],
        configs: dict[tuple[str, int], TrainConfig],
        tuned: dict[tuple[str, int], Path],
    ) -> dict[int, Any]:
        """Each retrieval cell's result by index: the missing models fine-tuned `jobs` at a time (into `tuned`),
        each model's cells evaluated as it lands while the next ones train, then the saved cells read."""
        found: dict[int, Any] = {}

        def collect(indices: list[int]) -> None:
            found.update(zip(indices, self.cells([cells[i] for i in indices]), strict=True))

        missing = [
            (label, seed) for (_, label, seed), cell in zip(places, cells, strict=True) if self._saved(cell) is None
        ]
        order = list(dict.fromkeys(missing))
        fine_tunes = [self._fine_tune(label, seed, configs[(label, seed)]) for label, seed in order]
        by_name = {cell[0]: pair for cell, pair in zip(fine_tunes, order, strict=True)}

        def landed(name: str, folder: Path) -> None:
            pair = by_name[name]
            tuned[pair] = folder
            collect([i for i, (_, label, seed) in enumerate(places) if (label, seed) == pair])

        self.train_cells(fine_tunes, landed)
        collect([i for i in range(len(cells)) if i not in found])
        return found

    def _extra_rounds(
        self,
        rule: UntilLearned,
        label: str,
        seed: int,
        fine_tune: TrainConfig,
        tuned: dict[tuple[str, int], Path],
        held_out: Callable[[Any], float],
    ) -> tuple[Path, list[float]]:
        """`rule`'s rounds past the fine-tuning of model `label` (seed `seed`): the last round's model and the
        held-out exact match at L_tr after each round (memoized: the model's variants share them)."""
        if (label, seed) in self._rounds:
            return self._rounds[(label, seed)]
        name, _, folder = self._fine_tune(label, seed, fine_tune)
        previous = tuned.get((label, seed)) or self.train_cell(name, fine_tune, folder)
        scores: list[float] = []
        for k in range(1, rule.rounds + 1):
            config = rule.round_config(fine_tune, str(previous), k)
            previous = self.train_cell(f"{name}-round{k}", config, folder.with_name(f"{folder.name}-round{k}"))
            scores.append(held_out(load_lextra(previous, ModelOptions(), self.device).model.eval()))
            log("study", f"{name} round {k}: exact {scores[-1]:.2f} at L_tr on held-out prompts (bar {rule.bar})")
            if scores[-1] >= rule.bar:
                break
        self._rounds[(label, seed)] = (previous, scores)
        return previous, scores

    def _retrieval_variants(self, section: dict[str, Any]) -> list[tuple[str, str, Any]]:
        """(variant, the label of its model, its RoPE scaling) for each of the section's variants: a model's label
        (a hybrid's) or a scheme, then a scaling, if any."""
        from lextra.pipelines.retrieval import parse_scaled_variant

        labels = {spec.label for spec in self.config.models}
        variants = []
        for variant in section.get("variants", []):
            name, _, scaled = variant.partition("+")
            if name in labels:
                scheme, scaling = name, parse_scaled_variant(f"rope+{scaled}")[1] if scaled else None
            else:
                scheme, scaling = parse_scaled_variant(variant)
            variants.append((variant, self.config.model(scheme).label, scaling))
        return variants

    def _fine_tune_config(self, label: str, seed: int, task: str, section: dict[str, Any]) -> TrainConfig:
        """The config that fine-tunes model `label` of `seed` on the retrieval task."""
        config = train_config(self.config, self.config.model(label), seed)
        config.task = task
        config.init_from = str(self.models[(label, seed)])
        config.steps = int(section.get("steps", 1500))
        config.lr = float(section.get("lr", 1e-3))
        config.warmup = int(section.get("warmup", 50))
        return config

    def _fine_tune(self, label: str, seed: int, config: TrainConfig) -> tuple[str, TrainConfig, Path]:
        """The training cell (name, config, folder) that fine-tunes model `label` of `seed` under `config`."""
        one_seed = len(self.config.seeds) == 1  # a one-seed study keeps its earlier folders
        name = f"{label}-{config.task}" if one_seed else f"{label}-{config.task}-seed{seed}"
        folder = self.out / "retrieval" / label if one_seed else self.out / "retrieval" / label / f"seed{seed}"
        return name, config, folder

    def stretch(self) -> tuple[dict[str, dict[int, float]], dict[str, dict[int, list[float]]]]:
        """Sliding-protocol perplexity (and its interval) of each model under each inference-time method."""
        from lextra.methods import EXTEND, methods_for, prepared

        section = self.config.stretch or {}
        wanted = section.get("methods")
        extensions = [m for m in wanted or [] if m.startswith(EXTEND)]
        windows = int(section.get("windows", 2))
        factor = float(max(self.config.multiples))
        seed = self.config.seeds[0]
        results: dict[str, dict[int, float]] = {}
        intervals: dict[str, dict[int, list[float]]] = {}
        for label in section.get("models", []):
            base = self.load(label, seed)
            methods = [m for m in methods_for(base, extensions) if not wanted or m in wanted]

            def compute(method: str, length: int, ev: EvalConfig, base=base) -> Evaluation:
                model = prepared(base, method, self.data, length, factor, windows)
                return evaluate_model(model, self.data, ev, progress=False)

            places = list(itertools.product(methods, self.config.lengths))
            jobs = []
            for method, length in places:
                ev = self.eval_config(lengths=[length], protocols=["sliding"])
                key = {"weights": self.weights(label, seed), "method": method, "eval": ev.to_dict(), "w": windows}
                name = f"{label}-{method}-{length}"
                jobs.append(Cell("stretch", name, key, partial(compute, method, length, ev), Evaluation))
            for method in methods:
                results[f"{label} + {method}"] = {}
                intervals[f"{label} + {method}"] = {}
            for (method, length), result in zip(places, self.cells(jobs), strict=True):
                results[f"{label} + {method}"][length] = result.ppl("sliding", length)
                intervals[f"{label} + {method}"].update(_interval(result, length, length))
        return results, {row: found for row, found in intervals.items() if found}

    def ruler(self) -> dict[str, Any]:
        """The RULER suite on each model (seed 0), one cell per model (its answers under `ruler/<label>/`), and
        the models side by side in `ruler/`."""
        from lextra.evaluate.ruler import RulerResult
        from lextra.pipelines.ruler import RulerTarget, run_ruler, settings_from_section
        from lextra.reporting.ruler import save_ruler_comparison

        section = {"multiples": self.config.multiples, **(self.config.ruler or {})}
        labels = section.pop("models", [m.label for m in self.config.models])
        settings = settings_from_section(section)
        seed = self.config.seeds[0]

        def compute(label: str) -> RulerResult:
            key = {"weights": self.weights(label, seed)}
            target = RulerTarget(self.load(label, seed), self.data.tokenizer, label=label, key=key)
            return run_ruler(target, settings, self.out / "ruler" / label, progress=self.progress)

        jobs = [
            Cell(
                "ruler",
                label,
                {"weights": self.weights(label, seed), "ruler": section},
                partial(compute, label),
                RulerResult,
                seconds=lambda result: result.seconds,  # its answers' seconds, earlier invocations' included
            )
            for label in labels
        ]
        results = dict(zip(labels, self.cells(jobs), strict=True))
        if self.world.is_main:
            save_ruler_comparison(self.out / "ruler", list(results.values()))
        return results

    def run(self) -> StudyResults:
        """Every stage the config asks for; returns (and saves as study.json) all results."""
        self.train_all()
        results = StudyResults(config=self.config.to_dict(), perplexity=self.perplexity())
        if self.config.analysis is not None:
            results.analysis = self.analysis()
        if self.config.window_sweep is not None:
            results.window_sweep = self.window_sweep(results.analysis or {})
        if self.config.retrieval is not None:
            by_seed = self.retrieval()
            first, *others = self.config.seeds
            results.retrieval = {variant: seeds[first] for variant, seeds in by_seed.items()}
            results.retrieval_other_seeds = {
                seed: {variant: seeds[seed] for variant, seeds in by_seed.items()} for seed in others
            } or None
        if self.config.stretch is not None:
            results.stretch, stretch_intervals = self.stretch()
            results.stretch_intervals = stretch_intervals or None
        if self.config.ruler is not None:  # its files are under ruler/<label>/, not in study.json
            self.ruler()
        results.compute_minutes = round(self.seconds / 60, 1)
        results.cell_commits = sorted(self.commits)
        if self.world.is_main:
            atomic_write_json(self.out / "study.json", results.to_dict())
        self.world.barrier()  # study.json written before any process returns
        return results


def _train_in_worker(out: str, commit: str, device: str, cell: tuple[str, TrainConfig, Path]) -> None:
    """A training cell trained in a worker process and saved as `Study._compute` saves it (no progress bars)."""
    name, config, folder = cell
    start = time.time()
    trained = train_or_reuse(config, folder, False, device)
    write_cell(cell_path(Path(out), "training", name), config.to_dict(), str(trained), time.time() - start, commit)


def train_config(study: StudyConfig, spec: ModelSpec, seed: int):
    """The study's training config for one model and seed."""
    config = copy.deepcopy(study.train)
    config.model.layer_plan = spec.layer_plan
    config.seed = seed
    if config.log_dir is not None:  # one TensorBoard run per model and seed
        config.log_dir = str(Path(config.log_dir) / spec.label / f"seed{seed}")
    return config.validate()


def _interval(evaluation: Evaluation, length: int, key: int) -> dict[int, list[float]]:
    """{key: [low, high]} of the sliding-protocol perplexity at `length`, or {} where it has no interval."""
    point = evaluation.point("sliding", length)
    return {} if point.low is None or point.high is None else {key: [point.low, point.high]}
