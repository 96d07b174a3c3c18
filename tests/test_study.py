"""`lextra study`: config validation, a tiny end-to-end study, cached cells, and the report's contents."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from conftest import json_shape, with_intervals

from lextra.cli import main
from lextra.data.prepare import prepare_data
from lextra.errors import ConfigError
from lextra.evaluate import EvalConfig, Evaluation, PerplexityPoint, evaluate_model
from lextra.model import load_model
from lextra.pipelines.study import load_study, parse_study
from lextra.reporting.html import markdown_to_html

TINY = """
name = "tiny"
multiples = [1, 2]
protocols = ["chunks", "sliding"]
masks = ["causal", "bca"]
documents = 2
[train]
corpus = "{corpus}"
steps = 3
batch_size = 2
checkpoint_every = 0
eval_sequences = 2
[train.model]
train_len = 128
n_layer = 1
d_model = 32
n_head = 2
[[models]]
label = "rope"
scheme = "rope"
[[models]]
label = "alibi-x4"
scheme = "alibi"
options = {{ slope_shift = 2.0 }}
[analysis]
documents = 1
[window_sweep]
models = ["rope"]
widths = [16, 64]
[retrieval]
task = "passkey,ends=0.5"
variants = ["rope", "rope+dynamic"]
steps = 2
samples = 1
depths = [0.5]
[stretch]
models = ["alibi-x4"]
methods = ["none", "log-length"]
"""


def _corpus(tmp_path: Path) -> str:
    folder = tmp_path / "corpus"
    folder.mkdir()
    for i in range(24):
        (folder / f"d{i}.txt").write_text(f"document {i}: " + "lorem ipsum dolor sit amet " * (30 + i))
    return str(folder)


def test_study_config_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_study(tmp_path / "missing.toml")
    (tmp_path / "bad.toml").write_text("name = ")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_study(tmp_path / "bad.toml")
    with pytest.raises(ConfigError, match="no \\[\\[models\\]\\]"):
        parse_study({"name": "x"})
    with pytest.raises(ConfigError, match="colour"):
        parse_study({"colour": 1, "models": [{"label": "a", "scheme": "rope"}]})
    with pytest.raises(ConfigError, match="slope"):
        parse_study({"models": [{"label": "a", "scheme": "alibi", "options": {"slope": 1}}]})
    with pytest.raises(ConfigError, match="distinct"):
        parse_study({"models": [{"label": "a", "scheme": "rope"}, {"label": "a", "scheme": "alibi"}]})
    with pytest.raises(ConfigError, match="no model labelled 'xpos'"):
        parse_study({"models": [{"label": "a", "scheme": "rope"}], "stretch": {"models": ["xpos"]}})
    with pytest.raises(ConfigError, match="unknown keys"):
        parse_study({"models": [{"label": "a", "scheme": "rope"}], "retrieval": {"task": "passkey", "step": 3}})
    for task, message in [
        ("passkey,ends=2", r"ends=2.0 is a share of training rows; use a value in \[0, 1\]"),
        ("passkey,depth=1", "has no option 'depth'; its options: digits, distractors, ends"),
        ("ruler.niah", "evaluated by its own suite"),
    ]:
        with pytest.raises(ConfigError, match=message):  # on read, before any model trains
            parse_study({"models": [{"label": "a", "scheme": "rope"}], "retrieval": {"task": task}})
    shipped = load_study(Path(__file__).parents[1] / "experiments" / "study.toml")
    assert {"alibi-slopes-x4", "xpos-decay-only", "sandwich-smoothed"} <= {m.label for m in shipped.models}


def test_a_tiny_study_end_to_end_with_cached_cells(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "study.toml"
    config.write_text(TINY.format(corpus=_corpus(tmp_path)))
    out = tmp_path / "out"
    assert main(["study", str(config), "--out", str(out), "--quiet", "--threads", "1"]) == 0
    results = json.loads((out / "study.json").read_text())
    assert set(results["perplexity"]) == {"causal", "bca"}
    assert set(results["retrieval"]) == {"rope", "rope+dynamic"}
    assert set(results["stretch"]) == {"alibi-x4 + none", "alibi-x4 + log-length"}
    # a cell is the same number `lextra eval` would give for that model
    study = load_study(config)
    data = prepare_data(study.train.corpus)
    model = load_model(out / "models" / "rope" / "seed0" / "model")
    direct = evaluate_model(model, data, EvalConfig(lengths=[128, 256], protocols=["chunks", "sliding"],
                                                    mask="bca", documents=2, span=256), progress=False)  # fmt: skip
    assert results["perplexity"]["bca"]["rope"]["0"]["results"] == direct.to_dict()["results"]
    # the keys the untyped study wrote for this config (tests/data/results_v0)
    old = Path(__file__).parent / "data" / "results_v0"
    expected = with_intervals(json_shape(json.loads((old / "study.json").read_text())))
    for row in expected["window_sweep"].values():  # and the intervals of the window sweep and the stretch
        row["intervals"] = {"#": ["float"]}
    expected["stretch_intervals"] = {row: {"#": ["float"]} for row in expected["stretch"]}
    assert json_shape(results) == expected
    for cell, kind in [("perplexity/rope-bca-seed0", "perplexity"), ("analysis/rope", "analysis"),
                       ("retrieval/rope_dynamic", "retrieval"), ("window/rope-w16", "window"),
                       ("stretch/alibi-x4-log-length-256", "stretch")]:  # fmt: skip
        new_shape = json_shape(json.loads((out / "cells" / f"{cell}.json").read_text()))
        assert new_shape == with_intervals(json_shape(json.loads((old / "study_cells" / f"{kind}.json").read_text())))
    # the alibi model really has the shifted slopes
    alibi = load_model(out / "models" / "alibi-x4" / "seed0" / "model")
    assert alibi.config.plan()[0].scheme_options == {"slope_shift": 2.0}
    report = (out / "report.md").read_text()
    for heading in ("## Perplexity", "## Why", "## Windowed attention", "## Passkey retrieval", "## Inference-time"):
        assert heading in report
    assert "**Paper**" in report and "Agrees" in report
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") >= 4 and "<table>" in page
    # a rerun computes nothing: every cell is reused, the retrieval cells without their fine-tuned folders (a
    # study's cells committed and resumed on another machine)
    shutil.rmtree(out / "retrieval")
    monkeypatch.setattr("lextra.pipelines.study.run.evaluate_model", lambda *a, **k: pytest.fail("recomputed a cell"))
    monkeypatch.setattr("lextra.pipelines.study.run.train_or_reuse", lambda *a, **k: pytest.fail("retrained a model"))
    assert main(["study", str(config), "--out", str(out), "--quiet", "--threads", "1"]) == 0


def test_jobs_train_a_studys_models_in_workers_as_one_process_would(tmp_path: Path) -> None:
    import torch

    from lextra.io import sha256_file
    from lextra.model import WEIGHTS_FILE
    from lextra.pipelines.study import Study

    config = tmp_path / "study.toml"
    config.write_text(TINY.format(corpus=_corpus(tmp_path)))
    study = load_study(config)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the workers' one thread, so both ways run the same kernels
    try:
        here = Study(study, tmp_path / "one", progress=False, device="cpu")
        here.train_all()
        workers = Study(study, tmp_path / "two", progress=False, device="cpu", jobs=2)
        workers.train_all()
    finally:
        torch.set_num_threads(threads)
    assert set(workers.models) == {("rope", 0), ("alibi-x4", 0)}
    for key, folder in workers.models.items():
        assert folder.is_relative_to(tmp_path / "two")
        assert (tmp_path / "two" / "cells" / "training" / f"{key[0]}-seed{key[1]}.json").exists()
        assert sha256_file(folder / WEIGHTS_FILE) == sha256_file(here.models[key] / WEIGHTS_FILE)


def test_workers_take_the_next_cell_when_free_and_each_lands_here_as_it_finishes() -> None:
    import time

    from lextra.pipelines.study.workers import run_cells

    landed: list[float] = []  # filled in this process: a worker's append would be lost with the worker
    run_cells([0.0, 5.0, 0.001], str, time.sleep, time.sleep, jobs=2, landed=landed.append)
    # the third cell waits for the first worker, not for the slow second cell, and lands before it
    assert landed == [0.0, 0.001, 5.0]
    serial: list[float] = []
    run_cells([0.002, 0.0], str, time.sleep, time.sleep, landed=serial.append)
    assert serial == [0.002, 0.0]


def test_a_failed_worker_cell_is_named_not_landed_and_returned(capfd) -> None:
    import time

    from lextra.pipelines.study.workers import run_cells

    landed: list[float] = []
    failed = run_cells([0.0, -1.0, 0.001], str, time.sleep, time.sleep, jobs=2, landed=landed.append)
    assert failed == [-1.0] and sorted(landed) == [0.0, 0.001]
    err = capfd.readouterr().err
    assert "cell -1.0 failed: sleep length must be non-negative" in err  # the worker's own line
    assert re.search(r"cell \d/3 failed \(-1\.0\)", err) and "1 of 3 cells failed" in err


_ORPHAN_SCRIPT = """
import sys, time
from pathlib import Path
from lextra.pipelines.study.workers import run_cells

def park(folder):
    import os
    (Path(folder) / str(os.getpid())).write_text("")
    time.sleep(120)

if __name__ == "__main__":
    run_cells([sys.argv[1]] * 2, str, park, park, jobs=2)
"""


def _running(pid: int) -> bool:
    """Whether `pid` runs (a zombie, ended but not yet reaped, does not)."""
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_killing_a_study_ends_its_workers(tmp_path: Path) -> None:
    """Linux (PR_SET_PDEATHSIG, /proc), as every machine the suite runs on."""
    import signal
    import subprocess
    import time

    script = tmp_path / "study.py"
    script.write_text(_ORPHAN_SCRIPT)
    pids = tmp_path / "pids"
    pids.mkdir()
    study = subprocess.Popen([sys.executable, str(script), str(pids)], cwd=tmp_path)
    deadline = time.time() + 120
    while len(list(pids.iterdir())) < 2 and time.time() < deadline:
        time.sleep(0.1)
    workers = [int(p.name) for p in pids.iterdir()]
    assert len(workers) == 2 and all(_running(pid) for pid in workers)
    study.send_signal(signal.SIGKILL)  # the hardest end: nothing of the study's own runs
    study.wait()
    while any(_running(pid) for pid in workers) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(_running(pid) for pid in workers)


def test_markdown_to_html_tables_lists_and_missing_plots(tmp_path: Path) -> None:
    page = markdown_to_html(
        "# T\n\n| a | b |\n|---|---:|\n| x | 1 |\n\n- one\n- `two`\n\n![p](nope.png)\n", tmp_path, "t"
    )
    assert "<h1>T</h1>" in page and "<td>x</td><td>1</td>" in page and "<li><code>two</code></li>" in page
    assert "[missing plot nope.png]" in page


def test_several_seeds_are_reported_as_mean_and_t_interval(tmp_path: Path) -> None:
    from lextra.reporting.study import perplexity_section

    def evaluation(ppl_at_128: float) -> Evaluation:
        points = {128: PerplexityPoint(ppl_at_128, 0.0, 1), 256: PerplexityPoint(2 * ppl_at_128, 0.0, 1)}
        return Evaluation({"sliding": points}, [128, 256], 128, {}, 1, False, {})

    results = {"causal": {"rope": {0: evaluation(6.0), 1: evaluation(8.0)}}}
    text = "\n".join(perplexity_section(results, [128, 256], 128, tmp_path, ["sliding"]))
    # two seeds 6 and 8: mean 7, sd sqrt(2), half-width t(0.975, 1) x sd / sqrt(2) = 12.706
    assert "| rope | 7.00 ± 12.71 | 14.00 ± 25.41 |" in text
    assert "mean over seeds ± the half-width of its 95% t-interval (2 seeds)" in text
    assert "rope (rises steeply: x2.00" in text  # the growth of the mean curve, against the paper's


def test_a_non_finite_model_option_is_refused_when_the_study_loads(tmp_path: Path) -> None:
    text = TINY.format(corpus=_corpus(tmp_path)).replace("slope_shift = 2.0", "slope_shift = nan")
    assert "slope_shift = nan" in text
    config = tmp_path / "study.toml"
    config.write_text(text)
    with pytest.raises(ConfigError, match="slope_shift"):
        load_study(config)


def test_the_paper_scale_config_runs_end_to_end_at_toy_size(tmp_path: Path) -> None:
    """experiments/paper-scale.toml as it is, shrunk only in size (model, steps, corpus, documents)."""
    import tomllib

    from lextra.pipelines.study import Study

    data = tomllib.loads((Path(__file__).parents[1] / "experiments" / "paper-scale.toml").read_text())
    full = parse_study(data)
    assert full.train.model.train_len == 1024 and full.train.corpus == "english+python-code"
    assert full.lengths == [1024, 2048, 4096, 8192] and set(full.masks) == {"causal", "bca"}
    data["train"].update(steps=2, batch_size=2, warmup=1, checkpoint_every=0, limit_chars=300_000, tokenizer="bpe:300")
    data["train"]["model"].update(train_len=16, n_layer=1, d_model=32, n_head=2)
    data.update(documents=1, analysis={"documents": 1})
    study = parse_study(data)
    results = Study(study, tmp_path / "out", progress=False).run()
    assert {m.label for m in study.models} == {"sinusoidal", "alibi", "rope", "xpos"}
    for mask in ("causal", "bca"):
        for label in ("sinusoidal", "alibi", "rope", "xpos"):
            evaluation = results.perplexity[mask][label][0]
            assert evaluation.lengths == [16, 32, 64, 128]
            assert all(evaluation.ppl(p, n) > 1 for p in ("chunks", "sliding") for n in evaluation.lengths)
    assert set(results.analysis) == {"sinusoidal", "alibi", "rope", "xpos"}


STRETCH = """
name = "stretch"
multiples = [1, 2]
protocols = ["chunks"]
masks = ["causal"]
documents = 1
[train]
corpus = "{corpus}"
steps = 2
batch_size = 2
checkpoint_every = 0
eval_sequences = 2
[train.model]
train_len = 64
n_layer = 1
d_model = 32
n_head = 2
[[models]]
label = "rope"
scheme = "rope"
[[models]]
label = "alibi"
scheme = "alibi"
[stretch]
models = ["rope", "alibi"]
methods = {methods}
"""


def test_stretch_takes_extension_methods_and_keeps_earlier_cells(tmp_path: Path, monkeypatch) -> None:
    """`extend:NAME[:opts]` entries run the method on rotary models (not on alibi); adding them to a finished
    study computes only their cells."""
    from lextra.errors import LengthError

    corpus = _corpus(tmp_path)
    config, out = tmp_path / "study.toml", tmp_path / "out"
    config.write_text(STRETCH.format(corpus=corpus, methods='["none"]'))
    assert main(["study", str(config), "--out", str(out), "--quiet", "--threads", "1"]) == 0
    before = json.loads((out / "study.json").read_text())["stretch"]
    config.write_text(STRETCH.format(corpus=corpus, methods='["none", "extend:rerope", "extend:dca:local=2"]'))
    import lextra.pipelines.study.run as study_run

    computed = []
    real = study_run.evaluate_model
    monkeypatch.setattr(study_run, "evaluate_model", lambda *a, **k: computed.append(1) or real(*a, **k))
    assert main(["study", str(config), "--out", str(out), "--quiet", "--threads", "1"]) == 0
    after = json.loads((out / "study.json").read_text())["stretch"]
    assert len(computed) == 4  # two methods x two lengths, on the rope model only
    assert set(after) == {*before, "rope + extend:rerope", "rope + extend:dca:local=2"}
    assert after["rope + none"] == before["rope + none"]
    assert after["rope + extend:rerope"]["128"] != after["rope + none"]["128"]
    assert (out / "cells" / "stretch" / "rope-extend-rerope-128.json").exists()
    base = {"models": [{"label": "a", "scheme": "rope"}], "stretch": {"models": ["a"]}}
    with pytest.raises(ConfigError, match="unknown extension method 'ntk'"):
        parse_study({**base, "stretch": {"models": ["a"], "methods": ["extend:ntk"]}})
    with pytest.raises(LengthError, match="valid up to"):  # self_extend's default group reaches 6.25 L, not 16 L
        parse_study({**base, "stretch": {"models": ["a"], "methods": ["extend:self_extend"]}})


def test_retrieval_multiples_choose_the_passkey_lengths() -> None:
    models = [{"label": "a", "scheme": "rope"}]
    with pytest.raises(ConfigError, match="multiples"):
        parse_study({"models": models, "retrieval": {"task": "passkey", "multiples": [0]}})
    with pytest.raises(ConfigError, match="multiples"):
        parse_study({"models": models, "retrieval": {"task": "passkey", "multiples": "4"}})
    hybrids = load_study(Path(__file__).parents[1] / "experiments" / "hybrids.toml")
    assert hybrids.retrieval is not None and hybrids.retrieval["multiples"] == [1, 4, 16]
    assert hybrids.retrieval["answer_inside"] is True and hybrids.retrieval["task"] == "passkey,ends=0.4"
    assert hybrids.retrieval["until_learned"] == {"rounds": 4, "steps": 1500}
    with pytest.raises(ConfigError, match=r"\[retrieval\] answer_inside is true or false, got 'yes'"):
        parse_study({"models": models, "retrieval": {"task": "passkey", "answer_inside": "yes"}})
    assert {m.label for m in hybrids.models} >= {"rope", "nope", "rnope-swa", "swan", "rope-gate", "rope-sinks"}


def test_the_passkey_section_gives_the_mean_over_seeds_with_its_interval(tmp_path: Path) -> None:
    """Several seeds of a variant: each length's exact match is their mean with the t-interval over the seeds; one
    seed is its own value, as before."""
    from lextra.evaluate.retrieval import RetrievalCell, RetrievalResult
    from lextra.reporting.intervals import Interval
    from lextra.reporting.study import retrieval_section

    def result(exact: dict[int, float]) -> RetrievalResult:
        cells = {n: {0.5: RetrievalCell(e, 1.0, 1.0, 10, [])} for n, e in exact.items()}
        return RetrievalResult("passkey", "m", [128, 512], [0.5], 10, 5, 0, cells)

    seeds = {0: result({128: 1.0, 512: 0.6}), 1: result({128: 0.9, 512: 0.2}), 2: result({128: 1.0, 512: 0.4})}
    lines = retrieval_section({"swa": seeds, "one": {0: result({128: 0.7, 512: 0.1})}}, [128, 512], 128, tmp_path)
    text = "\n".join(lines)
    spread = Interval.of([0.6, 0.2, 0.4])
    assert "mean ± 95% interval over 3 seeds" in text
    assert f"| swa | 0.97 ± {(Interval.of([1.0, 0.9, 1.0]).high - Interval.of([1.0, 0.9, 1.0]).low) / 2:.2f} |" in text
    assert f"{spread.mean:.2f} ± {(spread.high - spread.low) / 2:.2f}" in text
    assert "| one | 0.7 | 0.1 |" in text or "| one | 0.70 | 0.10 |" in text
    # a variant under 90% at L_tr on some seed is named with its scores and left out of the comparison past L_tr
    assert (
        "Not learned at L_tr (under 90% exact on some seed), so left out of the comparison past it: one (0.70 per"
        in text
    )
    assert "Exact match averaged over the lengths past L_tr: swa 0.40." in text
    assert "prompt + answer" not in text
    inside = result({128: 1.0, 512: 0.5})
    inside.answer_inside = True
    text = "\n".join(retrieval_section({"in": {0: inside}}, [128, 512], 128, tmp_path))
    assert "Each length counts prompt + answer, as a training row does." in text


def test_the_coca_verdict_needs_both_models_learned_at_the_training_length(tmp_path: Path) -> None:
    """CoCA + dynamic NTK against RoPE past L_tr (the paper's claim) is judged only where both learned passkey at
    L_tr; otherwise the report says which did not."""
    from lextra.evaluate.retrieval import RetrievalCell, RetrievalResult
    from lextra.reporting.study import retrieval_section

    def result(inside: float, past: float) -> dict[int, RetrievalResult]:
        cells = {n: {0.5: RetrievalCell(e, 1.0, 1.0, 10, [])} for n, e in ((128, inside), (512, past))}
        return {0: RetrievalResult("passkey", "m", [128, 512], [0.5], 10, 5, 0, cells)}

    def text(rope_inside: float) -> str:
        retrieval = {"rope": result(rope_inside, 0.0), "coca+dynamic": result(1.0, 0.8)}
        return "\n".join(retrieval_section(retrieval, [128, 512], 128, tmp_path))

    assert (
        "**Agrees** in direction: CoCA + dynamic NTK retrieves past L_tr better than RoPE (0.80 against 0.00"
        in text(1.0)
    )
    unlearned = text(0.6)
    assert "**Agrees**" not in unlearned and "**Differs**" not in unlearned
    assert "CoCA + dynamic NTK against RoPE: **not decided**, rope did not learn the task at L_tr." in unlearned
    assert "Exact match averaged over the lengths past L_tr: coca+dynamic 0.80." in unlearned
