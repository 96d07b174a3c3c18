"""Typed results read the JSON files that untyped versions of lextra wrote (tests/data/results_v0, written by the
commit before the types) and write them back byte for byte; fresh results have the same keys as those files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import json_shape, with_intervals

from lextra.analysis import dispersion, empirical_scores, receptive_field
from lextra.data import ByteTokenizer, Document
from lextra.data.prepare import prepare_data
from lextra.evaluate import EvalConfig, Evaluation, evaluate_model
from lextra.evaluate.retrieval import CompletionResult, RetrievalResult, evaluate_completion, evaluate_retrieval
from lextra.model import GPT, GPTConfig
from lextra.pipelines.analyze import DispersionRow, ReceptiveFieldRow, ResolutionRow
from lextra.pipelines.compare import Comparison, VariantResult
from lextra.pipelines.study import Cell, Study, parse_study
from lextra.reporting.study_results import ModelAnalysis, StudyResults
from lextra.tasks.retrieval import build_task

OLD = Path(__file__).parent / "data" / "results_v0"


def load(name: str) -> Any:
    return json.loads((OLD / name).read_text())


def written(data: Any) -> str:
    """`data` as `lextra.io.atomic_write_json` writes it."""
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


# --- old files load and are written back unchanged ---------------------------------------------------------------


def test_an_old_eval_file_reads_as_an_evaluation_and_writes_back_unchanged() -> None:
    old = load("eval.json")
    evaluation = Evaluation.from_dict(old)
    assert (
        written({"model": old["model"], "corpus": old["corpus"], **evaluation.to_dict()})
        == (OLD / "eval.json").read_text()
    )
    assert evaluation.protocols == ["chunks", "last-token", "sliding"] and evaluation.lengths == [32, 64]
    assert evaluation.ppl("sliding", 64) == old["results"]["sliding"]["64"]["ppl"]
    assert evaluation.point("chunks", 32).tokens == old["results"]["chunks"]["32"]["tokens"]
    assert evaluation.curve("last-token") == {int(n): p["ppl"] for n, p in old["results"]["last-token"].items()}
    assert evaluation.strides == {32: 16, 64: 32} and evaluation.config == old["eval"]


def test_an_old_compare_cell_keeps_its_fingerprint_and_bytes() -> None:
    old = load("compare_cell.json")
    cell = VariantResult.from_dict(old)
    assert written(cell.to_dict()) == (OLD / "compare_cell.json").read_text()
    assert cell.fingerprint() == {"model_sha256": old["model_sha256"], "eval": old["eval"]}
    assert (cell.scheme, cell.mask) == ("rope", "causal")
    summary = Comparison.from_dict(load("compare_summary.json"))
    assert written(summary.to_dict()) == (OLD / "compare_summary.json").read_text()
    assert set(summary.variants) == {"alibi", "alibi+bca", "rope"}
    assert summary.variants["rope"].evaluation == cell.evaluation


def test_an_old_retrieval_file_recomputes_its_means_exactly() -> None:
    old = load("retrieval.json")
    result = RetrievalResult.from_dict(old)
    assert written(result.to_dict()) == (OLD / "retrieval.json").read_text()  # by_length and overall included
    assert result.lengths == [128, 256, 1024] and result.depths == [0.0, 0.5, 1.0]
    assert result.cell(1024, 0.5).samples == 2 and result.cell(1024, 0.5).exact == old["cells"]["1024"]["0.5"]["exact"]
    assert result.by_length[256].rank1 == old["by_length"]["256"]["rank1"]
    assert result.overall.mean_rank == old["overall"]["mean_rank"] and result.model == old["model"]


def test_an_old_completion_file_round_trips() -> None:
    old = load("completion.json")
    results = {label: CompletionResult.from_dict(r) for label, r in old.items()}
    assert written({label: r.to_dict() for label, r in results.items()}) == (OLD / "completion.json").read_text()
    assert results["rope"].buckets[64].lines == old["rope"]["buckets"]["64"]["lines"]
    assert results["rope"].buckets[32].full.edit_sim == old["rope"]["buckets"]["32"]["full"]["edit_sim"]


def test_an_old_study_json_round_trips() -> None:
    old = load("study.json")
    results = StudyResults.from_dict(old)
    assert written(results.to_dict()) == (OLD / "study.json").read_text()
    assert (
        results.perplexity["bca"]["rope"][0].ppl("chunks", 256)
        == (old["perplexity"]["bca"]["rope"]["0"]["results"]["chunks"]["256"]["ppl"])
    )
    assert results.window_sweep["rope"].erf == old["window_sweep"]["rope"]["erf"]
    assert results.window_sweep["rope"].ppl[16] == old["window_sweep"]["rope"]["16"]
    assert results.analysis["rope"].resolution["bca"][256] == old["analysis"]["rope"]["resolution"]["bca"]["256"]
    assert results.stretch["alibi-x4 + none"][128] == old["stretch"]["alibi-x4 + none"]["128"]


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("perplexity", Evaluation),
        ("window", Evaluation),
        ("stretch", Evaluation),
        ("analysis", ModelAnalysis),
        ("retrieval", RetrievalResult),
    ],
)
def test_old_study_cells_are_reused_as_typed_results(tmp_path: Path, name: str, kind: type) -> None:
    old = load(f"study_cells/{name}.json")
    assert written(kind.from_dict(old["result"]).to_dict()) == written(old["result"])
    folder = tmp_path / "cells" / name
    folder.mkdir(parents=True)
    (folder / "old.json").write_text((OLD / "study_cells" / f"{name}.json").read_text())
    study = Study(parse_study({"models": [{"label": "rope", "scheme": "rope"}]}), tmp_path)
    (cached,) = study.cells([Cell(name, "old", old["key"], lambda: pytest.fail("recomputed an old cell"), kind)])
    assert isinstance(cached, kind) and cached == kind.from_dict(old["result"])
    assert study.commits == {old["commit"]} and study.seconds == old["seconds"]


@pytest.mark.parametrize(
    ("name", "row"),
    [("resolution", ResolutionRow), ("receptive_field", ReceptiveFieldRow), ("dispersion", DispersionRow)],
)
def test_old_analysis_rows_round_trip(name: str, row: type) -> None:
    old = load(f"{name}.json")
    rows = {label: row.from_dict(r) for label, r in old["rows"].items()}
    assert {label: r.to_dict() for label, r in rows.items()} == old["rows"]
    assert (
        written({**old, "rows": {label: r.to_dict() for label, r in rows.items()}})
        == (OLD / f"{name}.json").read_text()
    )


# --- fresh results are written with the same keys ----------------------------------------------------------------


def tiny_model(train_len: int = 32) -> GPT:
    return GPT(GPTConfig(n_layer=1, n_head=2, d_model=16, train_len=train_len, layer_plan="rope")).eval()


def test_a_fresh_evaluation_has_the_keys_of_an_old_one(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(24):
        (corpus / f"d{i}.txt").write_text(f"document {i}: " + " ".join(str(j * j + i) for j in range(60 + i)))
    evaluation = evaluate_model(
        tiny_model(),
        prepare_data(str(corpus)),
        EvalConfig(lengths=[32, 64], documents=2, span=64, split="train"),
        progress=False,
    )
    old = {k: v for k, v in load("eval.json").items() if k not in ("model", "corpus")}
    # what an old file lacks: each point's interval and per-document sums, the span and the documents' sources
    assert json_shape(evaluation.to_dict()) == with_intervals(json_shape(old))
    assert Evaluation.from_dict(json.loads(written(evaluation.to_dict()))) == evaluation


def test_fresh_retrieval_and_completion_results_have_the_keys_of_old_ones() -> None:
    task = build_task("passkey", ByteTokenizer())
    result = evaluate_retrieval(tiny_model(), task, [128, 256], [0.0, 1.0], samples=2, label="rope")
    result.model = "runs/rope"
    # what an old file lacks: each cell's answer NLL
    assert json_shape(result.to_dict()) == with_intervals(json_shape(load("retrieval.json")))
    assert RetrievalResult.from_dict(json.loads(written(result.to_dict()))) == result
    code = [Document(f"f{i}.py", f"def f{i}(x):\n    return x + {i}\n\n" * 20) for i in range(4)]
    completion = evaluate_completion(tiny_model(16), code, ByteTokenizer(), [16, 32], lines=2, max_new=24)
    completion.model = "runs/code"
    assert json_shape(completion.to_dict()) == json_shape(load("completion.json")["rope"])
    assert CompletionResult.from_dict(json.loads(written(completion.to_dict()))) == completion


def test_fresh_analysis_results_have_the_keys_of_old_ones() -> None:
    model, texts = tiny_model(), torch.randint(0, 256, (1, 17))
    old = {name: load(f"{name}.json")["rows"]["rope"]["by_length"]["8"] for name in ("resolution", "dispersion")}
    old["receptive_field"] = load("receptive_field.json")["rows"]["rope"]["by_length"]["8"]
    assert json_shape(empirical_scores(model, texts[:, :8]).to_dict()) == json_shape(old["resolution"])
    assert json_shape(dispersion(model, texts[:, :8]).to_dict()) == json_shape(old["dispersion"])
    assert json_shape(receptive_field(model, texts[:, :9]).to_dict()) == json_shape(old["receptive_field"])
