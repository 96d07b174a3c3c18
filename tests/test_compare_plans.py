"""`lextra compare --layer-plan LABEL=PLAN`: layer plans trained and evaluated beside schemes, the training progress
labelled with the plan, and bad plan flags refused in one line."""

from __future__ import annotations

import json

import pytest

from lextra.cli import main

SHAPE = ["--steps", "2", "--n-layer", "2", "--d-model", "32", "--n-head", "2", "--train-len", "32", "--batch-size", "2"]
EVAL = ["--lengths", "32", "--documents", "1", "--limit-chars", "400000"]
PLAN = "2*(rope+window:8);nope"


def test_plans_are_compared_beside_schemes_and_labelled_in_training(tmp_path, capsys) -> None:
    out = tmp_path / "cmp"
    argv = ["compare", "--out", str(out), *SHAPE, *EVAL, "--schemes", "nope", "--layer-plan", f"hybrid={PLAN}"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert f"train {PLAN}" in captured.err  # the progress bar names the plan, not its first layer's scheme
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["variants"]) == {"nope", "hybrid"}
    assert summary["variants"]["hybrid"]["scheme"] == PLAN
    saved = json.loads((out / "models" / "hybrid" / "model" / "config.json").read_text())
    assert saved["model"]["layer_plan"] == PLAN
    assert json.loads((out / "models" / "nope" / "model" / "config.json").read_text())["model"]["layer_plan"] == "nope"
    assert "| hybrid |" in captured.out and "| nope |" in captured.out
    # plans alone: no --schemes compares the plans only (the default schemes are not trained), cells reused
    assert main(["compare", "--out", str(out), *SHAPE, *EVAL, "--layer-plan", f"hybrid={PLAN}"]) == 0
    assert list(json.loads((out / "summary.json").read_text())["variants"]) == ["hybrid"]
    assert "reusing" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--layer-plan", "swan,window=32"], "give LABEL=PLAN"),
        (["--layer-plan", "a b=rope"], "give LABEL=PLAN"),
        (["--layer-plan", "x=ropey"], "'ropey', not a position scheme"),
        (["--schemes", "rope+bca", "--layer-plan", "rope=nope"], "name a scheme compared too"),
        (["--schemes", "rope", "--layer-plan", "rope=nope"], "the label(s) rope name two variants"),
        (["--layer-plan", "a=rope", "--layer-plan", "a=nope"], "the label(s) a name two variants"),
    ],
)
def test_bad_layer_plan_flags_exit_2_with_one_line(tmp_path, capsys, flags: list[str], message: str) -> None:
    assert main(["compare", "--out", str(tmp_path / "c"), *SHAPE, *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "c" / "models").exists()
