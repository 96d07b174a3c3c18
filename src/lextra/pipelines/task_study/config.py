"""A length-generalization study's configuration: a TOML file with `kind = "tasks"` (`experiments/ruoss.toml`):
each (task, model, seed) trained and scored inside and beyond its training range, beside published values."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from lextra import serialize
from lextra.attention.plan import stated_plan
from lextra.data.positions import build_sampler
from lextra.errors import ConfigError
from lextra.serialize import check_fields
from lextra.tasks import AlgorithmicTask, build_task, parse_lengths
from lextra.train import TrainConfig

#: what a `[[models]]` entry may state its layers by besides `layer_plan`: a scheme spec and its options
#: (`stated_plan` reads them as the plan of one variant)
SCHEME_KEYS = ("scheme", "options")


def entry_plan(entry: dict[str, Any], where: str) -> dict[str, Any]:
    """A `[[models]]` entry with its layers as one `layer_plan` (a `scheme` and `options` read by `stated_plan`)."""
    values = {k: v for k, v in entry.items() if k not in SCHEME_KEYS}
    values["layer_plan"] = stated_plan(entry.get("scheme"), entry.get("options"), entry.get("layer_plan"), what=where)
    return values


@dataclass
class TaskModelSpec:
    """One model of the study: a label, its layer plan (a scheme spec: one variant on every layer), its position sampler
    (`randomized:2048`, `pose:...`; contiguous by default) and Abacus digit embeddings (`{max_k = 99}`; none by
    default)."""

    label: str
    layer_plan: str = "rope"
    positions: str = "contiguous"
    abacus: dict[str, Any] | None = field(default=None, metadata=serialize.options(omit_none=True))


@dataclass
class Published:
    """A paper's value for one (task, model) cell, with where it was read ("not found" where a value could not be
    found: `value` None)."""

    task: str
    model: str
    value: float | None
    source: str


@dataclass
class TaskStudyConfig:
    """What a length-generalization study trains and scores; see the module docstring."""

    name: str = "length generalization"
    kind: str = "tasks"
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    #: seeds of the training data apart from the weights' (`TrainConfig.data_seed`): each cell is a (seed, data
    #: seed) pair, so `seeds = [0]` with several data seeds varies the data order alone (Zhou et al. 2024); None: the
    #: data follows `seeds`
    data_seeds: list[int] | None = None
    #: the training settings shared by every model (steps, batch, lr, model shape); `task` is set per task
    train: TrainConfig = field(default_factory=TrainConfig)
    models: list[TaskModelSpec] = field(default_factory=list)
    #: task specs (`ruoss.parity_check`, `mqar,pairs=8`)
    tasks: list[str] = field(default_factory=list)
    #: per task, training lengths LOW-HIGH overriding the task's paper range (a spec -> range)
    train_lengths: dict[str, str] = field(default_factory=dict)
    #: per task, test lengths: LOW-HIGH, or a list of lengths (e.g. [256, 512, 1024, 2048]); default the task's
    #: paper range
    test_lengths: dict[str, str | list[int]] = field(default_factory=dict)
    #: examples scored at each length
    samples: int = 128
    #: lengths scored inside the training range (evenly spaced, both ends included); beyond it every length is
    #: scored up to `test_points` evenly spaced ones (0: all)
    train_points: int = 8
    test_points: int = 0
    #: the in-distribution score a seed must reach to enter the extrapolation table (Ruoss et al.'s and the issue's
    #: mastery bar)
    threshold: float = 0.95
    #: what the paper found, per (task, model), with its source
    published: list[Published] = field(default_factory=list)
    #: the paper the published values come from, and what this study scales down (written into the report)
    paper: str = ""
    notes: str = ""

    def lengths_for(self, task: AlgorithmicTask, spec: str) -> tuple[list[int], list[int]]:
        """The lengths one task is scored at inside its training range (`train_points` of them) and beyond it (the
        config's list, else `test_points` of the range): the config's ranges, else the task's paper ranges."""
        trained = parse_lengths(self.train_lengths.get(spec, task.train_lengths), f"train_lengths[{spec!r}]")
        given = self.test_lengths.get(spec, task.test_lengths)
        if isinstance(given, list):
            if not given or not all(isinstance(n, int) and not isinstance(n, bool) for n in given):
                raise ConfigError(f"test_lengths[{spec!r}]: a list of lengths must hold whole numbers, got {given!r}")
            for n in given:
                task.check_length(n)
            beyond = sorted(set(given))
        else:
            beyond = spaced(task.length_values(parse_lengths(given, f"test_lengths[{spec!r}]")), self.test_points)
        if beyond[0] <= trained.high:
            raise ConfigError(
                f"task {spec}: test lengths from {beyond[0]} start inside the training range {trained.text()}; "
                f"start them above {trained.high}"
            )
        return spaced(task.length_values(trained), self.train_points), beyond

    def runs(self) -> list[tuple[int, int | None]]:
        """The (seed, data seed) pairs each (task, model) is trained with; data seed None: the data follows the seed."""
        data_seeds: list[int | None] = list(self.data_seeds) if self.data_seeds is not None else [None]
        return [(seed, data) for seed in self.seeds for data in data_seeds]

    def replicates(self) -> str:
        """The seeds a mean is over, as the report writes them."""
        return f"seeds {self.seeds}" + ("" if self.data_seeds is None else f" x data seeds {self.data_seeds}")

    def train_config(self, spec: TaskModelSpec, task: str, seed: int, data_seed: int | None = None) -> TrainConfig:
        """The training config of one (model, task, seed, data seed)."""
        config = copy.deepcopy(self.train)
        config.model.layer_plan = spec.layer_plan
        config.model.abacus = None if spec.abacus is None else dict(spec.abacus)
        config.positions, config.task, config.seed, config.data_seed = spec.positions, task, seed, data_seed
        config.task_lengths = self.train_lengths.get(task)
        config.eval_sequences = 0
        return config.validate()


def spaced(values: list[int], points: int) -> list[int]:
    """`points` of the lengths `values` evenly spaced, both ends included (every one when 0 or enough)."""
    if points <= 0 or points >= len(values):
        return values
    if points == 1:
        return [values[-1]]
    return sorted({values[round(i * (len(values) - 1) / (points - 1))] for i in range(points)})


def parse_task_study(data: dict[str, Any], where: str = "study config") -> TaskStudyConfig:
    """Validate a parsed TOML document (`kind = "tasks"`) into a TaskStudyConfig: unknown keys, tasks, schemes,
    samplers and an empty seed list fail here, before any training."""
    values = dict(data)
    check_fields(TaskStudyConfig, values, where)
    train = dict(values.get("train", {}))
    for name, what in (("task", "tasks list"), ("seed", "seeds"), ("data_seed", "data_seeds")):
        if name in train:
            raise ConfigError(f"{where} [train]: {name} is set per cell by the study's {what}; drop it")
    values["train"] = TrainConfig.from_dict(train)
    values["models"] = [_model(entry, where) for entry in values.get("models", [])]
    values["published"] = [_published(entry, where) for entry in values.get("published", [])]
    config = TaskStudyConfig(**values)
    if not config.seeds:
        raise ConfigError(f"{where}: seeds is empty; list at least one seed, e.g. seeds = [0, 1, 2]")
    for name in ("seeds", "data_seeds"):
        given = getattr(config, name)
        if given is not None and not _distinct_seeds(given):
            raise ConfigError(f"{where}: {name} must be a non-empty list of distinct whole numbers >= 0, e.g. "
                              f"{name} = [0, 1, 2]; got {given!r}")  # fmt: skip
    if not config.models or not config.tasks:
        raise ConfigError(f"{where}: a task study needs [[models]] and tasks = [...]")
    labels = [m.label for m in config.models]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"{where}: model labels must be distinct, got {labels}")
    if not 0 < config.threshold <= 1:
        raise ConfigError(f"{where}: threshold is a score in (0, 1], got {config.threshold}")
    for name in ("samples", "train_points"):
        if not isinstance(getattr(config, name), int) or getattr(config, name) < 1:
            raise ConfigError(f"{where}: {name} must be a positive integer, got {getattr(config, name)!r}")
    for spec, task in zip(config.tasks, [build_task(spec) for spec in config.tasks], strict=True):
        config.lengths_for(task, spec)
        for model in config.models:  # schemes, plans and samplers built now: bad names fail before training
            trained = config.train_config(model, spec, config.seeds[0])
            build_sampler(model.positions, trained.model.train_len)
    for entry in config.published:
        if entry.task not in config.tasks or entry.model not in labels:
            raise ConfigError(f"{where} [[published]]: {entry.task}/{entry.model} names no task and model of the study")
    return config


def _distinct_seeds(given: Any) -> bool:
    """Whether `given` is a non-empty list of distinct whole numbers >= 0."""
    whole = isinstance(given, list) and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in given)
    return whole and 0 < len(set(given)) == len(given)


def _model(entry: Any, where: str) -> TaskModelSpec:
    if not isinstance(entry, dict) or "label" not in entry:
        raise ConfigError(f"{where}: each [[models]] entry needs a label, got {entry!r}")
    what = f"{where} [[models]] {entry['label']!r}"
    check_fields(TaskModelSpec, {k: v for k, v in entry.items() if k not in SCHEME_KEYS}, what)
    return TaskModelSpec(**entry_plan(entry, what))


def _published(entry: Any, where: str) -> Published:
    if not isinstance(entry, dict) or not {"task", "model", "source"} <= set(entry):
        raise ConfigError(f"{where}: each [[published]] entry needs task, model, value and source, got {entry!r}")
    check_fields(Published, entry, f"{where} [[published]]")
    value = entry.get("value")
    return Published(entry["task"], entry["model"], None if value is None else float(value), entry["source"])
