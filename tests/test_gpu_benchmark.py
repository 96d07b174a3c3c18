"""benchmarks/gpu.py runs end to end (on CPU with --smoke): its correctness pass compares against the reference,
and every attention and training cell is measured and reported."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCHMARK = Path(__file__).parents[1] / "benchmarks" / "gpu.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_benchmark", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gpu_benchmark_runs_on_cpu_in_smoke_mode(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    code = _load().main(["--device", "cpu", "--smoke", "--schemes", "nope,alibi,fire", "--out", str(out)])
    data = json.loads(out.read_text())
    assert code == 0
    assert {(c["scheme"], c["mask"]) for c in data["checks"]} == {
        (s, m) for s in ("nope", "alibi", "fire") for m in ("causal", "window", "bca")
    }
    assert all(c["ok"] and c["forward_err"] < 1e-4 and c["grad_err"] < 1e-3 for c in data["checks"])
    cells = [c for c in data["attention"] if c["kind"] == "scheme"]
    assert len(cells) == 3 * 3 * 2 and all(c["fwd_ms"] > 0 and c["fwdbwd_ms"] > 0 for c in cells)
    assert {c["length"] for c in data["attention"] if c["kind"] == "sdpa"} == {256, 512}
    assert [c["scheme"] for c in data["training"]] == ["nope", "alibi", "fire"]
    report = out.with_suffix(".md").read_text()
    assert "## Correctness" in report and "## Training at L_tr = 128" in report


def test_the_gpu_benchmark_refuses_cpu_without_smoke(capsys) -> None:
    assert _load().main(["--device", "cpu"]) == 2
    assert "only --smoke" in capsys.readouterr().out
