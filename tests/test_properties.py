"""Property-based: random and invalid configs, options and corrupt files end in a result or one clear line."""

from __future__ import annotations

import contextlib
import io
import math
import shutil
from pathlib import Path

import pytest
import torch
from conftest import ALL_SCHEMES
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from lextra.cli import main
from lextra.model import load_model

OPTION_VALUES = st.one_of(
    st.integers(-5, 5000), st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.text(max_size=6), st.none()
)
OPTION_KEYS = st.sampled_from(
    [
        "base",
        "layout",
        "scale_base",
        "slope_shift",
        "num_buckets",
        "max_distance",
        "d_bar",
        "hidden",
        "max_len",
        "r1_init",
        "eps",
        "decay",
        "bogus",
        "",
    ]
)


def _run(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


def _assert_clean(code: int, err: str, command: str) -> None:
    assert code in (0, 2), err
    if code == 2:
        # progress bars may precede the error on stderr; the error itself is one line, and there is no traceback
        lines = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("lextra ")]
        assert len(lines) == 1 and lines[0].startswith(f"lextra {command}: error: "), err
        assert err.rstrip().endswith(lines[0]) and "Traceback" not in err


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    # mostly valid values, so that many cases train; the rest probe every kind of mistake
    scheme=st.one_of(st.sampled_from(ALL_SCHEMES), st.sampled_from(ALL_SCHEMES), st.text(max_size=10)),
    width=st.sampled_from([16, 16, 16, 32, 32, 24, 30, 0, -4, 7]),
    heads=st.sampled_from([2, 2, 2, 4, 1, 3, 0, -1]),
    layers=st.sampled_from([1, 1, 1, 2, 0, -1]),
    train_len=st.sampled_from([8, 8, 16, 16, 12, 1, 0, -2]),
    steps=st.sampled_from([1, 1, 2, 2, 0, -1]),
    batch=st.sampled_from([2, 2, 2, 1, 0, -1]),
    option=st.one_of(st.none(), st.none(), st.tuples(OPTION_KEYS, OPTION_VALUES)),
    mask_spec=st.sampled_from(["causal", "bca", "window:3", "window:0", "window:x", "bcb", "full"]),
)
def test_train_and_eval_end_in_a_result_or_a_clear_error(
    tmp_path_factory, scheme, width, heads, layers, train_len, steps, batch, option, mask_spec
) -> None:
    out = tmp_path_factory.mktemp("prop") / "run"
    argv = [
        "train",
        "--out",
        str(out),
        "--scheme",
        scheme,
        "--d-model",
        str(width),
        "--n-head",
        str(heads),
        "--n-layer",
        str(layers),
        "--train-len",
        str(train_len),
        "--steps",
        str(steps),
        "--batch-size",
        str(batch),
        "--limit-chars",
        "200000",
        "--threads",
        "1",
        "--warmup",
        "1",
    ]
    if option is not None:
        key, value = option
        argv += ["--scheme-option", f"{key}={'nan' if isinstance(value, float) and math.isnan(value) else value}"]
    code, err = _run(argv)
    _assert_clean(code, err, "train")
    event("trained" if code == 0 else "rejected")
    if code == 0:
        model = load_model(out / "model")
        assert all(torch.isfinite(p).all() for p in model.parameters())
        code, err = _run(
            [
                "eval",
                str(out),
                "--lengths",
                f"{max(1, train_len)},{2 * max(1, train_len)}",
                "--documents",
                "1",
                "--mask",
                mask_spec,
                "--protocols",
                "chunks",
            ]
        )
        _assert_clean(code, err, "eval")


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    target=st.sampled_from(["model.safetensors", "config.json"]),
    position=st.floats(0.0, 1.0),
    garbage=st.binary(min_size=1, max_size=64),
    truncate=st.booleans(),
)
def test_corrupt_checkpoints_fail_clearly_and_the_good_copy_survives(
    good_run: Path, tmp_path_factory, target, position, garbage, truncate
) -> None:
    run = tmp_path_factory.mktemp("corrupt") / "run"
    shutil.copytree(good_run, run)
    path = run / "model" / target
    data = path.read_bytes()
    cut = int(position * len(data))
    corrupted = data[:cut] if truncate else data[:cut] + garbage + data[cut + len(garbage) :]
    path.write_bytes(corrupted)
    code, err = _run(["eval", str(run), "--lengths", "8", "--documents", "1", "--protocols", "chunks"])
    _assert_clean(code, err, "eval")
    if corrupted != data and target == "model.safetensors":
        assert code == 2 and "corrupt" in err  # the checksum catches any change to the weights
    assert load_model(good_run / "model") is not None  # nothing written before is lost


@pytest.fixture(scope="module")
def good_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("good") / "run"
    code, err = _run(
        [
            "train",
            "--out",
            str(run),
            "--scheme",
            "alibi",
            "--d-model",
            "16",
            "--n-head",
            "2",
            "--n-layer",
            "1",
            "--train-len",
            "8",
            "--steps",
            "2",
            "--batch-size",
            "2",
            "--limit-chars",
            "200000",
            "--threads",
            "1",
        ]
    )
    assert code == 0, err
    return run
