"""Every number a command takes is validated before any work: non-finite or out-of-range values end in one line
naming the flag, exit code 2, and nothing written."""

from __future__ import annotations

import argparse
import contextlib
import io
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from lextra.cli import main
from lextra.cli.app import build_parser, leaf_commands

NON_FINITE = ["nan", "NaN", "inf", "-inf", "Infinity", "1e999", "-1e999"]
NOT_NUMBERS = ["", "x", "1,2", "0x10", "1e"]


def _numeric_flags() -> list[tuple[tuple[str, ...], str, argparse.Action]]:
    """Every option of every command whose value is a number (it has a `type`)."""
    found = []
    for path, parser in leaf_commands(build_parser()):
        for action in parser._actions:
            if action.option_strings and action.type is not None and action.type is not str:
                found.append((path, action.option_strings[0], action))
    return found


FLAGS = _numeric_flags()


def test_numeric_flags_are_found_in_every_command_family() -> None:
    families = {path[0] for path, _, _ in FLAGS}
    assert {"train", "eval", "compare", "align", "analyze", "retrieval", "hf"} <= families
    names = {flag for _, flag, _ in FLAGS}
    assert {"--lr", "--steps", "--d-model", "--threads", "--samples", "--documents", "--length", "--threshold"} <= names


@pytest.mark.parametrize(("path", "flag", "action"), FLAGS, ids=[f"{' '.join(p)} {f}" for p, f, _ in FLAGS])
def test_every_numeric_flag_uses_a_validating_type(path, flag, action) -> None:
    for text in NON_FINITE + NOT_NUMBERS:
        with pytest.raises((argparse.ArgumentTypeError, ValueError)):
            action.type(text)


def _argv(path: tuple[str, ...], flag: str, value: str, out: Path) -> list[str]:
    """A command line with every required argument filled in and `flag` set to `value`."""
    parser = dict(leaf_commands(build_parser()))[path]
    argv = list(path)
    for action in parser._actions:
        if action.option_strings:
            if action.required and action.option_strings[0] != flag:
                argv += [action.option_strings[0], str(out) if action.dest == "out" else "8"]
        elif action.dest == "kind":
            argv.append("dispersion")
        elif action.dest not in ("help",) and not isinstance(action, argparse._SubParsersAction):
            argv.append(str(out.parent / "no-such-model"))
    return [*argv, f"{flag}={value}"]


def _run(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    case=st.sampled_from(FLAGS),
    value=st.one_of(
        st.sampled_from(NON_FINITE),
        st.floats(allow_nan=False, allow_infinity=False, max_value=-1.0).map(repr),
        st.integers(max_value=-1).map(str),
        st.sampled_from(NOT_NUMBERS),
    ),
)
def test_bad_numbers_end_in_one_line_before_any_work(tmp_path: Path, case, value: str) -> None:
    path, flag, _ = case
    out = tmp_path / "out"
    code, err = _run(_argv(path, flag, value, out))
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith(f"lextra {path[0]}") and "error: " in lines[0], err
    assert f"argument {flag}" in lines[0] and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["train", "--scheme-option", "slope_shift=nan", "--scheme", "alibi"], "slope_shift"),
        (["train", "--scheme-option", "base=-1e999"], "base"),
        (["train", "--scheme-option", "base=inf"], "base"),
        (["train", "--scheme", "alibi", "--scheme-option", "slope_shift=1e999"], "slope_shift"),
    ],
)
def test_non_finite_scheme_options_are_refused_before_training(tmp_path: Path, argv, needle) -> None:
    out = tmp_path / "run"
    code, err = _run([*argv, "--out", str(out), "--steps", "1", "--d-model", "16", "--n-head", "2", "--n-layer", "1"])
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("lextra train: error:") and needle in lines[0], err
    assert not (out / "checkpoints").exists() and not (out / "model").exists()
