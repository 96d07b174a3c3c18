"""Run a study: train every model and seed, then fill each result cell once (resumable, finished cells skipped).

Layout of the output folder: `models/<label>/seed<k>/` (training runs), `retrieval/<scheme>/` (fine-tuned runs),
`cells/<section>/<name>.json` (one result each, with the key it was computed for), `study.json`, `report.md`,
`report.html` and `plots/`. A cell is recomputed only when its key (model weights' checksum and settings) changes.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from lextra.analysis import dispersion, empirical_scores, receptive_field
from lextra.attention import build_mask
from lextra.data import PreparedData, PreparedShards, prepare_data
from lextra.devices import resolve_device
from lextra.evaluate import EvalConfig, Evaluation, evaluate_model
from lextra.evaluate.retrieval import RetrievalResult
from lextra.io import atomic_write_json, sha256_file
from lextra.methods import calibration_windows
from lextra.model import WEIGHTS_FILE
from lextra.pipelines.compare import train_or_reuse
from lextra.pipelines.loading import ModelOptions, load_lextra, setup_from
from lextra.pipelines.log import log
from lextra.pipelines.study.config import ModelSpec, StudyConfig
from lextra.reporting.study_results import (
    DispersionMeans,
    ModelAnalysis,
    ReceptiveFieldSummary,
    StudyResults,
    WindowSweep,
)
from lextra.train import TrainConfig


class Study:
    """One study run in `out`: trained models, cached cells and the collected results, computed on `device`
    (None: CUDA when available); cell keys do not hold the device, so cells computed anywhere are reused."""

    def __init__(
        self,
        config: StudyConfig,
        out: str | Path,
        *,
        progress: bool = True,
        commit: str = "unknown",
        device: str | torch.device | None = None,
    ) -> None:
        self.config, self.out, self.progress, self.commit = config, Path(out), progress, commit
        self.device = resolve_device(device)
        #: the code versions that computed the cells used (recorded in each cell)
        self.commits: set[str] = set()
        self._data: PreparedData | PreparedShards | None = None
        self._texts: PreparedData | None = None
        self.models: dict[tuple[str, int], Path] = {}
        self._checksums: dict[tuple[str, int], str] = {}
        #: compute seconds of every cell used, whether computed now or in an earlier invocation
        self.seconds = 0.0

    # --- plumbing -------------------------------------------------------------------------------------------
    @property
    def data(self) -> PreparedData | PreparedShards:
        """What evaluations read: the prepared folder of `[train] data` (its tokens, not re-tokenized; refused when
        prepared with another tokenizer than the study's), else the corpus read and tokenized now."""
        if self._data is None:
            train = self.config.train
            if train.data is not None:
                shards = PreparedShards.open(train.data)
                shards.check_tokenizer(train.tokenizer)
                self._data = shards
            else:
                self._data = prepare_data(train.corpus, train.tokenizer, train.limit_chars)
        return self._data

    @property
    def texts(self) -> PreparedData:
        """What text tasks read (retrieval prompts): `data`, a prepared folder's documents decoded lazily."""
        if self._texts is None:
            data = self.data
            self._texts = data.prepared_data() if isinstance(data, PreparedShards) else data
        return self._texts

    def cell(self, section: str, name: str, key: dict[str, Any], compute: Callable[[], Any], kind: Any = None) -> Any:
        """The cached result for `key`, or compute, save and return it; `kind` (a class with `from_dict` and
        `to_dict`, such as `Evaluation`) types the result, which is otherwise saved and returned as it is."""
        path = self.out / "cells" / section / f"{name.replace(':', '-').replace('+', '_')}.json"
        if path.exists():
            saved = json.loads(path.read_text())
            if saved.get("key") == key:
                self.seconds += saved.get("seconds", 0.0)
                self.commits.add(saved.get("commit", "unknown"))
                return saved["result"] if kind is None else kind.from_dict(saved["result"])
        log("study", f"{section}: {name}")
        start = time.time()
        result = compute()
        seconds = time.time() - start
        self.seconds += seconds
        self.commits.add(self.commit)
        saved = result if kind is None else result.to_dict()
        record = {"key": key, "result": saved, "seconds": round(seconds, 1), "commit": self.commit}
        atomic_write_json(path, record)
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
        """A perplexity cell's `EvalConfig` (validated) at the study's `eval_precision`, `auto` resolved for the
        study's device: a cell's key names the precision it runs in."""
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
        for spec in self.config.models:
            for seed in self.config.seeds:
                config = train_config(self.config, spec, seed)
                run_dir = self.out / "models" / spec.label / f"seed{seed}"
                final = self.cell(
                    "training",
                    f"{spec.label}-seed{seed}",
                    config.to_dict(),
                    partial(self._train, config, run_dir),
                )
                self.models[(spec.label, seed)] = Path(final)

    def perplexity(self) -> dict[str, dict[str, dict[int, Evaluation]]]:
        """{mask: {label: {seed: evaluation}}} under every protocol at every length."""
        results: dict[str, dict[str, dict[int, Evaluation]]] = {}
        for mask in self.config.masks:
            for spec in self.config.models:
                for seed in self.config.seeds:
                    ev = self.eval_config(
                        lengths=self.config.lengths,
                        protocols=list(self.config.protocols),
                        mask=mask,
                        documents=self.config.documents,
                    )
                    key = {"weights": self.weights(spec.label, seed), "eval": ev.to_dict()}
                    result = self.cell(
                        "perplexity",
                        f"{spec.label}-{mask}-seed{seed}",
                        key,
                        partial(self._evaluate, spec.label, seed, ev, self.progress, spec.label),
                        kind=Evaluation,
                    )
                    results.setdefault(mask, {}).setdefault(spec.label, {})[seed] = result
        return results

    def analysis(self) -> dict[str, ModelAnalysis]:
        """Per model (seed 0): empirical resolution at L_tr and 2 L_tr (causal and BCA), ERF, dispersion."""
        section = self.config.analysis or {}
        documents = int(section.get("documents", 4))
        L = self.config.train_len
        results: dict[str, ModelAnalysis] = {}
        for spec in self.config.models:
            seed = self.config.seeds[0]
            key = {"weights": self.weights(spec.label, seed), "documents": documents, "lengths": self.config.lengths}
            results[spec.label] = self.cell(
                "analysis", spec.label, key, partial(self._analyse, spec, documents, L), kind=ModelAnalysis
            )
        return results

    @torch.no_grad()
    def _analyse_no_grad(self, model, texts, lengths) -> tuple[dict[str, dict[int, float]], dict[int, DispersionMeans]]:
        def r(n: int, mask: str) -> float:
            return empirical_scores(model, texts[:, :n], build_mask(mask, model.config.train_len)).r

        resolution = {mask: {n: r(n, mask) for n in lengths[:2]} for mask in ("causal", "bca")}
        return resolution, {n: DispersionMeans.of(dispersion(model, texts[:, :n], "causal")) for n in lengths}

    def _analyse(self, spec: ModelSpec, documents: int, L: int) -> ModelAnalysis:
        model = self.load(spec.label)
        lengths = self.config.lengths
        texts = calibration_windows(self.data, max(lengths), documents, "test")
        resolution, dispersion_means = self._analyse_no_grad(model, texts, lengths)
        erf_length = min(max(lengths), 8 * L)
        segments = calibration_windows(self.data, erf_length, documents, "test")
        field = receptive_field(model, segments, "causal")
        summary = ReceptiveFieldSummary(length=erf_length, erf=field.erf, share_last_L_tr=field.share_within(L))
        return ModelAnalysis(resolution=resolution, dispersion=dispersion_means, receptive_field=summary)

    def window_sweep(self, analysis: dict[str, ModelAnalysis]) -> dict[str, WindowSweep]:
        """Sliding-protocol perplexity at the longest length under window:w, for each model and w."""
        section = self.config.window_sweep or {}
        results: dict[str, WindowSweep] = {}
        length = max(self.config.lengths)
        for label in section.get("models", []):
            seed = self.config.seeds[0]
            row: dict[int, float] = {}
            for width in section.get("widths", []):
                ev = self.eval_config(
                    lengths=[length], protocols=["sliding"], mask=f"window:{width}", documents=self.config.documents
                )
                key = {"weights": self.weights(label, seed), "eval": ev.to_dict()}
                result = self.cell(
                    "window",
                    f"{label}-w{width}",
                    key,
                    partial(self._evaluate, label, 0, ev, False, ""),
                    kind=Evaluation,
                )
                row[width] = result.ppl("sliding", length)
            erf = analysis[label].receptive_field.erf if label in analysis else None
            results[label] = WindowSweep(ppl=row, erf=erf)
        return results

    def retrieval(self) -> dict[str, RetrievalResult]:
        """Fine-tune each variant's LM model (seed 0) on the task; accuracy at every length and depth."""
        from lextra.evaluate.retrieval import build_task, evaluate_retrieval, register_task_spec
        from lextra.pipelines.retrieval import parse_scaled_variant

        section = dict(self.config.retrieval or {})
        task_name = section.get("task", "passkey")
        samples = int(section.get("samples", 10))
        depths = [float(d) for d in section.get("depths", [0.0, 0.25, 0.5, 0.75, 1.0])]
        lengths = [self.config.train_len * int(m) for m in section.get("multiples", self.config.multiples)]
        results: dict[str, RetrievalResult] = {}
        tuned: dict[str, Path] = {}
        labels = {spec.label for spec in self.config.models}
        for variant in section.get("variants", []):
            name, _, scaled = variant.partition("+")
            if name in labels:  # a model's label (a hybrid's), then its scaling, if any
                scheme, scaling = name, parse_scaled_variant(f"rope+{scaled}")[1] if scaled else None
            else:
                scheme, scaling = parse_scaled_variant(variant)
            label = self.config.model(scheme).label
            if label not in tuned:
                config = train_config(self.config, self.config.model(label), self.config.seeds[0])
                config.task = register_task_spec(task_name)
                config.init_from = str(self.models[(label, self.config.seeds[0])])
                config.steps = int(section.get("steps", 1500))
                config.lr = float(section.get("lr", 1e-3))
                config.warmup = int(section.get("warmup", 50))
                run_dir = self.out / "retrieval" / label
                tuned[label] = Path(
                    self.cell(
                        "training",
                        f"{label}-{task_name}",
                        config.to_dict(),
                        partial(self._train, config, run_dir),
                    )
                )
            key = {
                "weights": sha256_file(tuned[label] / WEIGHTS_FILE),
                "scaling": scaling,
                "lengths": lengths,
                "samples": samples,
                "depths": depths,
            }

            def compute(label=label, scaling=scaling, variant=variant) -> RetrievalResult:
                model = load_lextra(
                    tuned[label], ModelOptions(setup_from(rope_scaling=scaling)), self.device
                ).model.eval()
                task = build_task(task_name, self.texts.tokenizer, self.texts.splits["test"])
                return evaluate_retrieval(
                    model, task, lengths, depths, samples=samples, progress=self.progress, label=variant
                )

            results[variant] = self.cell("retrieval", variant, key, compute, kind=RetrievalResult)
        return results

    def stretch(self) -> dict[str, dict[int, float]]:
        """Sliding-protocol perplexity of each model under each inference-time method at every length."""
        from lextra.methods import EXTEND, methods_for, prepared

        section = self.config.stretch or {}
        wanted = section.get("methods")
        extensions = [m for m in wanted or [] if m.startswith(EXTEND)]
        windows = int(section.get("windows", 2))
        factor = float(max(self.config.multiples))
        results: dict[str, dict[int, float]] = {}
        for label in section.get("models", []):
            base = self.load(label, self.config.seeds[0])
            for method in methods_for(base, extensions):
                if wanted and method not in wanted:
                    continue
                row: dict[int, float] = {}
                for length in self.config.lengths:
                    ev = self.eval_config(
                        lengths=[length],
                        protocols=["sliding"],
                        documents=self.config.documents,
                        span=max(self.config.lengths),
                    )
                    key = {
                        "weights": self.weights(label, self.config.seeds[0]),
                        "method": method,
                        "eval": ev.to_dict(),
                        "w": windows,
                    }

                    def compute(method=method, length=length, ev=ev, base=base) -> Evaluation:
                        model = prepared(base, method, self.data, length, factor, windows)
                        return evaluate_model(model, self.data, ev, progress=False)

                    result = self.cell("stretch", f"{label}-{method}-{length}", key, compute, kind=Evaluation)
                    row[length] = result.ppl("sliding", length)
                results[f"{label} + {method}"] = row
        return results

    def ruler(self) -> dict[str, Any]:
        """The RULER suite on each model (seed 0), cells resumable under `ruler/<label>/` with its own outputs; the
        models side by side in `ruler/comparison.md`, `comparison.csv` and `averages.png`."""
        from lextra.pipelines.ruler import RulerTarget, run_ruler, settings_from_section
        from lextra.reporting.ruler import save_ruler_comparison

        section = dict(self.config.ruler or {})
        settings = settings_from_section({"multiples": self.config.multiples, **section})
        seed = self.config.seeds[0]
        results = {}
        for label in section.pop("models", [m.label for m in self.config.models]):
            target = RulerTarget(
                self.load(label, seed), self.texts.tokenizer, label=label, key={"weights": self.weights(label, seed)}
            )
            result = run_ruler(target, settings, self.out / "ruler" / label, progress=self.progress)
            self.seconds += result.seconds
            results[label] = result
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
            results.retrieval = self.retrieval()
        if self.config.stretch is not None:
            results.stretch = self.stretch()
        if self.config.ruler is not None:  # its files are under ruler/<label>/, not in study.json
            self.ruler()
        results.compute_minutes = round(self.seconds / 60, 1)
        results.cell_commits = sorted(self.commits)
        atomic_write_json(self.out / "study.json", results.to_dict())
        return results


def train_config(study: StudyConfig, spec: ModelSpec, seed: int):
    """The study's training config for one model and seed."""
    config = copy.deepcopy(study.train)
    config.model.scheme = spec.scheme
    config.model.scheme_options = dict(spec.options)
    config.model.layer_plan = spec.layer_plan
    config.seed = seed
    if config.log_dir is not None:  # one TensorBoard run per model and seed
        config.log_dir = str(Path(config.log_dir) / spec.label / f"seed{seed}")
    return config.validate()
