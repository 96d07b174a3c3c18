"""Numbers are refused before any work, a diverging run stops at its step and resumes, non-finite weights never load."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import ALL_SCHEMES
from hypothesis import given, settings
from hypothesis import strategies as st

from lextra.cli import main
from lextra.errors import CheckpointError, ConfigError, TrainingDivergedError
from lextra.evaluate import EvalConfig
from lextra.extend import InferenceSetup
from lextra.model import GPT, GPTConfig, load_model, save_model
from lextra.pipelines.study.config import load_study
from lextra.positions import SCHEMES, HeadDims, build_scheme
from lextra.positions.scaling import RopeScaling
from lextra.train import TrainConfig, train
from lextra.validate import (
    FLOAT32_MAX,
    check_bool,
    check_finite,
    check_int,
    check_int_list,
    check_positive,
    check_positive_int,
    check_range,
)

#: what the CLI hands the library for these strings: strings ("nan", "inf") or floats (NaN, inf from 1e999)
NON_FINITE_TEXT = ["nan", "NaN", "inf", "-inf", "Infinity", "-Infinity", "1e999", "-1e999", "1e400"]
DIMS = HeadDims(n_heads=2, head_dim=8, d_model=16, train_len=16)
LIMIT = 200_000


# ------------------------------------------------------------------ the helpers
@pytest.mark.parametrize(
    ("check", "value", "message"),
    [
        (lambda v: check_finite("x", v), float("nan"), "x must be a finite number, got nan"),
        (lambda v: check_finite("x", v), float("-inf"), "x must be a finite number, got -inf"),
        (lambda v: check_finite("x", v), 10**400, "x must be a finite number, got 1000"),
        (lambda v: check_finite("x", v), True, "x must be a finite number, got True"),
        (lambda v: check_finite("x", v), "1.5", "x must be a finite number, got '1.5'"),
        (lambda v: check_positive("lr", v), 0.0, "lr must be a finite number > 0, got 0.0"),
        (lambda v: check_positive("lr", v), math.inf, "lr must be a finite number > 0, got inf"),
        (lambda v: check_range("p", v, 0.0, 1.0, high_open=True), 1.0, "p must be in [0, 1), got 1.0"),
        (lambda v: check_range("p", v, 0.0, 1.0, low_open=True), 0.0, "p must be in (0, 1], got 0.0"),
        (lambda v: check_range("p", v, high=2.0), 2.5, "p must be a finite number <= 2, got 2.5"),
        (lambda v: check_int("n", v), 2.5, "n must be an integer, got 2.5"),
        (lambda v: check_int("n", v, 0, 9), 10, "n must be an integer in [0, 9], got 10"),
        (lambda v: check_positive_int("steps", v), 0, "steps must be a positive integer, got 0"),
        (lambda v: check_positive_int("steps", v), False, "steps must be a positive integer, got False"),
        (lambda v: check_positive_int("steps", v), float("inf"), "steps must be a positive integer, got inf"),
        (lambda v: check_bool("decay", v), "false", "decay must be true or false, got 'false'"),
        (lambda v: check_int_list("lengths", v, 1), [8, 0], "lengths must be a positive integer, got 0"),
        (lambda v: check_int_list("lengths", v, 1), [], "lengths must list at least one integer"),
    ],
)
def test_helpers_refuse_with_the_name_the_value_and_the_range(check, value, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check(value)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 200


def test_helpers_return_canonical_values() -> None:
    assert check_int("n", 32.0) == 32 and type(check_int("n", 32.0)) is int
    assert check_finite("x", 3) == 3.0 and type(check_finite("x", 3)) is float
    assert check_range("p", 0.0, 0.0, 1.0) == 0.0 and check_range("p", 1.0, 0.0, 1.0) == 1.0
    assert check_positive("lr", 2e-3) == 2e-3
    assert check_int_list("lengths", (16, 32.0)) == [16, 32]
    assert check_bool("decay", False) is False


# ------------------------------------------------------------------ scheme options
#: every numeric constructor option of every scheme: (kind, whether a finite value is accepted)
RULES: dict[tuple[str, str], tuple[str, Any]] = {
    ("sinusoidal", "base"): ("float", lambda v: v > 1),
    ("sinusoidal", "scale"): ("float", lambda v: 0 <= v <= FLOAT32_MAX),
    ("learned", "max_len"): ("int", lambda v: 1 <= v <= 2**20),
    ("rope", "base"): ("float", lambda v: v > 1),
    # partial rotary rotates an even number (at least 2) of the 8 channels, or all of them
    ("rope", "fraction"): ("float", lambda v: 0 < v <= 1 and (v == 1 or (int(8 * v) >= 2 and int(8 * v) % 2 == 0))),
    ("rope", "proportional"): ("float", lambda v: 0 < v <= 1),
    ("xpos", "base"): ("float", lambda v: v > 1),
    ("xpos", "scale_base"): ("float", lambda v: 1 <= v <= 1e12),
    ("coca", "base"): ("float", lambda v: v > 1),
    ("alibi", "slope_shift"): ("float", lambda v: -100 <= v <= 100),
    ("alibi", "left"): ("float", lambda v: 0 <= v <= 1),
    ("t5", "num_buckets"): ("int", lambda v: 2 <= v <= 257),  # and max_distance 128 > the exact range v // 2
    ("t5", "max_distance"): ("int", lambda v: 16 < v <= 2**40),  # above the exact range of 32 buckets
    ("kerple_log", "r1_init"): ("float", lambda v: 0 < v <= FLOAT32_MAX),
    ("kerple_log", "r2_init"): ("float", lambda v: 0 < v <= FLOAT32_MAX),
    ("kerple_log", "eps"): ("float", lambda v: 0 < v <= FLOAT32_MAX),
    ("kerple_power", "r1_init"): ("float", lambda v: 0 < v <= FLOAT32_MAX),
    ("kerple_power", "r2_init"): ("float", lambda v: 0 < v <= FLOAT32_MAX),
    ("kerple_power", "eps"): ("float", lambda v: 0 < v <= 2),
    ("sandwich", "d_bar"): ("int", lambda v: 2 <= v <= 2**16 and v % 2 == 0),
    ("fire", "hidden"): ("int", lambda v: 1 <= v <= 2**16),
    ("fire", "c_init"): ("float", lambda v: abs(v) <= FLOAT32_MAX),
    ("fire", "threshold"): ("float", lambda v: 0 < v <= FLOAT32_MAX),
    ("fire", "eps"): ("float", lambda v: 1e-30 <= v <= 1),
    ("cope", "npos"): ("int", lambda v: 2 <= v <= 1 << 24),
}
#: the numeric options of docs/extending.md's example scheme (tests/plugins/lextra_toy.py), checked when
#: `LEXTRA_PLUGINS` loads it; a plugin's own scheme adds its entry here the same way
PLUGIN_RULES: dict[tuple[str, str], tuple[str, Any]] = {
    ("toy_bias", "slope"): ("float", lambda v: 0 <= v < 1e6),
}
RULES.update({key: rule for key, rule in PLUGIN_RULES.items() if key[0] in SCHEMES})
OPTIONS = sorted(RULES)


def _is_number_option(default: Any, annotation: str) -> bool:
    return not isinstance(default, bool) and ("float" in annotation or "int" in annotation)


def test_every_numeric_scheme_option_has_a_rule() -> None:
    numeric = {
        (name, option.name)
        for name in ALL_SCHEMES
        for option in SCHEMES.options(name)
        if _is_number_option(option.default, option.annotation)
    }
    assert numeric == set(RULES)


def _expected(scheme: str, option: str, value: Any) -> bool:
    """Whether `value` (as the CLI parsed it) is a valid setting of the option."""
    kind, accepts = RULES[(scheme, option)]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    if kind == "int" and isinstance(value, float) and not value.is_integer():
        return False
    return bool(accepts(value))


def _json_value(text: str) -> Any:
    """A value as a config file or the Python API may hand it over: JSON when it parses, else the text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _build(scheme: str, option: str, text: str):
    value = _json_value(text)
    return value, lambda: build_scheme(scheme, DIMS, **{option: value})


@pytest.mark.parametrize(("scheme", "option"), OPTIONS, ids=[f"{s}.{o}" for s, o in OPTIONS])
@pytest.mark.parametrize("text", NON_FINITE_TEXT)
def test_non_finite_option_strings_are_refused_naming_the_option(scheme: str, option: str, text: str) -> None:
    _value, build = _build(scheme, option, text)
    with pytest.raises(ConfigError, match=rf"^{scheme}: .*{option}"):
        build()


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    case=st.sampled_from(OPTIONS),
    text=st.one_of(
        st.sampled_from(NON_FINITE_TEXT),
        st.floats(allow_nan=False, allow_infinity=False).map(repr),
        st.integers(-10, 3000).map(str),
        st.sampled_from(["true", "false", '"2"', "x", "[1]", "null", "-0.0", "1e-40", "0"]),
    ),
)
def test_scheme_options_are_accepted_exactly_in_their_range(case: tuple[str, str], text: str) -> None:
    """Any value the CLI can hand over builds a scheme when it is in range, and is a ConfigError otherwise."""
    scheme, option = case
    value, build = _build(scheme, option, text)
    if value is None:  # JSON null: the option's default
        return
    if _expected(scheme, option, value):
        built = build()
        assert built.options[option] == value
    else:
        with pytest.raises(ConfigError, match=option):
            build()


@pytest.mark.parametrize(
    ("scheme", "options", "needle"),
    [
        ("rope", {"scaling": {"type": "yarn", "factor": math.nan}}, "factor must be a finite number"),
        ("rope", {"scaling": {"type": "dynamic", "factor": 1e300}}, r"factor must be <= 1e\+06"),
        ("rope", {"scaling": {"type": "ntk", "factor": math.inf}}, "factor must be a finite number"),
        ("coca", {"scaling": {"type": "linear", "factor": "2"}}, "factor must be a finite number"),
        ("xpos", {"decay": "false"}, "decay must be true or false"),
        ("t5", {"bidirectional": 1}, "bidirectional must be true or false"),
        ("sandwich", {"d_bar": 7}, "d_bar must be a positive even number"),
        ("t5", {"num_buckets": 64, "max_distance": 32}, "max_distance > the exact range"),
    ],
)
def test_nested_and_dependent_options_are_refused(scheme: str, options: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        build_scheme(scheme, DIMS, **options)


def test_longrope_with_a_training_length_of_one_is_refused_not_divided_by_zero() -> None:
    with pytest.raises(ConfigError, match="original_max_position_embeddings must be >= 2"):
        RopeScaling("longrope", factor=2.0, original_max_position_embeddings=1, short_factor=[1.0], long_factor=[1.0])


# ------------------------------------------------------------------ config numbers
CONFIG_RULES: list[tuple[str, str, Any]] = [
    # (config, field, a value that must be refused)
    ("model", "dropout", 1.0),
    ("model", "dropout", -0.1),
    ("model", "mlp_ratio", 0.0),
    ("model", "mlp_ratio", 1e-9),
    ("model", "n_head", 2.0),
    ("model", "tie_embeddings", "yes"),
    ("train", "lr", 0.0),
    ("train", "lr", -2e-3),
    ("train", "steps", 0),
    ("train", "batch_size", 2.5),
    ("train", "warmup", -1),
    ("train", "min_lr_ratio", 1.5),
    ("train", "weight_decay", -0.1),
    ("train", "beta1", 1.0),
    ("train", "beta2", -0.5),
    ("train", "grad_clip", 0.0),
    ("train", "position_lr_scale", -1.0),
    ("train", "seed", -1),
    ("train", "eval_sequences", -1),
    ("train", "limit_chars", 0),
    ("eval", "stride", 0),
    ("eval", "documents", 0),
    ("eval", "lengths", [16, -32]),
    ("eval", "lengths", "16"),
    ("eval", "span", 2.5),
    ("eval", "max_batch_tokens", 0),
    ("eval", "last_token_targets", True),
]
NUMERIC_FIELDS = sorted({(c, f) for c, f, _ in CONFIG_RULES if f not in ("tie_embeddings",)})


def _validate(config: str, name: str, value: Any) -> None:
    shape = {"n_layer": 1, "n_head": 2, "d_model": 16, "train_len": 16}
    if config == "model":
        GPTConfig(**{**shape, name: value}).validate()
    elif config == "train":
        TrainConfig(model=GPTConfig(**shape), **{name: value}).validate()
    else:
        EvalConfig(**{name: value}).validate()


@pytest.mark.parametrize(("config", "name", "value"), CONFIG_RULES)
def test_out_of_range_config_values_are_refused_naming_the_field(config: str, name: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=name):
        _validate(config, name, value)


@settings(max_examples=120, deadline=None, derandomize=True)
@given(case=st.sampled_from(NUMERIC_FIELDS), text=st.sampled_from(NON_FINITE_TEXT))
def test_non_finite_config_numbers_are_refused(case: tuple[str, str], text: str) -> None:
    config, name = case
    value = _json_value(text)
    if config == "eval" and name == "lengths":
        value = [16, value]
    with pytest.raises(ConfigError, match=name):
        _validate(config, name, value)


def test_temperatures_must_be_positive_and_finite() -> None:
    base = {"n_layer": 1, "n_head": 2, "d_model": 16, "train_len": 16}
    with pytest.raises(ConfigError, match="temperatures must be a finite number > 0, got inf"):
        GPTConfig(**base, temperatures=[[1.0, math.inf]]).validate()
    model = GPT(GPTConfig(**base))
    with pytest.raises(ConfigError, match="temperatures must be a finite number > 0, got nan"):
        InferenceSetup(temperatures=[[1.0, math.nan]]).apply(model)  # the same check as the config's
    with pytest.raises(ConfigError, match="temperatures must be 1 lists of 2 positive numbers"):
        InferenceSetup(temperatures=torch.ones(2, 2)).apply(model)


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ("[train]\nlr = nan\n", "lr must be a finite number > 0, got nan"),
        ("[train]\nlr = -inf\n", "lr must be a finite number > 0, got -inf"),
        ("[train]\nsteps = 0\n", "steps must be a positive integer, got 0"),
        ("[train]\nbatch_size = inf\n", "batch_size must be a positive integer, got inf"),
        ("[train.model]\ndropout = nan\n", "dropout must be in \\[0, 1\\), got nan"),
        ("[train.model]\nscheme = 'alibi'\nscheme_options = { slope_shift = nan }\n", "slope_shift"),
    ],
)
def test_study_toml_numbers_are_refused_on_load(tmp_path: Path, toml: str, needle: str) -> None:
    path = tmp_path / "study.toml"
    path.write_text(toml + "\n[[models]]\nlabel = 'a'\nscheme = 'alibi'\n")
    with pytest.raises(ConfigError, match=needle):
        load_study(path)


# ------------------------------------------------------------------ divergence
def tiny(steps: int = 12, **kwargs: Any) -> TrainConfig:
    model = GPTConfig(n_layer=1, n_head=2, d_model=16, train_len=16, layer_plan="alibi")
    values = {"batch_size": 4, "warmup": 2, "checkpoint_every": 5, "log_every": 2, "eval_sequences": 2, **kwargs}
    return TrainConfig(limit_chars=LIMIT, model=model, steps=steps, **values)


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _poison_after(step: int, model_of: dict[str, GPT]):
    """An on_step hook that writes nan into one weight after `step`, so the next step's loss is nan."""

    def hook(done: int) -> None:
        if done == step:
            with torch.no_grad():
                next(iter(model_of["model"].parameters())).view(-1)[0] = math.nan

    return hook


@pytest.fixture
def capture_model(monkeypatch) -> dict[str, GPT]:
    """Records the model `train` builds, so a hook can reach its weights."""
    import lextra.train.gpt as train_module

    seen: dict[str, GPT] = {}
    original = train_module.GPT

    def build(config: GPTConfig) -> GPT:
        seen["model"] = original(config)
        return seen["model"]

    monkeypatch.setattr(train_module, "GPT", build)
    return seen


def test_a_diverging_run_stops_at_its_step_keeps_the_last_checkpoint_and_resumes(tmp_path, capture_model) -> None:
    run = tmp_path / "run"
    good = run / "checkpoints" / "step_0000005"
    before: dict[str, dict[str, str]] = {}

    def hook(done: int) -> None:
        if done == 5:
            before["good"] = _digest(good)
        _poison_after(6, capture_model)(done)

    with pytest.raises(TrainingDivergedError) as caught:
        train(tiny(), run, progress=False, on_step=hook)
    message = str(caught.value)
    assert caught.value.step == 7 and caught.value.checkpoint == good
    assert message.startswith("training diverged at step 7 of 12: the loss and gradient norm became non-finite")
    assert "lr 0.002" in message and "step 5" in message and "--resume" in message and "--lr 0.0002" in message
    assert "\n" not in message
    assert _digest(good) == before["good"]  # the last good checkpoint is untouched
    assert (run / "checkpoints" / "LATEST").read_text().strip() == "step_0000005"
    assert not (run / "model").exists() and not (run / "checkpoints" / "step_0000010").exists()

    final = train(tiny(lr=2e-4), run, resume=True, progress=False)  # a lower learning rate is a compatible change
    model = load_model(final)
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    assert (run / "checkpoints" / "LATEST").read_text().strip() == "step_0000012"
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [2, 4, 6, 8, 10, 12]  # the diverged stretch (step 6) is replaced, nothing repeated
    assert json.loads((run / "config.json").read_text())["train"]["lr"] == 2e-4


def test_a_run_whose_loss_is_nan_from_the_start_says_there_is_no_checkpoint(tmp_path) -> None:
    with pytest.raises(TrainingDivergedError) as caught:
        train(tiny(lr=1e30), tmp_path / "run", progress=False)
    assert caught.value.step == 2 and caught.value.checkpoint is None
    assert "no checkpoint was saved before it" in str(caught.value) and "lr 1e+30" in str(caught.value)
    assert not (tmp_path / "run" / "checkpoints").exists() and not (tmp_path / "run" / "model").exists()


def test_non_finite_weights_after_the_last_step_are_not_saved(tmp_path, capture_model) -> None:
    run = tmp_path / "run"
    with pytest.raises(TrainingDivergedError, match=r"at step 12 of 12: the weights \(embed.weight\)"):
        train(tiny(), run, progress=False, on_step=_poison_after(12, capture_model))
    assert not (run / "model").exists()
    assert (run / "checkpoints" / "LATEST").read_text().strip() == "step_0000010"


def _run_cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


def test_cli_train_that_diverges_exits_2_with_one_line(tmp_path: Path) -> None:
    out = tmp_path / "run"
    tiny_args = ["--d-model", "16", "--n-head", "2", "--n-layer", "1", "--train-len", "16", "--batch-size", "4"]
    more = ["--limit-chars", str(LIMIT), "--threads", "1"]
    code, err = _run_cli(
        ["train", "--out", str(out), *tiny_args, "--steps", "6", "--warmup", "1", "--lr", "1e30", *more]
    )
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("lextra ")]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("lextra train: error: training diverged at step ") and "Traceback" not in err
    assert not (out / "model").exists()


# ------------------------------------------------------------------ loading
def test_load_and_eval_refuse_weights_that_are_not_finite(tmp_path: Path) -> None:
    model = GPT(GPTConfig(n_layer=1, n_head=2, d_model=16, train_len=16, layer_plan="alibi"))
    with torch.no_grad():
        model.blocks[0].mlp.up.weight[3, 1] = math.inf
    save_model(model, tmp_path / "model")  # the checksum matches: only the values are wrong
    with pytest.raises(CheckpointError, match=r"tensor blocks\.0\.mlp\.up\.weight holds non-finite values") as caught:
        load_model(tmp_path / "model")
    assert "use an earlier checkpoint" in str(caught.value)
    code, err = _run_cli(["eval", str(tmp_path / "model"), "--lengths", "16", "--documents", "1"])
    assert code == 2 and err.strip().count("\n") == 0 and "non-finite" in err, err


@pytest.mark.slow
def test_all_processes_of_a_distributed_run_stop_together(tmp_path: Path) -> None:
    out = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "-m",
        "lextra",
        "train",
        "--out",
        str(out),
        *["--d-model", "16", "--n-head", "2", "--n-layer", "1", "--train-len", "16", "--batch-size", "4"],
        *["--steps", "6", "--warmup", "1", "--lr", "1e30", "--limit-chars", str(LIMIT), "--threads", "1"],
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode != 0
    assert done.stderr.count("error: training diverged at step 2 of 6") == 2, done.stderr[-3000:]
    assert not (out / "model").exists()
