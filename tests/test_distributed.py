"""torchrun (DDP, gloo on CPU) matches one process; a run killed with SIGKILL resumes to identical weights."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_study import STRETCH, _corpus

# Each test starts training processes (torchrun and SIGKILL): seconds apiece on 2 cores.
pytestmark = pytest.mark.slow

TINY = [
    "--n-layer",
    "2",
    "--d-model",
    "32",
    "--n-head",
    "2",
    "--train-len",
    "32",
    "--limit-chars",
    "400000",
    "--batch-size",
    "4",
    "--warmup",
    "2",
    "--threads",
    "1",
    "--scheme",
    "kerple_log",
    "--device",
    "cpu",
]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _command(out: Path, processes: int, *extra: str) -> list[str]:
    launcher = [sys.executable, "-m", "lextra"]
    if processes > 1:
        launcher = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={processes}",
            "-m",
            "lextra",
        ]
    return [*launcher, "train", "--out", str(out), *TINY, *extra]


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "model" / "model.safetensors"))


def _losses(run: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def _side_by_side(
    run: Callable[[int], subprocess.CompletedProcess],
) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """`run(1)` and `run(2)` (one process, then two under torchrun) at the same time: their start-ups overlap."""
    with ThreadPoolExecutor(2) as pool:
        one, two = pool.submit(run, 1), pool.submit(run, 2)
        return one.result(), two.result()


def test_two_processes_match_one_process_with_the_same_global_batch(tmp_path) -> None:
    steps = ["--steps", "8", "--checkpoint-every", "4"]
    _side_by_side(
        lambda processes: subprocess.run(
            _command(tmp_path / ("one", "two")[processes - 1], processes, *steps),
            check=True,
            env=ENV,
            capture_output=True,
            timeout=300,
        )
    )
    one, two = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    assert one.keys() == two.keys()
    for name in one:
        torch.testing.assert_close(two[name], one[name], atol=1e-5, rtol=1e-4, msg=name)
    assert _losses(tmp_path / "two") == pytest.approx(_losses(tmp_path / "one"), rel=1e-5)


def _wait_for_checkpoint(run: Path, step: int, process: subprocess.Popen, timeout: float = 240) -> None:
    latest = run / "checkpoints" / "LATEST"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if latest.exists() and int(latest.read_text().strip().split("_")[-1]) >= step:
            return
        if process.poll() is not None:
            raise AssertionError(f"training ended early: {process.stderr.read().decode()[-2000:]}")
        time.sleep(0.01)
    raise AssertionError("no checkpoint appeared in time")


@pytest.mark.parametrize("processes", [1, 2])
def test_sigkill_at_a_random_step_then_resume_gives_identical_weights(tmp_path, processes: int) -> None:
    steps = ["--steps", "48", "--checkpoint-every", "3"]
    subprocess.run(
        _command(tmp_path / "whole", processes, *steps), check=True, env=ENV, capture_output=True, timeout=300
    )
    run = tmp_path / "killed"
    victim = subprocess.Popen(
        _command(run, processes, *steps),
        env=ENV,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    _wait_for_checkpoint(run, random.Random(processes).choice([3, 6, 9, 12]), victim)
    time.sleep(random.Random(processes + 10).uniform(0.0, 0.05))  # somewhere between two checkpoints
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait(timeout=60)
    assert not (run / "model").exists()  # it really died before the end
    subprocess.run(_command(run, processes, *steps, "--resume"), check=True, env=ENV, capture_output=True, timeout=300)
    whole, resumed = _weights(tmp_path / "whole"), _weights(run)
    for name in whole:
        assert torch.equal(whole[name], resumed[name]), name
    logged = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert logged == [10, 20, 30, 40, 48]  # every 10 steps and the last: nothing lost, nothing repeated


def _compare(out: Path, processes: int) -> subprocess.CompletedProcess:
    tiny = [a for a in TINY if a not in ("--scheme", "kerple_log")]
    command = _command(out, processes)
    command[command.index("train")] = "compare"
    command = command[: command.index("--out") + 2] + tiny
    command += ["--schemes", "nope,rope,rope+bca", "--steps", "4", "--lengths", "32,64", "--documents", "1", "--quiet"]
    return subprocess.run(command, check=True, env=ENV, capture_output=True, text=True, timeout=300)


def test_compare_under_torchrun_shares_the_evaluations_out_and_equals_one_process(tmp_path) -> None:
    """Two processes train each model together, evaluate each variant once between them (not once each), and
    write the summary of one process; the first process alone prints the tables."""
    one, two = _side_by_side(lambda processes: _compare(tmp_path / ("one", "two")[processes - 1], processes))
    evaluated = sorted(re.findall(r"lextra compare: evaluating (\S+)$", two.stderr, flags=re.MULTILINE))
    assert evaluated == ["nope", "rope", "rope+bca"]
    assert two.stdout.count("plot: ") == 1 and one.stdout.count("plot: ") == 1
    first = json.loads((tmp_path / "one" / "summary.json").read_text())
    second = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert list(second["variants"]) == list(first["variants"]) == ["nope", "rope", "rope+bca"]
    for label, result in first["variants"].items():
        for protocol, row in result["results"].items():
            for length, cell in row.items():
                theirs = second["variants"][label]["results"][protocol][length]
                assert theirs["tokens"] == cell["tokens"]
                assert theirs["nll"] == pytest.approx(cell["nll"], rel=1e-5), (label, protocol, length)


def test_a_status_line_is_one_write_so_processes_sharing_stderr_never_split_it(capsys, monkeypatch) -> None:
    """print() writes the message and its newline apart: two ranks on one pipe could run their lines together."""
    from lextra.pipelines.log import log

    writes: list[str] = []
    monkeypatch.setattr(sys.stderr, "write", writes.append)
    log("compare", "evaluating rope+bca")
    assert writes == ["lextra compare: evaluating rope+bca\n"]


def _study(config: Path, out: Path, processes: int) -> subprocess.CompletedProcess:
    command = _command(out, processes)
    command = [*command[: command.index("train")], "study", str(config), "--out", str(out)]
    command += ["--quiet", "--threads", "1", "--device", "cpu"]
    return subprocess.run(command, check=True, env=ENV, capture_output=True, text=True, timeout=300)


def test_a_study_under_torchrun_computes_each_cell_once_and_equals_one_process(tmp_path) -> None:
    """Two processes train each model together, then share out the other cells (each computed by one of them) and
    the first process alone writes the report; every number equals a one-process study's."""
    config = tmp_path / "study.toml"
    sections = '[analysis]\ndocuments = 1\n[window_sweep]\nmodels = ["rope", "alibi"]\nwidths = [8, 16]\n'
    config.write_text(STRETCH.format(corpus=_corpus(tmp_path), methods='["none"]') + sections)
    one, two = _side_by_side(lambda processes: _study(config, tmp_path / ("one", "two")[processes - 1], processes))
    computed = sorted(re.findall(r"lextra study: (\S+): (\S+)$", two.stderr, flags=re.MULTILINE))
    expected = sorted(re.findall(r"lextra study: (\S+): (\S+)$", one.stderr, flags=re.MULTILINE))
    assert {section for section, _ in expected} == {"training", "perplexity", "analysis", "window", "stretch"}
    trained = [cell for cell in expected if cell[0] == "training"]
    assert sorted(computed) == sorted(expected + trained)  # training is every process's, every other cell one's
    assert two.stdout.count("## Perplexity") == 1 == one.stdout.count("## Perplexity")
    first = json.loads((tmp_path / "one" / "study.json").read_text())
    second = json.loads((tmp_path / "two" / "study.json").read_text())
    for mask, models in first["perplexity"].items():
        for label, seeds in models.items():
            for protocol, row in seeds["0"]["results"].items():
                for length, cell in row.items():
                    theirs = second["perplexity"][mask][label]["0"]["results"][protocol][length]
                    assert theirs["tokens"] == cell["tokens"]
                    assert theirs["nll"] == pytest.approx(cell["nll"], rel=1e-5), (mask, label, protocol, length)
    for label, sweep in first["window_sweep"].items():  # ppl by width, and the ERF
        assert second["window_sweep"][label] == pytest.approx(sweep, rel=1e-5)
    for label, analysis in first["analysis"].items():
        assert second["analysis"][label]["receptive_field"] == pytest.approx(analysis["receptive_field"], rel=1e-4)
    for method, row in first["stretch"].items():
        assert second["stretch"][method] == pytest.approx(row, rel=1e-5)


UNTIL_LEARNED = (
    STRETCH[: STRETCH.index("[[models]]")].replace("train_len = 64", "train_len = 128")
    + """
[[models]]
label = "rope"
scheme = "rope"
[retrieval]
task = "passkey"
variants = ["rope"]
steps = 2
samples = 1
depths = [0.5]
answer_inside = true
until_learned = {{ rounds = 2, steps = 1 }}
"""
)  # one variant: one process scores its cell, so rounds trained inside it would wait on the other forever


def test_until_learned_rounds_under_torchrun_train_together_and_equal_one_process(tmp_path) -> None:
    """The rounds past the budget are trained by every process together before the cells are shared out (a
    collective inside one process's cell would hang), and each round's cell is one process's, equal to one process's
    study."""
    config = tmp_path / "study.toml"
    config.write_text(UNTIL_LEARNED.format(corpus=_corpus(tmp_path)))
    _, two = _side_by_side(lambda processes: _study(config, tmp_path / ("one", "two")[processes - 1], processes))
    computed = re.findall(r"lextra study: (\S+): (\S+)$", two.stderr, flags=re.MULTILINE)
    rounds = sorted(name for section, name in computed if section == "training" and "-round" in name)
    assert rounds == ["rope-passkey-round1"] * 2 + ["rope-passkey-round2"] * 2  # both processes train each round
    scored = sorted(name for section, name in computed if section == "retrieval" and name.endswith("-until-learned"))
    assert scored == ["rope-until-learned"]  # one process's
    first = json.loads((tmp_path / "one" / "study.json").read_text())["retrieval"]
    second = json.loads((tmp_path / "two" / "study.json").read_text())["retrieval"]
    for variant in ("rope",):
        assert first[variant]["extra_steps"] == second[variant]["extra_steps"] == 2
        assert second[variant]["held_out_exact"] == first[variant]["held_out_exact"]
        for length, row in first[variant]["cells"].items():
            for depth, cell in row.items():
                theirs = second[variant]["cells"][length][depth]
                assert theirs["mean_rank"] == pytest.approx(cell["mean_rank"], rel=1e-5), (variant, length, depth)


def test_retrieval_compare_under_torchrun_evaluates_each_variant_once_and_equals_one_process(tmp_path) -> None:
    def compare(out: Path, processes: int) -> subprocess.CompletedProcess:
        command = _command(out, processes)
        command = [*command[: command.index("train")], "retrieval", "compare", "--task", "passkey", "--out", str(out)]
        command += ["--schemes", "rope,rope+dynamic,alibi", "--lengths", "112,224", "--depths", "0,1", "--samples", "2"]
        tiny = TINY[: TINY.index("--scheme")] + TINY[TINY.index("--scheme") + 2 :]
        tiny[tiny.index("--train-len") + 1] = "112"
        tiny[tiny.index("--limit-chars") + 1] = "1000000"  # a validation split long enough for the prompts
        command += [*tiny, "--steps", "3", "--quiet"]
        return subprocess.run(command, check=True, env=ENV, capture_output=True, text=True, timeout=300)

    one, two = _side_by_side(lambda processes: compare(tmp_path / ("one", "two")[processes - 1], processes))
    evaluated = sorted(re.findall(r"lextra retrieval: evaluating (\S+)$", two.stderr, flags=re.MULTILINE))
    assert evaluated == ["alibi", "rope", "rope+dynamic"]
    assert two.stdout.count("results: ") == one.stdout.count("results: ") == 1
    first = json.loads((tmp_path / "one" / "summary.json").read_text())
    second = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert sorted(second["variants"]) == sorted(first["variants"]) == ["alibi", "rope", "rope+dynamic"]
    for label, result in first["variants"].items():
        theirs = second["variants"][label]
        for length, row in result["cells"].items():
            for depth, cell in row.items():
                assert theirs["cells"][length][depth]["samples"] == cell["samples"]
                assert theirs["cells"][length][depth]["mean_rank"] == pytest.approx(cell["mean_rank"], rel=1e-6)


def test_ruler_under_torchrun_shares_the_cells_out_and_equals_one_process(tmp_path) -> None:
    """Each process answers every other (task, length) cell; the first writes the outputs; the answers and the
    scores equal one process's (batch size 1: every sample decoded alone in both runs)."""
    from test_ruler import tiny_gpt

    from lextra.model import save_model

    save_model(tiny_gpt(), tmp_path / "model", extra={"tokenizer": {"kind": "bytes"}})

    def ruler(out: Path, processes: int) -> subprocess.CompletedProcess:
        command = _command(out, processes)
        command = [*command[: command.index("train")], "ruler", "run", str(tmp_path / "model"), "--out", str(out)]
        command += ["--tasks", "niah_single_1;vt;fwe", "--lengths", "1700,1900", "--samples", "2", "--batch-size", "1"]
        command += ["--threshold", "0", "--quiet", "--threads", "1", "--device", "cpu"]
        return subprocess.run(command, check=True, env=ENV, capture_output=True, text=True, timeout=300)

    one, two = _side_by_side(lambda processes: ruler(tmp_path / ("one", "two")[processes - 1], processes))
    shares = re.findall(r"lextra ruler: process (\d) of 2: (\d+) of (\d+) cells$", two.stderr, flags=re.MULTILINE)
    assert sorted(shares) == [("0", "3", "6"), ("1", "3", "6")]
    assert two.stdout.count("effective length: ") == one.stdout.count("effective length: ") == 1
    first = json.loads((tmp_path / "one" / "results.json").read_text())
    second = json.loads((tmp_path / "two" / "results.json").read_text())
    for task, row in first["cells"].items():
        for length, cell in row.items():
            theirs = second["cells"][task][length]
            assert (theirs["score"], theirs["samples"]) == (cell["score"], cell["samples"]), (task, length)
            mine = json.loads((tmp_path / "one" / "cells" / f"{task}-{length}.json").read_text())["answers"]
            other = json.loads((tmp_path / "two" / "cells" / f"{task}-{length}.json").read_text())["answers"]
            assert [(a["index"], a["output"]) for a in other] == [(a["index"], a["output"]) for a in mine]
