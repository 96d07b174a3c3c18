"""`lextra compare`: train one model per scheme (per seed) on the same data and budget, evaluate every variant
(a scheme plus an inference-time mask, e.g. `rope+bca`), and report one table and one plot. Finished cells are
reused; an interrupted training resumes from its last checkpoint."""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from lextra.attention.masks import build_mask
from lextra.attention.plan import stated_plan
from lextra.devices import resolve_device
from lextra.errors import ConfigError
from lextra.evaluate import EvalConfig, Evaluation, evaluate_model
from lextra.io import atomic_write_json, sha256_file
from lextra.model import WEIGHTS_FILE, load_model, read_model_meta
from lextra.pipelines.log import log
from lextra.pipelines.sharing import share_out
from lextra.positions import SCHEMES
from lextra.registry import split_compound
from lextra.reporting.perplexity import perplexity_report
from lextra.serialize import Serializable, options
from lextra.tensorboard import Board, run_log_dir
from lextra.train import CHECKPOINTS, FINAL, Distributed, TrainConfig, open_training_data, train

DEFAULT_VARIANTS = (
    "nope", "sinusoidal", "rope", "rope+bca", "xpos", "xpos+bca",
    "alibi", "t5", "kerple_log", "sandwich", "fire", "coca",
)  # fmt: skip


@dataclass(frozen=True)
class Variant:
    """A trained scheme evaluated with an inference-time mask (`causal` unless the spec says otherwise), or a
    trained layer plan (`plan`; its layers' own masks, causal elsewhere)."""

    label: str
    scheme: str
    mask: str
    plan: str | None = None

    @property
    def model(self) -> str:
        """The trained model it evaluates, its folder under `models/`: the scheme, or the plan's label."""
        return self.scheme if self.plan is None else self.label


@dataclass
class VariantResult(Serializable):
    """One evaluated variant: its evaluation and what it was computed for (the weights' checksum, scheme, mask)."""

    model_sha256: str
    scheme: str
    mask: str
    #: written inline: `results/<variant>.json` holds the evaluation's keys beside the fields above
    evaluation: Evaluation = field(metadata=options(inline=True))
    #: the training seed, where the comparison trains several (a result of one seed leaves it out)
    seed: int | None = field(default=None, metadata=options(omit_none=True))

    def fingerprint(self) -> dict[str, Any]:
        """What a cached result must match to be reused: the weights' checksum and the evaluation settings."""
        return {"model_sha256": self.model_sha256, "eval": self.evaluation.config}


@dataclass
class Comparison(Serializable):
    """Every variant's result with the training and evaluation settings they share (`summary.json`); with several
    seeds one entry per variant and seed (`<variant>-seed<k>`)."""

    variants: dict[str, VariantResult]
    train: dict[str, Any]
    eval: dict[str, Any]


def parse_variant(spec: str) -> Variant:
    """`rope`, `rope,base=500000`, `rope+bca`, `alibi+window:64` -> Variant: a scheme spec, then optionally `+` a
    mask spec (`lextra.registry.split_compound`); both are validated."""
    spec = spec.strip()
    parts = split_compound(spec)
    if len(parts) > 2:
        raise ConfigError(f"variant {spec!r}: give a scheme and at most one mask, SCHEME[+MASK]")
    scheme, mask = parts[0], (parts[1] if len(parts) > 1 else "causal")
    SCHEMES.parse(scheme)
    build_mask(mask, train_len=2)
    return Variant(spec, scheme, mask)


#: what a plan's label may hold: it names a folder and a table row
PLAN_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def parse_plan_variant(spec: str) -> Variant:
    """`LABEL=PLAN` (`swan=swan,window=32`, `hybrid=3*(rope+window:32);nope`) -> a plan Variant; the label must be
    a plain name (letters, digits, `.`, `_`, `-`), the plan is checked when its model is configured."""
    label, sep, plan = spec.partition("=")
    label, plan = label.strip(), plan.strip()
    if not sep or not plan or not PLAN_LABEL.fullmatch(label):
        raise ConfigError(
            f"--layer-plan {spec!r}: give LABEL=PLAN with LABEL a plain name, e.g. --layer-plan swan=swan,window=32"
        )
    return Variant(label, plan, "causal", plan)


def variant_config(base: TrainConfig, variant: Variant) -> TrainConfig:
    """The training config of a variant's model: `base` with its scheme (a plan of one variant) or its plan."""
    config = copy.deepcopy(base)
    config.model.layer_plan = stated_plan(variant.scheme) if variant.plan is None else variant.plan
    return config.validate()


def train_or_reuse(
    config: TrainConfig, run_dir: Path, progress: bool, device: str | torch.device | None = None
) -> Path:
    """The final model of `run_dir` if it was trained with `config`; else train on `device` (resuming an
    interrupted run). The device is not part of the settings compared: a model trained anywhere is reused."""
    final = run_dir / FINAL
    if (final / "config.json").exists():
        saved = read_model_meta(final).get("train")
        saved = saved and TrainConfig.from_dict(saved).to_dict()  # as this version writes it
        wanted = config.to_dict()
        wanted["model"]["vocab_size"] = saved["model"]["vocab_size"] if saved else None
        if saved == wanted:
            return final
        raise ConfigError(
            f"{run_dir} holds a model trained with other settings; use a new --out folder or the same settings"
        )
    resume = (run_dir / CHECKPOINTS).exists()
    return train(config, run_dir, resume=resume, progress=progress, device=device)


def compare(
    variants: list[str],
    base: TrainConfig,
    eval_config: EvalConfig,
    out_dir: str | Path,
    *,
    plans: Sequence[str] = (),
    seeds: Sequence[int] = (),
    progress: bool = True,
    device: str | torch.device | None = None,
) -> Comparison:
    """Train each distinct scheme and each layer plan (`LABEL=PLAN`) once per seed (none: `base.seed` alone) on
    `device` (None: CUDA when available), evaluate each variant, write the summary files and return the summary.
    Under torchrun every process trains every model, then the evaluations are shared out (`share_out`)."""
    out_dir = Path(out_dir)
    device = resolve_device(device)
    parsed = [parse_variant(v) for v in variants] + [parse_plan_variant(p) for p in plans]
    if not parsed:
        raise ConfigError("compare needs at least one scheme or --layer-plan")
    _check_labels(parsed)
    configs = {v.model: variant_config(base, v) for v in parsed}  # every plan checked before any training
    eval_config = eval_config.validate().for_device(device)  # `auto` precision resolved: cached cells name theirs
    train_len = base.model.train_len  # the span resolved: cached cells name the tokens they scored
    eval_config.span = eval_config.resolved_span(train_len, eval_config.resolved_lengths(train_len))
    base, runs = _seeds(seeds, base)
    clock = PhaseClock()
    models = _train_all(parsed, configs, runs, base, out_dir, progress, device, clock)
    world = Distributed.from_environment(device)
    weights = {key: sha256_file(folder / WEIGHTS_FILE) for key, folder in models.items()}  # once per model
    cells = [
        _Cell(out_dir, variant, models[variant.model, seed], weights[variant.model, seed], eval_config, seed)
        for variant in parsed
        for seed in runs
    ]
    results = {cell.key: cell.reused() for cell in cells}
    # the data the models trained on (their prepared folder, else the corpus), read at the first evaluation here
    data = functools.cache(lambda: open_training_data(copy.deepcopy(base), progress)[0])

    def evaluate(cell: _Cell) -> None:
        with clock.phase("evaluation"):
            results[cell.key] = cell.evaluate(data(), base, progress, device)

    def saved(cell: _Cell) -> bool:  # reads another process's result once it is written
        if results[cell.key] is None:
            results[cell.key] = _saved_result(cell.path, cell.fingerprint)
        return results[cell.key] is not None

    share_out(cells, world, evaluate, saved)
    finished = {key: result for key, result in results.items() if result is not None}  # all, after share_out
    summary = Comparison(variants=finished, train=base.to_dict(), eval=eval_config.to_dict())
    if world.is_main:
        rows: dict[str, list[Evaluation]] = {}
        for cell in cells:
            rows.setdefault(cell.variant.label, []).append(finished[cell.key].evaluation)
        title = f"trained at L_tr = {base.model.train_len}: perplexity beyond the training length"
        perplexity_report(rows, out_dir, title=title)
        atomic_write_json(out_dir / "summary.json", summary.to_dict())
        _log(clock.report())
    world.barrier()  # the summary files written before any process reads them
    return summary


def _train_all(
    parsed: list[Variant],
    configs: dict[str, TrainConfig],
    runs: list[int | None],
    base: TrainConfig,
    out_dir: Path,
    progress: bool,
    device: torch.device,
    clock: PhaseClock,
) -> dict[tuple[str, int | None], Path]:
    """(model, seed) -> its final folder, each model trained or reused in one order (a collective under torchrun)."""
    models: dict[tuple[str, int | None], Path] = {}
    for variant in parsed:
        for seed in runs:
            if (variant.model, seed) not in models:
                config = copy.deepcopy(configs[variant.model])
                config.seed = base.seed if seed is None else seed
                config.log_dir = _log_dir(base, variant, seed)
                _log(f"training {variant.model}" + ("" if seed is None else f", seed {seed}"))
                with clock.phase("training"):
                    run_dir = out_dir / "models" / variant.model
                    run_dir = run_dir if seed is None else run_dir / f"seed{seed}"
                    folder = train_or_reuse(config, run_dir, progress, device)
                models[variant.model, seed] = folder
    return models


def _seeds(seeds: Sequence[int], base: TrainConfig) -> tuple[TrainConfig, list[int | None]]:
    """The base config (a copy with its seed set where one seed is given) and the seeds to train: [None] (the base
    config's seed, the one-seed layout) unless several are given."""
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"compare --seeds {','.join(map(str, seeds))}: a seed is repeated; give each once")
    if len(seeds) == 1:
        base = copy.deepcopy(base)
        base.seed = seeds[0]
    return base, [None] if len(seeds) <= 1 else list(seeds)


def _log_dir(base: TrainConfig, variant: Variant, seed: int | None = None) -> str | None:
    """One TensorBoard run per model (and seed): its training curves and its variants' perplexity curves."""
    if base.log_dir is None:
        return None
    folder = Path(base.log_dir) / variant.model
    return str(folder if seed is None else folder / f"seed{seed}")


@dataclass
class _Cell:
    """One variant's evaluation: where its result goes and the fingerprint (weights, settings) it is cached by."""

    out_dir: Path
    variant: Variant
    model_dir: Path
    weights: str  # the sha256 of the model's weights file
    eval_config: EvalConfig
    seed: int | None = None  # None: the comparison trains one seed

    def __post_init__(self) -> None:
        self.settings = copy.deepcopy(self.eval_config)
        self.settings.mask = self.variant.mask
        self.key = self.variant.label if self.seed is None else f"{self.variant.label}-seed{self.seed}"
        self.path = self.out_dir / "results" / f"{self.key.replace(':', '-')}.json"
        self.fingerprint = {"model_sha256": self.weights, "eval": self.settings.to_dict()}

    def reused(self) -> VariantResult | None:
        """The saved result when it was computed for this fingerprint, else None."""
        result = _saved_result(self.path, self.fingerprint)
        if result is not None:
            _log(f"reusing {self.path}")
        return result

    def evaluate(self, data: Any, base: TrainConfig, progress: bool, device: torch.device) -> VariantResult:
        """Evaluate the variant's model, write its result file (and TensorBoard curves) and return it."""
        model = load_model(self.model_dir, map_location=device)
        _log(f"evaluating {self.variant.label}")
        evaluation = evaluate_model(model, data, self.settings, progress=progress, label=self.variant.label)
        record = VariantResult(self.weights, self.variant.scheme, self.variant.mask, evaluation, self.seed)
        atomic_write_json(self.path, record.to_dict())
        if base.tensorboard:  # written when computed, so a reused result is not logged twice
            board = Board(run_log_dir(_log_dir(base, self.variant, self.seed), self.model_dir.parent))
            board.evaluation(evaluation, self.variant.mask)
            board.close()
        return record


def _saved_result(result_path: Path, fingerprint: dict[str, Any]) -> VariantResult | None:
    """The saved result at `result_path` when it was computed for `fingerprint`, else None."""
    if not result_path.exists():
        return None
    cached = json.loads(result_path.read_text())
    if {k: cached.get(k) for k in fingerprint} != fingerprint:
        return None
    return VariantResult.from_dict(cached)


def _check_labels(variants: list[Variant]) -> None:
    """Refuse two variants of one label, and a plan labelled as a scheme variant's model (one folder each)."""
    labels = [v.label for v in variants]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ConfigError(f"compare: the label(s) {', '.join(repeated)} name two variants; give each its own")
    schemes = {v.scheme for v in variants if v.plan is None}
    clash = sorted(v.label for v in variants if v.plan is not None and v.label in schemes)
    if clash:
        raise ConfigError(f"compare: --layer-plan label(s) {', '.join(clash)} name a scheme compared too; rename them")


class PhaseClock:
    """Wall time per phase of a command (training, evaluation), and in all since it was made."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.seconds: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
            self.counts[name] = self.counts.get(name, 0) + 1

    def report(self) -> str:
        """`wall time 812 s: training 590 s (10 runs), evaluation 201 s (12 runs)`."""
        parts = [f"{name} {s:.0f} s ({self.counts[name]} runs)" for name, s in self.seconds.items()]
        total = time.perf_counter() - self.start
        return f"wall time {total:.0f} s" + (": " + ", ".join(parts) if parts else "")


_log = functools.partial(log, "compare")
