"""experiments/ruoss_gain.py: the randomized-minus-plain gain beyond the training range, per seed, over all pairs
and over the pairs that master the training range."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import load_script

SCRIPT = Path(__file__).parents[1] / "experiments" / "ruoss_gain.py"


def test_gains_pair_each_encoding_with_its_randomized_variant_per_seed(tmp_path) -> None:
    # (task, model, seed) -> (inside, beyond at two lengths); t2's plain rope is not learned (0.5 inside)
    cells = {
        ("t1", "rope", 0): (1.0, (0.5, 0.7)), ("t1", "rope-rand", 0): (1.0, (0.8, 0.8)),
        ("t1", "rope", 1): (1.0, (0.4, 0.6)), ("t1", "rope-rand", 1): (0.96, (0.9, 0.9)),
        ("t2", "rope", 0): (0.5, (0.5, 0.5)), ("t2", "rope-rand", 0): (1.0, (0.5, 0.5)),
        ("t2", "rope", 1): (1.0, (0.5, 0.5)), ("t2", "rope-rand", 1): (1.0, (0.7, 0.7)),
    }  # fmt: skip
    lines = ["task,model,seed,length,part,score,per_token,exact,samples"]
    for (task, model, seed), (inside, beyond) in cells.items():
        lines.append(f"{task},{model},{seed},3,inside,{inside},{inside},0,8")
        lines += [f"{task},{model},{seed},{9 + i},beyond,{b},{b},0,8" for i, b in enumerate(beyond)]
    (tmp_path / "results.csv").write_text("\n".join(lines) + "\n")
    gains = load_script(SCRIPT, "ruoss_gain").gains(tmp_path, threshold=0.95)
    # seed 0: t1 0.8 - 0.6 = 0.2, t2 0; seed 1: t1 0.9 - 0.5 = 0.4, t2 0.2
    assert gains["all pairs"]["0"] == pytest.approx([0.2, 0.0])
    assert gains["all pairs"]["1"] == pytest.approx([0.4, 0.2])
    assert gains["learned pairs"]["0"] == pytest.approx([0.2])  # t2 left out: plain rope not learned on seed 0
    assert gains["learned pairs"]["1"] == pytest.approx([0.4])
