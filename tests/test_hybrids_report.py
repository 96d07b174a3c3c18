"""experiments/hybrids_report.py: the passkey table (learned at L_tr, per seed, means with clipped intervals) and the
verdict of issue 43 (perplexity within 1.05x and >= 90% exact at 16x, only for models learned at L_tr)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from conftest import load_script

SCRIPT = Path(__file__).parents[1] / "experiments" / "hybrids_report.py"
LENGTHS = [128, 512, 2048]
SEEDS = [0, 1, 2]


def write(folder: Path, section: str, name: str, result: dict) -> None:
    path = folder / "cells" / section / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"key": {}, "result": result}))


def passkey(exact: list[float], rank1: list[float]) -> dict:
    """A retrieval cell: at each length two depths of 5 prompts, both with the given rates."""
    cells = {str(n): {d: {"exact": e, "rank1": r, "samples": 5} for d in ("0.0", "1.0")}
             for n, e, r in zip(LENGTHS, exact, rank1, strict=True)}  # fmt: skip
    return {"lengths": LENGTHS, "cells": cells}


def perplexity(first: float, last: float) -> dict:
    return {"results": {"chunks": {"128": {"ppl": first}, "2048": {"ppl": last}}}}


def study(tmp_path: Path) -> Path:
    # flat: learned, flat perplexity, 16x 1.0 / 0.8 / 1.0; unlearned: seed 1 at 0.6 at L_tr; rising: 1.2x perplexity
    runs = {
        "flat": ([1.0, 1.0, 1.0], [1.0, 0.8, 1.0], 1.0),
        "unlearned": ([1.0, 0.6, 1.0], [1.0, 1.0, 1.0], 1.0),
        "rising": ([1.0, 1.0, 1.0], [0.0, 0.0, 0.2], 1.2),
    }
    for label, (inside, far, ratio) in runs.items():
        for seed in SEEDS:
            write(tmp_path, "retrieval", f"{label}-seed{seed}", passkey([inside[seed], 0.5, far[seed]], [1, 1, 1]))
            write(tmp_path, "perplexity", f"{label}-causal-seed{seed}", perplexity(10.0, 10.0 * ratio))
    return tmp_path


def test_passkey_table_marks_the_models_not_learned_and_clips_intervals(tmp_path) -> None:
    report = load_script(SCRIPT, "hybrids_report")
    table = report.passkey_table(study(tmp_path), ["flat", "unlearned", "rising", "absent"], 128, SEEDS)
    rows = {line.split(" | ")[0][2:]: line for line in table.splitlines()[2:]}
    assert set(rows) == {"flat", "unlearned", "rising"}  # a model without cells has no row
    assert "| yes, every seed |" in rows["flat"]
    assert "**no** (learned on 2 of 3 seeds)" in rows["unlearned"]
    assert "1.00, 1.00, 1.00 / 0.50, 0.50, 0.50 / 1.00, 0.80, 1.00" in rows["flat"]
    assert "50 ± 0%; 93 (65-100)%" in rows["flat"]  # 93.3 ± 28.7 reaches past 100%: written clipped


def test_verdict_needs_the_task_learned_and_both_bars(tmp_path) -> None:
    report = load_script(SCRIPT, "hybrids_report")
    config = SimpleNamespace(seeds=SEEDS, lengths=[128, 2048])
    lines = report.verdict(study(tmp_path), ["flat", "unlearned", "rising", "absent"], config).splitlines()
    assert lines[0].startswith("- flat: ppl ratio 1.00")
    assert lines[0].endswith("keeps both (on the means; an interval spans the bar)")
    assert lines[1] == "- unlearned: not learned at L_tr (exact per seed 1.00, 0.60, 1.00)"
    assert lines[2].endswith("does not keep both (decided by the intervals)")
    assert lines[3] == "- absent: 0 of 3 seeds finished; no verdict yet"


def test_a_model_with_seeds_still_running_says_so(tmp_path) -> None:
    report = load_script(SCRIPT, "hybrids_report")
    write(tmp_path, "retrieval", "part-seed0", passkey([1.0, 0.5, 0.5], [1, 1, 1]))
    row = report.passkey_table(tmp_path, ["part"], 128, SEEDS).splitlines()[2]
    assert "| yes, every seed so far (1 of 3 seeds finished) | 1.00 / 0.50 / 0.50 | 50%; 50% |" in row


def test_a_seed_fine_tuned_past_the_budget_replaces_its_cell_and_is_named(tmp_path) -> None:
    """A study's `until_learned` cell (`LABEL-seedS-until-learned`) stands for that seed, and the row says how many
    steps it took past the budget."""
    report = load_script(SCRIPT, "hybrids_report")
    study(tmp_path)
    write(tmp_path, "retrieval", "unlearned-seed1-until-learned",
          {**passkey([1.0, 0.5, 1.0], [1, 1, 1]), "extra_steps": 1500})  # fmt: skip
    row = report.passkey_table(tmp_path, ["unlearned"], 128, SEEDS).splitlines()[2]
    assert "| yes, every seed (seed 1 +1,500 steps: `until_learned`) | 1.00, 1.00, 1.00 /" in row
    config = SimpleNamespace(seeds=SEEDS, lengths=[128, 2048])
    assert report.verdict(tmp_path, ["unlearned"], config).startswith("- unlearned: ppl ratio 1.00")
