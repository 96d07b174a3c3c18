"""A study's configuration: one TOML file under `experiments/` (see `experiments/study.toml`)."""

from __future__ import annotations

import copy
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lextra import serialize
from lextra.attention.masks import build_mask
from lextra.devices import check_eval_precision
from lextra.errors import ConfigError
from lextra.evaluate.retrieval import check_retrieval_task
from lextra.methods import EXTEND, extension_method
from lextra.pipelines.ruler import SECTION_KEYS as RULER_SECTION_KEYS
from lextra.pipelines.ruler import settings_from_section
from lextra.pipelines.study.until_learned import UntilLearned
from lextra.pipelines.task_study import TaskStudyConfig, parse_task_study
from lextra.pipelines.task_study.config import SCHEME_KEYS, entry_plan
from lextra.serialize import check_fields
from lextra.train import TrainConfig
from lextra.validate import check_int_list


@dataclass
class ModelSpec:
    """One trained model: a label and its layer plan (`lextra.attention.plan`: a hybrid such as
    `rnope-swa,window=32`, or one scheme on every layer, ablations as its options: `alibi,slope_shift=2.0`)."""

    label: str
    layer_plan: str = "rope"


@dataclass
class StudyConfig:
    """What a study trains, evaluates and analyses. Sections left out of the file are skipped."""

    name: str = "study"
    seeds: list[int] = field(default_factory=lambda: [0])
    train: TrainConfig = field(default_factory=TrainConfig)
    models: list[ModelSpec] = field(default_factory=list)
    #: evaluation lengths as multiples of L_tr
    multiples: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    protocols: list[str] = field(default_factory=lambda: ["chunks", "sliding", "last-token"])
    #: inference masks every model is evaluated with
    masks: list[str] = field(default_factory=lambda: ["causal", "bca"])
    documents: int = 8
    #: the precision of the perplexity evaluations: fp32, bf16 or auto (`lextra.evaluate.EvalConfig.precision`)
    eval_precision: str = "fp32"
    #: {"documents": N} to run resolution, receptive field and dispersion; None skips them
    analysis: dict[str, Any] | None = None
    #: {"models": [...], "widths": [...]}: windowed attention over a sweep of w, set against each model's ERF
    window_sweep: dict[str, Any] | None = None
    #: fine-tune each LM model on the task, then prompts at L_tr x multiples (keys: `SECTION_KEYS`)
    retrieval: dict[str, Any] | None = None
    #: {"models": [...], "methods": [...]}: inference-time methods on trained models; a method may be a
    #: training-free extension method, "extend:NAME[:KEY=VALUE,...]" (rotary models only)
    stretch: dict[str, Any] | None = None
    #: the RULER suite (`lextra.pipelines.ruler`) on the models (default all, seed 0) at L_tr x multiples
    ruler: dict[str, Any] | None = None

    @property
    def train_len(self) -> int:
        return self.train.model.train_len

    @property
    def lengths(self) -> list[int]:
        return [self.train_len * m for m in self.multiples]

    def model(self, label: str) -> ModelSpec:
        for spec in self.models:
            if spec.label == label:
                return spec
        raise ConfigError(f"study: no model labelled {label!r}; models: {', '.join(m.label for m in self.models)}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, `eval_precision` left out at fp32 (as `EvalConfig.to_dict` leaves out its `precision`)."""
        values = serialize.to_dict(self)
        if values.get("eval_precision") == "fp32":
            del values["eval_precision"]
        return values


SECTION_KEYS = {
    "analysis": {"documents"},
    "window_sweep": {"models", "widths"},
    "retrieval": {
        "task",
        "variants",
        "steps",
        "lr",
        "warmup",
        "samples",
        "depths",
        "multiples",
        "answer_inside",
        "until_learned",
    },
    "stretch": {"models", "methods", "windows"},
    "ruler": set(RULER_SECTION_KEYS),
}


def parse_study(data: dict[str, Any], where: str = "study config") -> StudyConfig:
    """Validate a parsed TOML document into a StudyConfig; unknown keys and schemes are errors. A `[data]`
    section's `path` (a prepared folder) is `[train] data`: training maps its shards, evaluations read its
    splits."""
    values = dict(data)
    train = dict(values.get("train", {}))
    section = values.pop("data", None)
    if section is not None:
        if not isinstance(section, dict) or set(section) != {"path"}:
            raise ConfigError(f"{where} [data]: takes one key, path = DIR (a `lextra data prepare` folder)")
        if train.get("data") not in (None, section["path"]):
            raise ConfigError(
                f"{where}: [data] path = {section['path']!r} and [train] data = {train['data']!r} name two folders; "
                "keep one"
            )
        train["data"] = section["path"]
    check_fields(StudyConfig, values, where)
    values["train"] = TrainConfig.from_dict(train).validate()
    values["models"] = _parse_models(values.get("models", []), values["train"], where)
    for name, keys in SECTION_KEYS.items():
        section = values.get(name)
        if section is not None:
            unknown = sorted(set(section) - keys)
            if unknown:
                raise ConfigError(f"{where} [{name}]: unknown keys {unknown}; known: {sorted(keys)}")
    config = StudyConfig(**values)
    _check_sections(config, where)
    return config


def _parse_models(entries: list[Any], train: TrainConfig, where: str) -> list[ModelSpec]:
    """The `[[models]]` entries as ModelSpecs, each scheme (or plan) built once so that unknown names and bad
    options fail before any training; at least one, with distinct labels."""
    models = []
    for entry in entries:
        if not isinstance(entry, dict) or "label" not in entry or not ({"scheme", "layer_plan"} & set(entry)):
            raise ConfigError(f"{where}: each [[models]] entry needs a label and a scheme or layer_plan, got {entry!r}")
        what = f"{where} [[models]] {entry.get('label')!r}"
        check_fields(ModelSpec, {k: v for k, v in entry.items() if k not in SCHEME_KEYS}, what)
        spec = ModelSpec(**entry_plan(entry, what))
        model = copy.deepcopy(train.model)
        model.layer_plan = spec.layer_plan
        model.validate()
        models.append(spec)
    if not models:
        raise ConfigError(f"{where}: no [[models]] to train")
    labels = [m.label for m in models]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"{where}: model labels must be distinct, got {labels}")
    return models


def _check_sections(config: StudyConfig, where: str) -> None:
    """The sections' values: the evaluation precision, masks, seeds, retrieval multiples, the model labels
    sections name, RULER's settings and the extension methods `[stretch]` runs (their options and the longest
    length)."""
    check_eval_precision(config.eval_precision, f"{where}: eval_precision")
    for mask in config.masks:
        build_mask(mask, config.train_len)
    if not config.seeds:
        raise ConfigError(f"{where}: seeds must list at least one seed")
    retrieval = config.retrieval or {}
    if "task" in retrieval:
        check_retrieval_task(str(retrieval["task"]))
    inside = retrieval.get("answer_inside", False)
    if not isinstance(inside, bool):
        raise ConfigError(f"{where} [retrieval] answer_inside is true or false, got {inside!r}")
    retrieval_multiples = retrieval.get("multiples")
    if retrieval_multiples is not None:
        check_int_list(f"{where} [retrieval] multiples", retrieval_multiples, 1)
    if "until_learned" in retrieval:
        UntilLearned.from_section(retrieval["until_learned"], where)
        if 1 not in (retrieval_multiples or config.multiples):
            raise ConfigError(
                f"{where} [retrieval] until_learned decides on the exact match at L_tr; add 1 to [retrieval] multiples"
            )
        _check_plain_variants(config, retrieval.get("variants", []), where)
    for name in ("window_sweep", "stretch"):
        for label in (getattr(config, name) or {}).get("models", []):
            config.model(label)
    if config.ruler is not None:  # task names, samples and threshold checked now; labels below
        settings_from_section({"multiples": config.multiples, **config.ruler})
        for label in config.ruler.get("models", []):
            config.model(label)
    for method in (config.stretch or {}).get("methods") or []:
        if isinstance(method, str) and method.startswith(EXTEND):  # options and the longest length checked now
            extension_method(method, config.train_len, config.lengths)


def _check_plain_variants(config: StudyConfig, variants: list[str], where: str) -> None:
    """`until_learned` decides on each fine-tuned model's unscaled variant: a model listed only with a RoPE scaling
    (`rope+yarn:4`) is refused, naming the variant to add."""
    labels = {spec.label for spec in config.models}
    plain = {v for v in variants if v in labels or "+" not in v}
    for variant in variants:
        name = variant if variant in labels else variant.partition("+")[0]
        if name not in plain:
            raise ConfigError(
                f"{where} [retrieval] until_learned decides on each model's unscaled score; add {name!r} to variants"
            )


def load_study(path: str | Path) -> StudyConfig | TaskStudyConfig:
    """Read and validate a study TOML file: a length-generalization study where it says `kind = "tasks"`."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"study config {path} does not exist; see experiments/study.toml for an example")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"study config {path} is not valid TOML ({err})") from None
    if data.get("kind") == "tasks":
        return parse_task_study(data, str(path))
    return parse_study(data, str(path))
