"""`lextra tune`: the searchers find optima planted in synthetic objectives, LongRoPE's monotonicity holds for every
candidate, the budget is respected on a fake clock, and a written setup file round-trips and is read by the
commands (`--setup FILE`), with conflicting flags and bad files refused in one line."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch

from lextra.cli.app import main
from lextra.errors import ConfigError, DataError
from lextra.extend import InferenceSetup
from lextra.extend.base import EXTENSIONS
from lextra.extend.setup_file import load_setup, read_setup_file, save_setup
from lextra.model import GPT, GPTConfig, save_model
from lextra.pipelines.tune import (
    Budget,
    EvolutionConfig,
    Score,
    Tracker,
    TuneSettings,
    coordinate_search,
    crossover,
    evolution_search,
    monotone,
    mutate,
    rope_geometry,
    run_search,
    yarn_factors,
)
from lextra.pipelines.tune.space import self_extend_space, yarn_space


class FakeClock:
    """A clock that moves only when told (each objective call costs `cost` seconds)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _extension_values(setup: InferenceSetup) -> dict[str, int]:
    _, options = EXTENSIONS.parse(str(setup.extension))
    return options


# ----------------------------------------------------------------------------- grid / coordinate search
def test_grid_search_finds_the_planted_self_extend_setting() -> None:
    space = self_extend_space(256, 1024)  # groups 8..64 x windows 16..128: 16 combinations, searched in full
    assert space.size() <= 16 and space.defaults == {"group": 8, "window": 64}
    tried: list[dict[str, int]] = []

    def objective(setup: InferenceSetup) -> Score:
        values = _extension_values(setup)
        tried.append(values)
        assert setup.rope_scaling is None  # every setup states both fields
        return Score(abs(values["group"] - 32) + abs(values["window"] - 32) / 16)

    best = coordinate_search(space, Tracker(objective, Budget(None), stream=None))
    assert best is not None and best.values == {"group": 32, "window": 32}
    assert tried[0] == {"group": 8, "window": 64} and len(tried) == space.size()
    assert best.setup == {"rope_scaling": None, "extension": "self_extend:group=32,window=32"}


def test_coordinate_search_finds_the_planted_yarn_setting_without_the_whole_grid() -> None:
    space = yarn_space(64, 256)  # s = 4: 4 factors x 3 beta_fast x 2 beta_slow x 3 attention factors = 72
    planted = {"factor": 8.0, "beta_fast": 64.0, "beta_slow": 2.0, "attention_factor": 1.0}

    def objective(setup: InferenceSetup) -> Score:
        scaling = dict(setup.rope_scaling)  # type: ignore[arg-type]
        assert scaling.pop("rope_type") == "yarn" and setup.extension is None
        scaling.setdefault("attention_factor", None)
        return Score(sum(scaling[k] != v for k, v in planted.items()))

    tracker = Tracker(objective, Budget(None), stream=None)
    best = coordinate_search(space, tracker, max_grid=16)
    assert best is not None and best.values == planted and best.loss == 0
    assert len(tracker.trials) < space.size() / 2  # coordinate descent, not the grid


# ----------------------------------------------------------------------------- LongRoPE's evolution
def test_mutation_and_crossover_keep_the_factors_new_and_monotone() -> None:
    rng = random.Random(0)
    parent = (1.0, 1.5, 2.0, 4.0)
    seen = {parent}
    for _ in range(200):
        child = mutate(parent, 4.0, 0.5, seen, rng)
        assert child is not None and child not in seen and monotone(child)
        assert child[0] >= 1.0 and child[-1] <= 4.0 and all(round(2 * f) == 2 * f for f in child)
        seen.add(child)
    other = (1.0, 1.0, 3.5, 3.5)
    seen = {parent, other}
    child = crossover(parent, other, seen, rng, 20)
    assert child is not None and monotone(child) and child not in seen
    assert all(c in (a, b) for a, b, c in zip(parent, other, child, strict=True))
    assert crossover(parent, parent, seen, rng, 20) is None  # identical parents: the caller mutates instead
    assert mutate((1.0,), 1.0, 0.5, {(1.0,)}, rng, tries=50) is None  # nothing new is left


def test_evolution_finds_the_planted_factors_and_every_candidate_is_monotone() -> None:
    planted = (1.0, 1.5, 3.0, 3.0, 4.0)
    candidates: list[list[float]] = []

    def objective(setup: InferenceSetup) -> Score:
        scaling = setup.rope_scaling
        assert isinstance(scaling, dict) and scaling["rope_type"] == "longrope" and scaling["factor"] == 4.0
        factors = scaling["long_factor"]
        candidates.append(factors)
        return Score(sum(abs(f - p) for f, p in zip(factors, planted, strict=True)))

    config = EvolutionConfig(population=16, parents=8, mutations=8, crossovers=8, step=0.5, iterations=30)
    initial = (1.0, 1.0, 2.0, 4.0, 4.0)
    tracker = Tracker(objective, Budget(None), stream=None)
    best = evolution_search(initial, 4.0, 64, tracker, config, random.Random(0))
    assert best is not None and tuple(best.values["factors"]) == planted and best.loss == 0
    assert candidates[0] == list(initial) and len(candidates) == len({tuple(c) for c in candidates})
    assert all(monotone(c) and c[0] >= 1.0 and c[-1] <= 4.0 for c in candidates)


def test_the_initial_factors_are_yarns() -> None:
    factors = yarn_factors(64, 10000.0, 256, 8.0)
    assert len(factors) == 32 and monotone(factors)
    assert factors[0] == pytest.approx(1.0) and factors[-1] == pytest.approx(8.0)  # extrapolated / interpolated
    assert 1.0 < factors[12] < 8.0  # YaRN's ramp in between
    model = GPT(GPTConfig(vocab_size=256, n_layer=1, n_head=2, d_model=64, train_len=32, layer_plan="rope,base=500000"))
    head_dim, base = rope_geometry(model)
    assert head_dim == 32 and base == pytest.approx(500000.0, rel=1e-5)


# ----------------------------------------------------------------------------- the budget
def test_the_search_stops_within_the_budget_and_keeps_the_best() -> None:
    clock = FakeClock()
    losses = iter([5.0, 3.0, 4.0, 1.0, 0.5, 0.1])

    def objective(setup: InferenceSetup) -> Score:
        clock.now += 10.0
        return Score(next(losses))

    settings = TuneSettings(("self_extend", "yarn"), 1024, budget=45.0)
    result = run_search(objective, settings, 256, clock=clock, stream=None)
    # the baseline from 0 to 10 s; self_extend's share (45 - 10) / 2 = 17.5 s fits one 10 s candidate (7.5 s are
    # then left, less than a candidate costs); yarn gets all that is left at 20 s (25 s): two candidates
    assert [t.method for t in result.trials] == ["none", "self_extend", "yarn", "yarn"]
    assert clock.now == 40.0 <= 45.0 and result.stopped == "budget" and result.seconds == 40.0
    assert result.best is not None and result.best.loss == 1.0 and result.best.method == "yarn"


def test_ctrl_c_ends_the_search_with_the_best_so_far() -> None:
    calls = []

    def objective(setup: InferenceSetup) -> Score:
        calls.append(setup)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return Score(float(len(calls)))

    result = run_search(objective, TuneSettings(("self_extend", "yarn"), 1024), 256, stream=None)
    assert result.stopped == "interrupted" and len(result.trials) == 2 and result.best is result.trials[0]


def test_progress_lines_name_speed_eta_and_the_best(capsys) -> None:
    clock = FakeClock()

    def objective(setup: InferenceSetup) -> Score:
        clock.now += 2.0
        return Score(1.0, {"ppl": 2.5, "passkey": 1.0}, tokens=1000)

    import sys

    run_search(objective, TuneSettings(("dca",), 1024, budget=9.0), 256, clock=clock, stream=sys.stderr)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == (
        "tune [1] none: loss 1.0000 (ppl 2.5, passkey 1) in 2.0 s | best 1.0000 none | 500 tok/s, 0m02s elapsed, "
        "ETA 0m07s"
    )
    assert lines[1].startswith("tune [2] dca:chunk=192,local=16: loss 1.0000") and len(lines) == 4


def test_a_candidate_the_model_refuses_is_recorded_and_the_search_goes_on() -> None:
    from lextra.errors import LengthError

    def objective(setup: InferenceSetup) -> Score:
        if _extension_values(setup)["group"] == 8:
            raise LengthError("too long for this group")
        return Score(float(_extension_values(setup)["window"]))

    tracker = Tracker(objective, Budget(None), stream=None)
    best = coordinate_search(self_extend_space(256, 1024), tracker)
    refused = [t for t in tracker.trials if t.refused]
    assert len(refused) == 4 and all(t.values["group"] == 8 and t.to_dict()["loss"] is None for t in refused)
    assert best is not None and best.refused is None and best.values["window"] == 16


# ----------------------------------------------------------------------------- setup files
def test_a_setup_file_round_trips(tmp_path: Path) -> None:
    scaling = {"type": "longrope", "factor": 4.0, "short_factor": [1.0] * 4, "long_factor": [1.0, 1.5, 2.0, 4.0]}
    for setup in (
        InferenceSetup(rope_scaling=None, extension="self_extend:group=4,window=16"),
        InferenceSetup(rope_scaling=scaling, extension=None, mask="causal", log_scaling="qwen", layers="rotary"),
        InferenceSetup(rope_scaling="yarn:4,beta_fast=16"),
    ):
        path = save_setup(tmp_path / "s.json", setup, tune={"candidates": 3})
        assert load_setup(path) == setup and read_setup_file(path).extra == {"tune": {"candidates": 3}}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not JSON"),
        ('{"format": "other", "version": 1, "setup": {}}', 'field format: expected "lextra-setup"'),
        ('{"format": "lextra-setup", "version": 2, "setup": {}}', "field version: expected 1, got 2"),
        (
            '{"format": "lextra-setup", "version": 1, "setup": {"temperatures": [1]}}',
            "field setup.temperatures: unknown",
        ),
        ('{"format": "lextra-setup", "version": 1, "setup": {"extension": "self_extnd"}}', "field setup.extension: "),
        (
            '{"format": "lextra-setup", "version": 1, "setup": {"rope_scaling": 4}}',
            "field setup.rope_scaling: expected",
        ),
        ('{"format": "lextra-setup", "version": 1, "setup": {"log_scaling": "ssm"}}', "field setup.log_scaling: "),
    ],
)
def test_a_bad_setup_file_is_one_line_naming_the_file_and_the_field(tmp_path: Path, content, message) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(DataError) as err:
        load_setup(path)
    text = str(err.value)
    assert text.startswith(f"setup file {path}: ") and message in text and "\n" not in text


# ----------------------------------------------------------------------------- the commands
@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, str]:
    """A tiny lextra run, a tiny Llama folder and a small corpus of text files."""
    import transformers

    root = tmp_path_factory.mktemp("tune")
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=256, n_layer=1, n_head=2, d_model=16, train_len=32, layer_plan="rope")).eval()
    save_model(model, root / "run" / "model", extra={"tokenizer": {"kind": "bytes"}})
    config = transformers.AutoConfig.for_model(
        "llama", vocab_size=260, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=32,
    )  # fmt: skip
    transformers.AutoModelForCausalLM.from_config(config).eval().save_pretrained(root / "llama")
    rng = random.Random(0)
    words = [
        "the",
        "grass",
        "is",
        "green",
        "sky",
        "blue",
        "sun",
        "yellow",
        "here",
        "we",
        "go",
        "there",
        "and",
        "back",
        "again",
    ]
    (root / "corpus").mkdir()
    for index in range(9):
        text = " ".join(rng.choice(words) for _ in range(300))
        (root / "corpus" / f"doc{index}.txt").write_text(text + "\n")
    return {"run": str(root / "run"), "llama": str(root / "llama"), "corpus": str(root / "corpus")}


def test_tune_writes_a_setup_that_eval_and_ruler_read(tiny, tmp_path: Path, capsys) -> None:
    out = tmp_path / "setup.json"
    args = ["tune", tiny["run"], "--length", "128", "--methods", "self_extend,longrope", "--corpus", tiny["corpus"]]
    args += ["--depths", "0,1", "--population", "2", "--parents", "2", "--mutations", "1", "--crossovers", "1"]
    args += ["--iterations", "1", "--step", "0.5", "--max-grid", "1", "--out", str(out), "--quiet", "--threads", "1"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "| none default | none |" in printed and "| self_extend default | self_extend:group=8,window=8 |" in printed
    saved = json.loads(out.read_text())
    record = saved["tune"]
    methods = [t["method"] for t in record["trials"]]
    assert methods[0] == "none" and "self_extend" in methods and "longrope" in methods
    assert record["candidates"] == len(methods) and record["seconds"] > 0 and record["target_length"] == 128
    best = min(record["trials"], key=lambda t: t["loss"])
    assert saved["setup"] == best["setup"] and record["best"]["loss"] == best["loss"]
    assert all(monotone(t["values"]["factors"]) for t in record["trials"] if t["method"] == "longrope")

    setup = tmp_path / "se.json"
    save_setup(setup, InferenceSetup(rope_scaling=None, extension="self_extend:group=32,window=8"))
    common = ["--corpus", tiny["corpus"], "--quiet", "--threads", "1"]
    eval_args = ["eval", tiny["run"], "--lengths", "64", "--protocols", "chunks", "--documents", "1", *common]
    assert main([*eval_args, "--setup", str(setup), "--out", str(tmp_path / "a")]) == 0
    assert main([*eval_args, "--extend", "self_extend:group=32,window=8", "--out", str(tmp_path / "b")]) == 0
    a, b = (json.loads((tmp_path / x / "results.json").read_text())["results"] for x in "ab")
    assert a == b and "self_extend" in capsys.readouterr().out
    ruler = ["ruler", "run", tiny["run"], "--tasks", "niah_single_1", "--lengths", "500", "--samples", "1"]
    ruler += [
        "--haystack",
        tiny["corpus"],
        "--prompt-length",
        "exact",
        "--quiet",
        "--threads",
        "1",
        "--setup",
        str(setup),
    ]
    assert main([*ruler, "--out", str(tmp_path / "r")]) == 0
    assert json.loads((tmp_path / "r" / "results.json").read_text())["label"] == "rope+self_extend:group=32,window=8"


def test_setup_and_flags_together_a_contradiction_is_refused(tiny, tmp_path: Path, capsys) -> None:
    setup = tmp_path / "se.json"
    save_setup(setup, InferenceSetup(extension="self_extend:group=4,window=8"))
    base = ["eval", tiny["run"], "--lengths", "64", "--protocols", "chunks", "--documents", "1", "--quiet"]
    base += ["--corpus", tiny["corpus"], "--setup", str(setup), "--threads", "1"]
    assert main([*base, "--extend", "self_extend:group=4,window=8", "--out", str(tmp_path / "same")]) == 0
    capsys.readouterr()
    assert main([*base, "--extend", "self_extend", "--out", str(tmp_path / "other")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"lextra eval: error: --extend self_extend contradicts setup file {setup} (extension: "
        "self_extend:group=4,window=8); drop --extend or edit the file"
    )
    assert main([*base, "--ext", "string", "--out", str(tmp_path / "abbreviated")]) == 2  # argparse's abbreviation
    assert "--extend string contradicts setup file" in capsys.readouterr().err
    tune = ["tune", tiny["run"], "--corpus", tiny["corpus"], "--quiet", "--out", str(tmp_path / "t.json")]
    for extra, message in (
        (["--length", "32"], "lextra tune: error: --length 32: tune for a length beyond the model's L_tr = 32"),
        (["--length", "64", "--methods", "yarn,selfextend"], "--methods: unknown selfextend; choose from self_extend"),
        (["--length", "64", "--train-len", "16"], "--train-len applies to Hugging Face models"),
    ):
        assert main([*tune, *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0]
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "lextra-setup", "version": 1, "setup": {"extension": "nope"}}')
    assert main([*base[:-4], "--setup", str(bad), "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"setup file {bad}: field setup.extension: " in err[0]


def test_hf_eval_and_hf_finetune_read_a_setup(tiny, tmp_path: Path, capsys) -> None:
    setup = tmp_path / "yarn.json"
    save_setup(setup, InferenceSetup(rope_scaling="yarn:2", extension=None))
    common = [tiny["llama"], "--tokenizer", "bytes", "--corpus", tiny["corpus"], "--quiet", "--threads", "1"]
    hf_eval = ["eval", *common, "--lengths", "64", "--protocols", "chunks", "--documents", "1"]
    assert main([*hf_eval, "--setup", str(setup), "--out", str(tmp_path / "a")]) == 0
    assert main([*hf_eval, "--rope-scaling", "yarn:2", "--out", str(tmp_path / "b")]) == 0
    a, b = (json.loads((tmp_path / x / "results.json").read_text())["results"] for x in "ab")
    assert a == b
    finetune = ["hf", "finetune", *common, "--train-len", "64", "--steps", "1", "--setup", str(setup)]
    assert main([*finetune, "--out", str(tmp_path / "ft")]) == 0
    saved = json.loads((tmp_path / "ft" / "model" / "config.json").read_text())
    rope = saved.get("rope_parameters") or saved.get("rope_scaling")
    assert rope["rope_type"] == "yarn" and rope["factor"] == 2.0
    extension = tmp_path / "se.json"
    save_setup(extension, InferenceSetup(extension="self_extend"))
    capsys.readouterr()
    assert main([*finetune, "--setup", str(extension), "--out", str(tmp_path / "ft2")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"lextra hf: error: setup file {extension} sets extension, which lextra hf finetune does not take; remove it "
        "from the file"
    )


def test_harness_reads_a_setup_into_the_lextra_models_arguments(tmp_path: Path) -> None:
    """`lextra harness --setup FILE` hands the file's changes to lm-eval's `lextra` model as its arguments."""
    from lextra.cli.app import build_parser
    from lextra.cli.harness import _model_args
    from lextra.cli.options import setup_into_args

    setup = tmp_path / "se.json"
    save_setup(setup, InferenceSetup(rope_scaling="yarn:2", extension="self_extend:group=4,window=8", mask="causal"))
    args = build_parser().parse_args(["harness", "run", "--tasks", "t", "--setup", str(setup)])
    setup_into_args(args, "lextra harness")
    values = _model_args(args)
    assert (values["rope_scaling"], values["extend"], values["mask"]) == (
        "yarn:2",
        "self_extend:group=4,window=8",
        "causal",
    )


def test_the_table_shows_a_refused_candidate_by_its_reason() -> None:
    import math

    from lextra.cli.tune import _table
    from lextra.pipelines.tune.run import TuneResult
    from lextra.pipelines.tune.search import Trial

    refused = Trial("self_extend", {}, {"extension": "self_extend,group=8"}, math.inf, {}, 1.0, 0, "too long")
    tuned = Trial("yarn", {}, {"rope_scaling": "yarn:4"}, 2.5, {"ppl": 12.18}, 2.0, 10)
    table = _table(TuneResult([refused, tuned], tuned, 3.0, None, None))
    assert "| refused: too long | - | - |" in table and "inf" not in table and "nan" not in table
    assert "| 2.5000 | 12.180 | - |" in table  # a part the tuner did not measure shows as '-'


def test_a_cells_answer_nll_is_the_teacher_forced_loss_of_its_answer_tokens(tiny) -> None:
    """Each prompt's answer appended to it and run once: the mean of -log p(answer token) per token, averaged over
    the cell's prompts, is the cell's answer_nll (what the needle-driven perplexity exponentiates)."""
    import torch.nn.functional as F

    from lextra.data import prepare_data
    from lextra.evaluate.retrieval import evaluate_retrieval, evaluation_task
    from lextra.model import load_model
    from lextra.tasks.rows import row_seed

    model = load_model(Path(tiny["run"]) / "model").eval()
    task = evaluation_task("passkey", prepare_data(tiny["corpus"]), 2)
    result = evaluate_retrieval(model, task, [128], [0.5], samples=3, seed=4, batch_size=2)
    rng = random.Random(row_seed("eval", task.name, 4, 128, 0.5))
    expected = []
    for _ in range(3):
        sample = task.sample(128, 0.5, rng)
        ids = torch.tensor([sample.prompt_ids + sample.answer_ids])
        with torch.no_grad():
            logp = F.log_softmax(model(ids)[0].double(), dim=-1)
        n, answer = len(sample.prompt_ids), sample.answer_ids
        expected.append(-sum(float(logp[n - 1 + i, t]) for i, t in enumerate(answer)) / len(answer))
    assert result.cell(128, 0.5).answer_nll == pytest.approx(sum(expected) / 3, rel=1e-5)


def test_the_needle_objective_scores_candidates_by_the_answers_perplexity(tiny, tmp_path: Path, capsys) -> None:
    out = tmp_path / "needle.json"
    args = ["tune", tiny["run"], "--length", "128", "--methods", "yarn", "--corpus", tiny["corpus"], "--depths", "0,1"]
    args += ["--max-grid", "2", "--objective", "needle", "--out", str(out), "--quiet", "--threads", "1"]
    assert main(args) == 0
    assert "needle ppl" in capsys.readouterr().out
    record = json.loads(out.read_text())["tune"]
    assert record["objective"]["objective"] == "needle" and record["objective"]["loss"] == "ln(needle_ppl)"
    trials = [t for t in record["trials"] if not t.get("refused")]
    assert len(trials) >= 2
    for trial in trials:  # the loss is ln(needle ppl) alone, whatever perplexity and passkey say
        assert trial["loss"] == pytest.approx(math.log(trial["needle_ppl"]), rel=1e-9)
    best = min(trials, key=lambda t: t["loss"])
    assert record["best"]["loss"] == best["loss"]


def test_an_unknown_objective_is_one_line(tiny, tmp_path: Path, capsys) -> None:
    from lextra.pipelines.tune import ObjectiveSettings

    with pytest.raises(ConfigError, match="tune objective 'longppl' is unknown; choose one of ppl, needle"):
        ObjectiveSettings(length=64, objective="longppl")
    args = ["tune", tiny["run"], "--length", "64", "--objective", "longppl", "--out", str(tmp_path / "x.json")]
    assert main(args) == 2 and "invalid choice: 'longppl'" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()
