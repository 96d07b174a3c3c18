"""A retrieval study's `until_learned` rule: models under the bar at L_tr after the budget go on in rounds at the final
learning rate until held-out prompts reach the bar; their cells are replaced, reported and reused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_study import _corpus as study_corpus

from lextra.data.prepare import prepare_data
from lextra.errors import ConfigError
from lextra.evaluate.retrieval import evaluate_retrieval, evaluation_task
from lextra.model import load_model, read_model_meta
from lextra.pipelines.study import Study, parse_study
from lextra.pipelines.study.until_learned import ROUND_SEED_STRIDE, UntilLearned
from lextra.reporting.study import extra_rounds_lines
from lextra.train import TrainConfig

STUDY = {
    "name": "until",
    "multiples": [1, 2],
    "protocols": ["chunks"],
    "masks": ["causal"],
    "documents": 1,
    "train": {
        "steps": 2,
        "batch_size": 2,
        "checkpoint_every": 0,
        "eval_sequences": 2,
        "model": {"train_len": 128, "n_layer": 1, "d_model": 32, "n_head": 2},
    },
    "models": [{"label": "rope", "scheme": "rope"}],
    "retrieval": {
        "task": "passkey",
        "variants": ["rope", "rope+dynamic"],
        "steps": 2,
        "samples": 1,
        "depths": [0.5],
        "answer_inside": True,
        "until_learned": {"rounds": 2, "steps": 1},
    },
}


def _study(corpus: str, **retrieval: object) -> dict:
    data = json.loads(json.dumps(STUDY))
    data["train"]["corpus"] = corpus
    data["retrieval"].update(retrieval)
    return data


@pytest.fixture
def corpus(tmp_path: Path) -> str:
    return study_corpus(tmp_path)


def test_a_round_goes_on_at_the_final_learning_rate_from_the_last_weights_on_fresh_rows() -> None:
    fine_tune = TrainConfig(steps=6000, lr=1e-3, min_lr_ratio=0.1, warmup=100, seed=2).validate()
    config = UntilLearned(rounds=3, steps=1500).round_config(fine_tune, "runs/x/model", 2)
    assert (config.steps, config.warmup, config.min_lr_ratio) == (1500, 0, 1.0)
    assert config.lr == pytest.approx(1e-4) and config.init_from == "runs/x/model" and config.init_optimizer
    assert config.seed == 2 and config.batch_seed == 2 + 2 * ROUND_SEED_STRIDE  # the weights' seed kept
    assert fine_tune.steps == 6000 and fine_tune.data_seed is None  # the fine-tuning's config untouched


def test_bad_rules_are_refused_when_the_study_loads(corpus: str) -> None:
    for rule, message in [
        ({"rounds": 2}, r"until_learned is a table \{rounds = R, steps = S\}"),
        ({"rounds": 2, "steps": 1, "patience": 3}, "until_learned is a table"),
        ({"rounds": 0, "steps": 1}, "until_learned rounds must be a positive integer"),
        ({"rounds": 1, "steps": 1, "bar": 1.5}, "until_learned bar"),
        ({"rounds": 1, "steps": 1, "prompt_seed": 0}, "until_learned prompt_seed must be a positive integer"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_study(_study(corpus, until_learned=rule))
    with pytest.raises(ConfigError, match=r"decides on the exact match at L_tr; add 1 to \[retrieval\] multiples"):
        parse_study(_study(corpus, multiples=[2, 4]))
    with pytest.raises(ConfigError, match="decides on each model's unscaled score; add 'rope' to variants"):
        parse_study(_study(corpus, variants=["rope+dynamic"]))


def test_a_model_under_the_bar_is_fine_tuned_in_rounds_and_its_cells_replaced(corpus: str, tmp_path: Path,
                                                                              monkeypatch) -> None:  # fmt: skip
    out = tmp_path / "out"
    results = Study(parse_study(_study(corpus)), out, progress=False).run()
    budget = json.loads((out / "cells" / "retrieval" / "rope.json").read_text())["result"]
    assert budget["by_length"]["128"]["exact"] < 0.9  # 2 steps: not learned, so both rounds ran
    for variant, name in (("rope", "rope"), ("rope+dynamic", "rope_dynamic")):
        record = json.loads((out / "cells" / "retrieval" / f"{name}-until-learned.json").read_text())
        assert record["key"]["until_learned"] == {"rounds": 2, "steps": 1, "bar": 0.9, "prompt_seed": 1}
        assert record["result"]["extra_steps"] == 2 and len(record["result"]["held_out_exact"]) == 2
        assert results.retrieval is not None and results.retrieval[variant].extra_steps == 2
    # each round starts from the last one's weights, at the fine-tuning's final rate, on its own rows
    rounds = [read_model_meta(out / "retrieval" / f"rope-round{k}" / "model")["train"] for k in (1, 2)]
    assert rounds[0]["init_from"] == str(out / "retrieval" / "rope" / "model")
    assert rounds[1]["init_from"] == str(out / "retrieval" / "rope-round1" / "model")
    assert [r["data_seed"] for r in rounds] == [ROUND_SEED_STRIDE, 2 * ROUND_SEED_STRIDE]
    assert rounds[0]["lr"] == pytest.approx(1e-4) and rounds[0]["steps"] == 1
    assert rounds[0]["init_optimizer"] is rounds[1]["init_optimizer"] is True  # the optimizer's moments continued
    # the reported cell is the last round's model on the study's prompts; the rule stopped on other prompts
    model = load_model(out / "retrieval" / "rope-round2" / "model")
    task = evaluation_task("passkey", prepare_data(corpus))
    scored = evaluate_retrieval(model, task, [128, 256], [0.5], samples=1, answer_inside=True)
    held_out = evaluate_retrieval(model, task, [128], [0.5], samples=1, seed=1, answer_inside=True)
    assert results.retrieval["rope"].cells == scored.cells
    assert results.retrieval["rope"].held_out_exact[-1] == held_out.by_length[128].exact
    lines = extra_rounds_lines({"rope": {0: results.retrieval["rope"]}})
    assert lines[2].startswith("- rope, seed 0: fine-tuned 2 steps past the budget (`until_learned`)")
    # a rerun reuses every cell, the fine-tuned folders gone
    monkeypatch.setattr("lextra.pipelines.study.run.train_or_reuse", lambda *a, **k: pytest.fail("retrained"))
    monkeypatch.setattr("lextra.pipelines.study.run.evaluate_retrieval", lambda *a, **k: pytest.fail("rescored"))
    shutil.rmtree(out / "retrieval")
    again = Study(parse_study(_study(corpus)), out, progress=False).run()
    assert again.retrieval is not None and again.retrieval["rope"].cells == scored.cells


def test_rounds_stop_once_held_out_prompts_reach_the_bar(corpus: str, tmp_path: Path) -> None:
    """The rule stops after the first round whose held-out exact match reaches the bar."""
    study = Study(parse_study(_study(corpus)), tmp_path / "out", progress=False)
    study.train_all()
    rule = UntilLearned(rounds=4, steps=1, bar=0.9)
    fine_tune = study._fine_tune_config("rope", 0, "passkey", STUDY["retrieval"])
    scores = iter([0.5, 0.92, 1.0])
    folder, seen = study._extra_rounds(rule, "rope", 0, fine_tune, {}, lambda model: next(scores))
    assert seen == [0.5, 0.92] and folder == tmp_path / "out" / "retrieval" / "rope-round2" / "model"
    assert not (tmp_path / "out" / "retrieval" / "rope-round3").exists()
