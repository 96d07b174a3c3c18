"""Every serialised class writes exactly the JSON it wrote before `lextra.serialize` (tests/data/serialize_v1.json,
written by the hand-written `to_dict` / `from_dict` methods), and the helper's own rules hold."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from lextra import serialize
from lextra.analysis.dispersion import Dispersion, FirstLayerLogits, QQSummary, RowStatistics
from lextra.analysis.receptive_field import ReceptiveField
from lextra.analysis.resolution import ResolutionSummary
from lextra.errors import ConfigError
from lextra.evaluate import EvalConfig
from lextra.evaluate.ruler import RulerAnswer, RulerCell, RulerExample, RulerResult
from lextra.methods.align import Alignment
from lextra.model import GPTConfig
from lextra.pipelines.study import parse_study
from lextra.reporting.study_results import WindowSweep
from lextra.train import TrainConfig

FIXTURES = Path(__file__).parent / "data" / "serialize_v1.json"

#: class name -> class, for the read-and-write cases
READ = {
    cls.__name__: cls
    for cls in (
        GPTConfig,
        TrainConfig,
        RulerAnswer,
        RulerCell,
        RulerExample,
        RulerResult,
        ResolutionSummary,
        ReceptiveField,
        Dispersion,
        FirstLayerLogits,
        QQSummary,
        RowStatistics,
        WindowSweep,
    )
}


def read_cases() -> list[tuple[str, dict[str, Any]]]:
    """(class name, input dict): each is read with `from_dict` and written back with `to_dict`."""
    answer = {"index": "3", "references": ["a", "b"], "output": "a", "score": 1, "seconds": 0.123456}
    cell = {
        "task": "niah_single_1",
        "length": "256",
        "score": 50.0,
        "low": 9.5,
        "high": 90.5,
        "samples": 2,
        "seconds": 1.5,
        "examples": [{"references": ["x"], "output": "y", "score": 0.0}],
    }
    ruler = {
        "label": "rope",
        "tasks": ["niah_single_1", "vt"],
        "lengths": [256, 512],
        "samples": 2,
        "seed": 0,
        "threshold": 85.6,
        "cells": {
            "niah_single_1": {
                "256": {**cell, "prefill_seconds": 0.5},
                "512": {**cell, "length": 512, "score": 0.0, "prefill_seconds": 0.25},
            },
            "vt": {
                "256": {**cell, "task": "vt", "score": 100.0, "prefill_seconds": 1.0},
                "512": {**cell, "task": "vt", "length": 512, "prefill_seconds": 1.25},
            },
        },
    }
    qq = {"normal": [-1.0, 1.0], "sample": [-0.5, 0.75], "skewness": 0.1, "excess_kurtosis": -0.2, "count": 7}
    first = {"sorted_logits": [2.0, 1.0], "logit_std": 0.5, "top_z": 3.0, "qq": qq}
    dispersion = {
        "entropy": [1.0, 2.0],
        "max_prob": [0.5, 0.25],
        "entropy_per_head": [[1.0], [2.0]],
        "max_prob_per_head": [[0.5], [0.25]],
        "entropy_mean": 1.5,
        "max_prob_mean": 0.375,
        "rows": 12,
        "uniform": {"entropy": 2.5, "max_prob": 0.125},
        "first_layer": first,
    }
    return [
        ("GPTConfig", {}),
        (
            "GPTConfig",
            {
                "n_layer": 2,
                "n_head": 2,
                "d_model": 32,
                "scheme": "alibi",
                "scheme_options": {"slope_shift": 1},
                "temperatures": [[1.0, 0.5], [2.0, 1.5]],
                "log_scaling": "qwen",
            },
        ),
        ("TrainConfig", {"steps": 10, "limit_chars": 1000, "model": {"train_len": 64, "scheme": "fire"}}),
        ("TrainConfig", {"corpus": "tiny", "task": "passkey", "init_from": "runs/x/model", "precision": "bf16"}),
        ("RulerAnswer", answer),
        ("RulerAnswer", {**answer, "prefill_seconds": 0.0456789}),
        ("RulerAnswer", {**answer, "prefill_seconds": None}),
        ("RulerExample", {"references": ["x"], "output": "y", "score": 1}),
        ("RulerCell", cell),
        ("RulerCell", {key: value for key, value in cell.items() if key != "examples"}),
        ("RulerCell", {**cell, "prefill_seconds": 0.75}),
        ("RulerResult", ruler),
        ("RulerResult", {**ruler, "chat": True, "model": "HuggingFaceTB/SmolLM2-135M"}),
        (
            "ResolutionSummary",
            {
                "R": 0.25,
                "visible": 3,
                "R_per_layer": [0.5, 0.125],
                "R_per_head": [[0.5], [0.1]],
                "R_head_mean": 0.3,
                "s": [1.0, 0.5, 0.0],
                "s_per_layer": [[1.0, 0.5, 0.0]],
            },
        ),
        ("ReceptiveField", {"erf": 5, "erf_per_segment_mean": 4.5, "segments": 2, "curve": [0.5, 1.0]}),
        ("QQSummary", qq),
        ("FirstLayerLogits", first),
        ("RowStatistics", {"entropy": 1.0, "max_prob": 0.5}),
        ("Dispersion", dispersion),
        ("WindowSweep", {"16": 3.5, "32": 2.25, "erf": 12}),
        ("WindowSweep", {"16": 3.5, "erf": None}),
    ]


def write_cases() -> dict[str, Any]:
    """Instances of the classes that are only written (the configs a run records, an alignment)."""
    study = parse_study(
        {
            "name": "s",
            "seeds": [0, 1],
            "train": {"steps": 5, "model": {"train_len": 32}},
            "models": [
                {"label": "rope", "scheme": "rope"},
                {"label": "alibi", "scheme": "alibi", "options": {"slope_shift": 1}},
            ],
            "analysis": {"documents": 2},
            "window_sweep": {"models": ["rope"], "widths": [8, 16]},
        }
    )
    return {
        "EvalConfig": EvalConfig(),
        "EvalConfig lengths": EvalConfig(lengths=[64, 128], protocols=["sliding"], stride=8, span=256),
        "StudyConfig": study,
        "Alignment": Alignment("pmax", 256, 64, True, [[1.0, 0.5]], [0.5], [0.25], [0.5], [(0, 1)]),
    }


def old_output() -> dict[str, Any]:
    """What the fixture file holds: each case's output (written by the code before `lextra.serialize`)."""
    return {
        "read": [[name, data, READ[name].from_dict(data).to_dict()] for name, data in read_cases()],
        "write": {name: obj.to_dict() for name, obj in write_cases().items()},
    }


def as_json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True)


@pytest.fixture(scope="module")
def saved() -> dict[str, Any]:
    return json.loads(FIXTURES.read_text())


def test_the_fixture_cases_are_the_ones_saved(saved: dict[str, Any]) -> None:
    assert [[name, json.loads(json.dumps(data))] for name, data in read_cases()] == [c[:2] for c in saved["read"]]
    assert sorted(write_cases()) == sorted(saved["write"])


@pytest.mark.parametrize("index", range(len(read_cases())))
def test_each_class_reads_and_writes_what_it_did_before(saved: dict[str, Any], index: int) -> None:
    name, data, expected = saved["read"][index]
    obj = READ[name].from_dict(data)
    assert as_json(obj.to_dict()) == as_json(expected)
    assert as_json(READ[name].from_dict(expected).to_dict()) == as_json(expected)  # a written file reads back


@pytest.mark.parametrize("name", sorted(write_cases()))
def test_each_written_class_writes_what_it_did_before(saved: dict[str, Any], name: str) -> None:
    assert as_json(write_cases()[name].to_dict()) == as_json(saved["write"][name])


# --- the helper's rules, on small classes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    x: float
    label: str = ""


@dataclass
class Shape:
    name: str
    points: list[Point]
    by_size: dict[int, Point]
    corners: tuple[int, int]
    weights: dict[float, list[float]] = field(default_factory=dict)
    note: str | None = field(default=None, metadata={"omit_none": True})
    scale: float = field(default=1.0, metadata={"key": "Scale"})
    parent: Point | None = None


def test_nested_dataclasses_number_keys_and_tuples_round_trip() -> None:
    shape = Shape("s", [Point(1.0, "a")], {4: Point(2.0)}, (3, 4), {0.5: [math.inf, -math.inf]}, parent=Point(0.5))
    data = serialize.to_dict(shape)
    assert data == {
        "name": "s",
        "points": [{"x": 1.0, "label": "a"}],
        "by_size": {"4": {"x": 2.0, "label": ""}},
        "corners": [3, 4],
        "weights": {"0.5": [math.inf, -math.inf]},
        "Scale": 1.0,
        "parent": {"x": 0.5, "label": ""},
    }
    assert serialize.from_dict(Shape, json.loads(json.dumps(data))) == shape
    assert serialize.from_dict(Shape, {**data, "note": "n"}).note == "n" and "note" in serialize.to_dict(
        serialize.from_dict(Shape, {**data, "note": "n"})
    )


def test_nan_survives_a_round_trip() -> None:
    back = serialize.from_dict(Point, json.loads(json.dumps(serialize.to_dict(Point(math.nan)))))
    assert math.isnan(back.x)


def test_missing_keys_take_defaults_and_required_ones_are_named() -> None:
    assert serialize.from_dict(Point, {"x": 2}) == Point(2)
    with pytest.raises(KeyError, match="'x'"):
        serialize.from_dict(Point, {"label": "a"})


def test_unknown_keys_are_ignored_or_refused_by_name() -> None:
    assert serialize.from_dict(Point, {"x": 1.0, "other": 2}) == Point(1.0)
    with pytest.raises(ConfigError, match=r"point: unknown field\(s\) other, zz; known: label, x"):
        serialize.from_dict(Point, {"x": 1.0, "other": 2, "zz": 3}, refuse_unknown="point")


def test_a_wrong_shape_is_a_type_error_naming_the_field() -> None:
    with pytest.raises(TypeError, match=r"Shape\.points: expected a list, got 'p'"):
        serialize.from_dict(Shape, {"name": "s", "points": "p", "by_size": {}, "corners": [1, 2]})
    with pytest.raises(TypeError, match=r"Shape\.by_size: expected an object"):
        serialize.from_dict(Shape, {"name": "s", "points": [], "by_size": [1], "corners": [1, 2]})


def test_configs_refuse_unknown_keys_and_refuse_a_non_table_model() -> None:
    with pytest.raises(ConfigError, match=r"model config: unknown field\(s\) layers"):
        GPTConfig.from_dict({"layers": 2})
    with pytest.raises(ConfigError, match=r"training config: unknown field\(s\) stepz"):
        TrainConfig.from_dict({"stepz": 2})
    with pytest.raises(ConfigError, match="training config: model must be a table of fields, got 'big'"):
        TrainConfig.from_dict({"model": "big"})
    with pytest.raises(ConfigError, match="model config: scheme_options must be a table, got 3"):
        GPTConfig.from_dict({"scheme_options": 3})
