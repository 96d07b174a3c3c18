"""benchmarks/gpu.py runs end to end (on CPU with --smoke): its correctness pass compares against the reference,
and every attention and training cell is measured and reported."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import load_script

BENCHMARK = Path(__file__).parents[1] / "benchmarks" / "gpu.py"


def _load():
    return load_script(BENCHMARK, "gpu_benchmark")


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


def test_cells_are_labelled_with_the_path_the_benchmarks_device_takes() -> None:
    """The labels name what runs on the benchmark's device: on CUDA flex for a bias or a window, where the CPU would
    take a chunked path; SDPA for rotary causal attention on both (the CPU tiles it without autograd)."""
    bench = _load()
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    alibi, rope = bench.build("alibi", 1024, cpu), bench.build("rope", 1024, cpu)
    assert bench.cell_path(alibi, "window:1024", 4096, cuda, torch.bfloat16, grad=False) == "flex"
    assert bench.cell_path(alibi, "window:1024", 4096, cpu, torch.bfloat16, grad=False) == "chunked/strided"
    assert bench.cell_path(rope, "causal", 4096, cuda, torch.bfloat16, grad=False) == "sdpa"
    assert bench.cell_path(rope, "causal", 4096, cpu, torch.float32, grad=False) == "tiled"
    assert bench.cell_path(rope, "causal", 4096, cpu, torch.float32, grad=True) == "sdpa"
    assert bench.path_label({"path": "tiled", "path_bwd": "sdpa"}) == "tiled, bwd sdpa"
    assert bench.path_label({"path": "flex", "path_bwd": "flex"}) == "flex"


def test_the_correctness_check_is_relative_to_the_gradients_scale() -> None:
    """KERPLE's parameter gradients are ~5e4, where two correct fp32 paths differ by ~1e-2 absolute: the check
    passes them and still fails an error of 1% of the scale."""
    bench = _load()
    reference = torch.tensor([5e4, -8e4, 3.0])
    assert bench.relative_error(reference + torch.tensor([8e-3, 0.0, 0.0]), reference) < 1e-6
    assert bench.relative_error(reference + torch.tensor([0.0, 800.0, 0.0]), reference) == pytest.approx(0.01)
    tiny = torch.tensor([2.5e-5, 0.0])  # a gradient that is 0 in exact arithmetic: judged absolutely
    assert bench.relative_error(tiny + 2e-5, tiny) == pytest.approx(2e-5)
    assert math.isnan(bench.relative_error(torch.tensor([math.nan, 0.0, 0.0]), reference))


def test_the_fp32_baseline_uses_a_kernel_that_has_fp32() -> None:
    from torch.nn.attention import SDPBackend

    bench = _load()
    assert bench.baseline_kernels(torch.bfloat16) == [SDPBackend.FLASH_ATTENTION]
    assert bench.baseline_kernels(torch.float16) == [SDPBackend.FLASH_ATTENTION]
    assert bench.baseline_kernels(torch.float32) == [SDPBackend.EFFICIENT_ATTENTION]


def test_a_failing_baseline_is_reported_and_the_cells_are_still_measured(tmp_path: Path, monkeypatch) -> None:
    bench = _load()

    def no_kernel(q, k, v):
        raise RuntimeError("No available kernel. Aborting execution.")

    monkeypatch.setattr(bench, "flash", no_kernel)
    out = tmp_path / "gpu.json"
    code = bench.main(["--device", "cpu", "--smoke", "--schemes", "alibi", "--masks", "causal", "--out", str(out)])
    data = json.loads(out.read_text())
    assert code == 0
    baselines = [c for c in data["attention"] if c["kind"] == "sdpa"]
    assert len(baselines) == 2 and all("No available kernel" in c["error"] for c in baselines)
    cells = [c for c in data["attention"] if c["kind"] == "scheme"]
    assert len(cells) == 2 and all(c["fwd_ms"] > 0 and "error" not in c for c in cells)
    report = out.with_suffix(".md").read_text()
    assert "baseline failed: RuntimeError: No available kernel" in report and "| alibi | - / - / - (" in report


def test_long_lengths_measure_only_the_long_schemes(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    argv = ["--device", "cpu", "--smoke", "--schemes", "nope,alibi", "--masks", "causal", "--out", str(out)]
    assert _load().main([*argv, "--long-lengths", "640", "--long-schemes", "alibi,fire"]) == 0
    cells = json.loads(out.read_text())["attention"]
    by_length = {
        L: sorted(c["scheme"] for c in cells if c["kind"] == "scheme" and c["length"] == L) for L in (256, 640)
    }
    assert by_length == {256: ["alibi", "nope"], 640: ["alibi"]}  # fire was not asked for in --schemes
    assert [c["length"] for c in cells if c["kind"] == "sdpa"] == [256, 512, 640]


def test_the_sized_run_is_every_scheme_at_4k_to_64k_and_a_subset_at_128k() -> None:
    bench = _load()
    args = bench.parse_args(["--sized"])
    assert (args.lengths, args.long_lengths, args.train_lengths) == ("4096,16384,65536", "131072", "1024")
    assert set(args.long_schemes.split(",")) == set(bench.SIZED_LONG) and args.schemes == "all"


def test_gpu_check_stops_at_once_where_torch_sees_no_gpu(tmp_path: Path) -> None:
    script = Path(__file__).parents[1] / "benchmarks" / "gpu_check.sh"
    env = {**os.environ, "PY": sys.executable, "GPU_CHECK_OUT": str(tmp_path)}
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "gpu-check: torch sees no CUDA device" in done.stderr
    assert not list(tmp_path.iterdir())  # nothing ran, nothing was written


def _load_hybrids():
    return load_script(BENCHMARK.parent / "hybrids.py", "hybrids_benchmark")


def test_the_pieces_benchmark_times_forward_and_backward_of_every_piece(tmp_path: Path, monkeypatch) -> None:
    """`make gpu-check`'s second step, run on the CPU at a toy length: every piece is timed against SDPA, with
    `--backward` each call's backward runs (gradients reach q), and the record says what was measured."""
    bench = _load_hybrids()
    backwards = []
    plain = bench.with_backward

    def counted(call):
        both = plain(call)

        def run():
            out = both()
            backwards.append(out.grad_fn is not None)
            return out

        return run

    monkeypatch.setattr(bench, "with_backward", counted)
    out = tmp_path / "hybrids.json"
    bench.main(["--length", "96", "--chunk", "32", "--repeats", "1", "--n-layer", "2", "--backward", "--out", str(out)])
    record = json.loads(out.read_text())
    pieces = {"chunk:32", "sinks", "rope+sinks", "softcap:50", "rope,fraction=0.25", "rope,proportional=0.75",
              "temp_tuning", "rope+qknorm", "gate", "rope+gate"}  # fmt: skip
    assert set(record["ratio_to_sdpa"]) == pieces
    assert all(math.isfinite(r) and r > 0 for r in record["ratio_to_sdpa"].values())
    assert (record["device"], record["dtype"], record["backward"]) == ("cpu", "fp32", True)
    assert backwards and all(backwards)  # every timed call, the SDPA baseline included, ran under autograd
    assert record["hybrid"]["n_layer"] == 2 and record["hybrid"]["ratio"] > 0
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):  # where torch sees no GPU, refused before anything runs
        bench.parse_args(["--device", "cuda"])
