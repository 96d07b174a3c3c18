"""benchmarks/smollm2.py's passkey cells grow: a rerun runs only the prompts a cell lacks, per depth, and keeps the
scores of the ones it holds; benchmarks/hf_decode.py checks the adapter's decoding step against Hugging Face's."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from conftest import load_script

BENCHMARK = Path(__file__).parents[1] / "benchmarks" / "smollm2.py"
DEPTHS = [0.0, 0.25, 0.5, 0.75, 1.0]


def _load():
    return load_script(BENCHMARK, "smollm2_benchmark")


def test_missing_prompts_fill_each_depths_share_around_the_prompts_a_cell_holds() -> None:
    bench = _load()
    assert bench.missing_prompts({}, 10, DEPTHS) == [(d, j) for d in DEPTHS for j in (0, 1)]
    old = {"examples": [{"depth": 0.25}, {"depth": 0.75}], "prompts": 2}
    assert bench.missing_prompts(old, 5, DEPTHS) == [(0.0, 0), (0.5, 0), (1.0, 0)]
    wanted = [(0.0, 0), (0.0, 1), (0.25, 1), (0.5, 0), (0.5, 1), (0.75, 1), (1.0, 0), (1.0, 1)]
    assert bench.missing_prompts(old, 10, DEPTHS) == wanted
    assert bench.missing_prompts(old, 2, [0.25, 0.75]) == []


def test_passkey_adds_only_the_missing_prompts_and_counts_the_old_ones(monkeypatch) -> None:
    bench = _load()
    seen: list[list[int]] = []

    def fake_score(model, prompts, answers, distractors):
        seen.append(prompts[0])
        right = len(seen) % 2 == 1  # the 1st, 3rd, ... new prompt is answered
        return {"exact": [right], "rank": [1 if right else 3], "generated": [answers[0] if right else [0]]}

    class Task:
        tokenizer = SimpleNamespace(decode=lambda ids: ",".join(map(str, ids)))

        def sample(self, length, depth, rng: random.Random):
            key = rng.randrange(10**6)
            return SimpleNamespace(
                prompt_ids=[key, int(depth * 100)], answer_ids=[key], answer_text=str(key), distractors=["1", "2"]
            )

        def encode(self, text):
            return [int(text)]

    monkeypatch.setattr(bench, "score_prompts", fake_score)
    old = {"exact": 0.5, "rank1": 1.0, "prompts": 2, "examples": [{"depth": 0.25}, {"depth": 0.75}], "ppl": 3.0}
    updates = list(bench.passkey(None, Task(), 16, 5, DEPTHS, old))
    assert [u["prompts"] for u in updates] == [3, 4, 5]
    last = updates[-1]
    assert last["exact"] == (1 + 2) / 5 and last["rank1"] == (2 + 2) / 5
    assert [e["depth"] for e in last["examples"]] == [0.25, 0.75, 0.0, 0.5, 1.0]
    assert [e["rank"] for e in last["examples"][2:]] == [1, 3, 1]
    assert len({p[0] for p in seen}) == 3 and [p[1] for p in seen] == [0, 50, 100]
    again = list(bench.passkey(None, Task(), 16, 5, DEPTHS, {**old, **last}))
    assert again == [] and len(seen) == 3


def test_the_decoding_step_benchmark_checks_the_adapter_against_hugging_face(tmp_path) -> None:
    """benchmarks/hf_decode.py at SmolLM2's widths (2 layers): it exits 0 only when lextra's step gives Hugging Face's
    logits, and reports a step time per method and length."""
    out = tmp_path / "decode.json"
    script = BENCHMARK.parent / "hf_decode.py"
    command = [sys.executable, str(script), "--lengths", "70,130", "--layers", "2", "--steps", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([*command, "--methods", "none,sinks", "--out", str(out)], capture_output=True, env=env)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    steps = json.loads(out.read_text())["ms_per_step"]
    assert set(steps) == {"Hugging Face sdpa + DynamicCache", "lextra none", "lextra sinks"}
    assert all(set(row) == {"70", "130"} and min(row.values()) > 0 for row in steps.values())
    assert "| lextra sinks |" in out.with_suffix(".md").read_text()
