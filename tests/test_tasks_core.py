"""The length-generalization task layer: encoding in both styles, training on a task through the one Trainer
(exact resume), scoring (decoder exact match equals greedy decoding), intervals, the study's gating and report, and
the bad inputs the issue names."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from lextra.errors import ConfigError
from lextra.evaluate.tasks import check_beyond, evaluate_task, load_task_model, score_length
from lextra.model import GPT, GPTConfig
from lextra.pipelines.task_study import parse_task_study
from lextra.reporting.intervals import Interval, t_quantile
from lextra.tasks import (
    IGNORE,
    PAD,
    LengthRange,
    TaskBatch,
    TaskBatches,
    build_task,
    check_task_mask,
    encode,
    generate_rows,
    parse_lengths,
)
from lextra.train import TrainConfig
from lextra.train.gpt import train


def test_encoder_encoding_puts_answers_at_placeholders() -> None:
    task = build_task("ruoss.reverse_string")
    batch = TaskBatch(np.array([[0, 1, 1]]), np.array([[1, 1, 0]]))
    encoded = encode(task, batch)
    answer = task.special("<answer>")
    assert encoded.inputs.tolist() == [[0, 1, 1, answer, answer, answer]]
    assert encoded.targets.tolist() == [[IGNORE, IGNORE, IGNORE, 1, 1, 0]]
    assert encoded.scored.tolist() == [[False, False, False, True, True, True]]


def test_decoder_encoding_shifts_answers_and_pads_rows() -> None:
    task = build_task("ruoss.reverse_string")  # its alphabet serves; the style is set per test
    task.style, task.score = "decoder", "exact"  # type: ignore[misc]
    eos, pad = task.special("<eos>"), task.special("<pad>")
    batch = TaskBatch(np.array([[0, 1, PAD], [1, 1, 0]]), np.array([[1, PAD], [0, 1]]))
    encoded = encode(task, batch)
    # row 0 is 0 1 | 1 <eos> <pad> <pad>, fed without its last token
    assert encoded.inputs.tolist() == [[0, 1, 1, eos, pad], [1, 1, 0, 0, 1]]
    assert encoded.targets.tolist() == [[IGNORE, 1, eos, IGNORE, IGNORE], [IGNORE, IGNORE, 0, 1, eos]]
    assert encoded.scored.tolist() == [[False, True, True, False, False], [False, False, True, True, True]]


def test_generate_rows_keeps_row_order_and_lengths() -> None:
    task = build_task("ruoss.reverse_string")
    lengths = np.array([3, 5, 3, 4])
    batch = generate_rows(task, lengths, np.random.default_rng(0))
    assert [len(batch.row(i)[0]) for i in range(4)] == [3, 5, 3, 4]
    for i in range(4):
        inputs, outputs = batch.row(i)
        assert outputs == inputs[::-1]


def test_training_batches_are_a_function_of_seed_and_step() -> None:
    source = TaskBatches(build_task("ruoss.reverse_string"), LengthRange(1, 40))
    a, b = source.batch(7, 8, 0, seed=3), source.batch(7, 8, 0, seed=3)
    assert torch.equal(a, b)
    assert not torch.equal(a, source.batch(8, 8, 0, seed=3))
    widths = {source.batch(s, 8, 0, seed=3).shape[-1] for s in range(30)}
    assert len(widths) > 5 and max(widths) <= 80  # one length per step (Ruoss et al.), up to 2 x 40


def test_data_seed_moves_the_batches_and_positions_not_the_weights() -> None:
    """`data_seed` draws the training batches (examples and randomized positions) as `seed` would, and leaves the
    initial weights to `seed`; unset, the batches follow `seed` and the saved config has no data_seed."""
    from lextra.train.gpt import GPTTarget

    def target(**changes) -> GPTTarget:
        made = GPTTarget(_config(positions="randomized:64", **changes))
        made.task_batches = TaskBatches(build_task("ruoss.reverse_string"), LengthRange(1, 6))
        return made

    plain, moved, other = target(seed=1), target(seed=1, data_seed=2), target(seed=2)
    for step in (0, 5):
        (a, pa), (b, pb), (c, pc) = (t.batch(step) for t in (plain, moved, other))
        assert torch.equal(b, c) and torch.equal(pb, pc) and not torch.equal(a, b) and not torch.equal(pa, pb)
    device, world = torch.device("cpu"), None
    weights = [t.build(device, world).state_dict() for t in (plain, moved, other)]  # type: ignore[arg-type]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert not all(torch.equal(weights[0][k], weights[2][k]) for k in weights[0])
    assert "data_seed" not in _config().to_dict() and _config(data_seed=2).to_dict()["data_seed"] == 2
    with pytest.raises(ConfigError, match="data_seed"):
        _config(data_seed=-1)


def test_study_data_seeds_make_a_cell_per_pair() -> None:
    """`data_seeds` pairs every seed with every data seed: one cell each, named and trained apart; without it the
    cells and their keys are those of a study written before data seeds existed."""
    from lextra.pipelines.task_study import TaskStudy

    plain = TaskStudy(parse_task_study(_study(seeds=[0])), "unused")
    assert [u.name for u in plain.units()] == ["ruoss.reverse_string-rope-seed0", "ruoss.reverse_string-nope-seed0"]
    assert "data_seed" not in plain.key(plain.units()[0])["train"]
    paired = TaskStudy(parse_task_study(_study(seeds=[0], data_seeds=[4, 5])), "unused")
    units = paired.units()
    assert [u.name for u in units[:2]] == [
        "ruoss.reverse_string-rope-seed0-data4",
        "ruoss.reverse_string-rope-seed0-data5",
    ]
    trained = [u.train_config(paired.config) for u in units[:2]]
    assert [(c.seed, c.data_seed) for c in trained] == [(0, 4), (0, 5)]
    assert paired.config.replicates() == "seeds [0] x data seeds [4, 5]"
    from lextra.evaluate.tasks import LengthScore
    from lextra.reporting.tasks import TaskStudyResults, UnitScores

    def scores(data_seed: int, inside: float) -> UnitScores:
        at = [LengthScore(4, inside, inside, inside, 8, 32)], [LengthScore(8, 0.5, 0.5, 0.5, 8, 64)]
        return UnitScores("ruoss.reverse_string", "rope", 0, *at, data_seed=data_seed)

    units = [scores(4, 1.0), scores(5, 0.5)]
    assert UnitScores.from_dict(units[0].to_dict()) == units[0]
    results = TaskStudyResults(paired.config, units)
    rows = results.csv_text().splitlines()
    assert rows[0].startswith("task,model,seed,data_seed,length") and rows[1].startswith(
        "ruoss.reverse_string,rope,0,4,4,"
    )
    cell = results.cells[("ruoss.reverse_string", "rope")]
    assert (cell.seeds, cell.mastered) == (2, 1) and "not learned (1/2 seeds" in cell.text()
    assert "over seeds [0] x data seeds [4, 5]" in results.markdown()
    plain_unit = UnitScores("ruoss.reverse_string", "rope", 0, units[0].inside, units[0].beyond)
    assert "data_seed" not in plain_unit.to_dict()  # cells saved before data seeds read and write as they did


def _config(**changes) -> TrainConfig:
    values = dict(task="ruoss.reverse_string", task_lengths="1-6", steps=40, batch_size=16, lr=3e-3, warmup=5,
                  eval_sequences=0, checkpoint_every=20, model=GPTConfig(n_layer=1, d_model=32, n_head=2))  # fmt: skip
    values.update(changes)
    return TrainConfig(**values).validate()


def test_task_sets_vocabulary_and_training_length() -> None:
    config = _config()
    assert config.model.vocab_size == 5 and config.model.train_len == 12  # {0,1} + 3 specials; 6 inputs + 6 answers


@pytest.mark.slow
def test_task_training_learns_and_resumes_exactly(tmp_path) -> None:
    config = _config(positions="randomized:64")
    final = train(config, tmp_path / "a", progress=False)
    stopped = {}

    def interrupt(done: int) -> None:
        if done == 20:
            stopped["yes"] = True
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(_config(positions="randomized:64"), tmp_path / "b", progress=False, on_step=interrupt)
    resumed = train(_config(positions="randomized:64"), tmp_path / "b", progress=False, resume=True)
    a, b = (json.loads((f / "config.json").read_text())["weights_sha256"] for f in (final, resumed))
    assert stopped and a == b
    run = load_task_model(final)
    assert run.sampler.spec() == "randomized,max=64" and run.train_lengths == LengthRange(1, 6)
    first = [json.loads(line)["loss"] for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    assert first[-1] < first[0]


def _tiny_decoder_run(tmp_path):
    """A random decoder-task model saved as a run would be (no training: decoding only needs a model)."""
    config = _config(task="kazemnejad.copy", task_lengths="1-6", steps=1)
    return load_task_model(train(config, tmp_path / "copy", progress=False))


@pytest.mark.slow
def test_decoder_scores_equal_cached_greedy_decoding(tmp_path) -> None:
    """Each row's answer is the model's own greedy continuation (3 tokens, decoded with the KV cache): the one-pass
    score must find those 3 tokens right and judge the <eos> step exactly as the cached decoder's next argmax."""
    run = _tiny_decoder_run(tmp_path)
    task, model = run.task, run.model.eval()
    batch = task.generate(4, 12, np.random.default_rng(5))
    eos, steps = task.special("<eos>"), 3
    outputs, eos_right = np.full((len(batch), steps), PAD), []
    with torch.no_grad():
        for i in range(len(batch)):
            cache = model.new_cache()
            logits = model(torch.tensor([batch.row(i)[0]]), cache=cache)
            chain = []
            for _ in range(steps + 1):
                chain.append(int(logits[0, -1].argmax()))
                logits = model(torch.tensor([[chain[-1]]]), cache=cache)
            outputs[i] = chain[:steps]
            eos_right.append(chain[steps] == eos)
    forced = TaskBatch(batch.inputs, outputs)
    task.generate = lambda length, count, rng: forced  # type: ignore[method-assign]
    score = score_length(run, 4, samples=len(batch), seed=0, batch_size=5)
    assert score.per_token == pytest.approx((steps * len(batch) + sum(eos_right)) / ((steps + 1) * len(batch)))
    assert score.exact == pytest.approx(sum(eos_right) / len(batch))


def test_interval_matches_student_t() -> None:
    values = [0.5, 0.7, 0.9]
    interval = Interval.of(values)
    sd = math.sqrt(sum((v - 0.7) ** 2 for v in values) / 2)
    assert interval.mean == pytest.approx(0.7)
    assert interval.half == pytest.approx(4.303 * sd / math.sqrt(3))
    assert t_quantile(40) == 1.96 and math.isnan(Interval.of([0.3]).half)
    assert Interval(0.9, 0.01, 3).separated(Interval(0.8, 0.05, 3))
    assert not Interval(0.9, 0.06, 3).separated(Interval(0.8, 0.05, 3))
    assert Interval(0.517, 1.04, 3).text(100, within=(0.0, 1.0)) == "51.7 (0.0-100.0)"  # a score stays in 0..100
    assert Interval(0.5, 0.1, 3).text(100, within=(0.0, 1.0)) == "50.0 ± 10.0"


def _study(**changes) -> dict:
    data = {
        "kind": "tasks", "seeds": [0, 1], "tasks": ["ruoss.reverse_string"], "samples": 8, "train_points": 2,
        "test_points": 2, "train_lengths": {"ruoss.reverse_string": "1-4"},
        "test_lengths": {"ruoss.reverse_string": "5-8"},
        "train": {"steps": 2, "batch_size": 4, "model": {"n_layer": 1, "d_model": 16, "n_head": 2}},
        "models": [{"label": "rope", "scheme": "rope"}, {"label": "nope", "scheme": "nope", "positions": "contiguous"}],
    }  # fmt: skip
    data.update(changes)
    return data


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"seeds": []}, "seeds is empty"),
        ({"tasks": ["ruoss.no_such_task"]}, "unknown"),
        ({"tasks": ["ruoss.reverse_string,modulus=3"]}, "no option"),
        ({"test_lengths": {"ruoss.reverse_string": "3-8"}}, "inside the training range"),
        ({"models": [{"label": "x", "scheme": "nope", "positions": "warp"}]}, "position sampler"),
        ({"train": {"task": "passkey"}}, "task is set per cell by the study's tasks list"),
        ({"train": {"seed": 3}}, "seed is set per cell by the study's seeds"),
        ({"train": {"data_seed": 3}}, "data_seed is set per cell by the study's data_seeds"),
        ({"data_seeds": []}, "data_seeds must be a non-empty list"),
        ({"data_seeds": [1, 1]}, "distinct whole numbers"),
        ({"seeds": [0, -1]}, "seeds must be a non-empty list of distinct whole numbers >= 0"),
        ({"models": [{"label": "x", "scheme": "nope", "abacus": {"max_k": -1}}]}, "abacus max_k"),
        ({"models": [{"label": "x", "scheme": "nope", "abacus": {"offset": 3}}]}, "abacus has no option offset"),
    ],
)
def test_study_bad_input_fails_before_training(changes, message) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_task_study(_study(**changes))


def test_a_study_model_with_abacus_trains_with_the_task_digits() -> None:
    """`abacus = {max_k = 40}` on a study model reaches its training config; the task's digits fill the rest."""
    config = parse_task_study(
        _study(
            tasks=["zhou.addition,index_hints=false"], train_lengths={}, test_lengths={},
            models=[
                {"label": "plain", "scheme": "nope"}, {"label": "abacus", "scheme": "nope", "abacus": {"max_k": 40}}
            ],
        )
    )  # fmt: skip
    plain, abacus = (config.train_config(m, config.tasks[0], 0) for m in config.models)
    assert plain.model.abacus is None
    task = build_task("zhou.addition,index_hints=false")
    digits = [task.vocabulary.index(str(d)) for d in range(10)]
    assert abacus.model.abacus == {"max_k": 40, "positions": 1024, "digits": digits}
    assert config.models[1].abacus == {"max_k": 40}  # the spec itself is not filled in


def test_bad_task_inputs_name_the_fix() -> None:
    with pytest.raises(ConfigError, match="not a length-generalization task"):
        build_task("passkey")
    with pytest.raises(ConfigError, match="needs a bidirectional mask"):
        check_task_mask(build_task("ruoss.reverse_string"), True, "causal")
    with pytest.raises(ConfigError, match="needs a causal mask"):
        check_task_mask(build_task("kazemnejad.copy"), False, "full")
    with pytest.raises(ConfigError, match="inside the training range"):
        check_beyond([30, 50], LengthRange(1, 40))
    with pytest.raises(ConfigError, match="LOW-HIGH"):
        parse_lengths("ten")
    with pytest.raises(ConfigError, match="task_lengths applies"):
        TrainConfig(task_lengths="1-4").validate()
    windowed = GPTConfig(n_layer=2, d_model=16, n_head=2, layer_plan="rope+window:8;rope")
    with pytest.raises(ConfigError, match=r"needs a bidirectional mask, not window,width=8 \(layer 0"):
        TrainConfig(task="ruoss.reverse_string", model=windowed).validate()
    bidirectional = GPTConfig(n_layer=2, d_model=16, n_head=2, layer_plan="rope+full;rope")
    with pytest.raises(ConfigError, match="needs a causal mask"):
        TrainConfig(task="kazemnejad.copy", model=bidirectional).validate()


def test_vocabulary_too_small_is_refused(tmp_path) -> None:
    from lextra.data.positions import build_sampler
    from lextra.evaluate.tasks import TaskModel

    model = GPT(GPTConfig(vocab_size=3, n_layer=1, d_model=16, n_head=2, train_len=16))
    run = TaskModel(
        model, build_task("ruoss.reverse_string"), LengthRange(1, 8), build_sampler("contiguous", 16), tmp_path
    )
    with pytest.raises(ConfigError, match="needs 5 tokens"):
        evaluate_task(run, [4], samples=2)


@pytest.mark.slow
def test_task_study_gates_reports_and_resumes(tmp_path) -> None:
    from lextra.pipelines.task_study import TaskStudy

    searched = {"task": "ruoss.reverse_string", "model": "rope", "source": "not found: searched"}
    config = parse_task_study(_study(published=[searched]))
    results = TaskStudy(config, tmp_path, progress=False).run()
    assert len(results.units) == 4
    for cell in results.cells.values():  # 2 steps learn nothing: no model enters the extrapolation column
        assert not cell.entered and "not learned" in cell.text()
    report = results.write(tmp_path, ["# t"])
    assert "not learned (0/2 seeds" in report.read_text() and "scores >= 95% inside" in report.read_text()
    rows_by_model = {line.split(" | ")[0]: line for line in report.read_text().splitlines() if line.startswith("| ")}
    assert rows_by_model["| rope"].endswith("| not found | not found: searched |")  # searched for, not found
    assert rows_by_model["| nope"].endswith("| - |  |")  # no entry given
    rows = (tmp_path / "results.csv").read_text().splitlines()
    assert len(rows) == 1 + 4 * (2 + 2)
    again = TaskStudy(config, tmp_path, progress=False)
    assert all(again.saved(u) is not None for u in again.units())  # cached: nothing recomputed


@pytest.mark.slow
def test_cli_trains_scores_and_refuses_bad_input_with_one_line(tmp_path, capsys) -> None:
    from lextra.cli.app import main

    run = tmp_path / "rev"
    common = ["--n-layer", "1", "--d-model", "16", "--n-head", "2", "--steps", "2", "--batch-size", "4", "--quiet"]
    assert main(["train", "--out", str(run), "--task", "ruoss.reverse_string", "--task-lengths", "1-4", *common]) == 0
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert f"final train loss {last['loss']:.4f}\nmodel saved to" in capsys.readouterr().out  # a task run: no val loss
    assert main(["tasks", "eval", str(run), "--lengths", "5-6", "--samples", "4", "--beyond", "--quiet"]) == 0
    saved = json.loads((run / "tasks-5-6" / "results.json").read_text())
    assert [s["length"] for s in saved["scores"]] == [5, 6] and saved["train_lengths"] == "1-4"
    assert (run / "tasks-5-6" / "scores.csv").read_text().count("\n") == 3
    capsys.readouterr()
    bad = [
        (["train", "--out", str(tmp_path / "x"), "--task", "ruoss.nope", *common], "unknown"),
        (["tasks", "eval", str(run), "--lengths", "3-6", "--beyond"], "inside the training range"),
        (["tasks", "eval", str(run), "--mask", "causal"], "needs a bidirectional mask"),
        (["tasks", "eval", str(run), "--lengths", "x"], "LOW-HIGH"),
    ]
    for argv, message in bad:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (argv, err)
    assert not (tmp_path / "x").exists() and not (run / "tasks-3-6").exists()  # nothing written
