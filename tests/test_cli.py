"""The command line: listings name every scheme and mask; user mistakes exit 2 with one line."""

from __future__ import annotations

from conftest import ALL_SCHEMES

from lextra.attention.masks import MASKS
from lextra.cli import main
from lextra.evaluate.retrieval.tasks import TASKS
from lextra.extend import EXTENSIONS
from lextra.positions import SCHEMES


def test_list_prints_every_scheme_mask_and_task_with_its_options(capsys) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    for name in ALL_SCHEMES + MASKS.names() + TASKS.names():
        row = next(i for i, line in enumerate(lines) if line.split()[:1] == [name])
        assert "options:" in lines[row + 1]
    for option in SCHEMES.options("xpos"):
        assert f"{option.name}={option.default!r}" in out
    assert "scale_base=512.0" in out and "num_buckets=32" in out and "d_bar=128" in out
    assert "width=8, distractors=4" in out  # the kv task's options
    assert set(ALL_SCHEMES) >= {
        "nope",
        "sinusoidal",
        "learned",
        "rope",
        "xpos",
        "alibi",
        "t5",
        "kerple_log",
        "kerple_power",
        "sandwich",
        "fire",
        "coca",
    }


def test_argument_errors_return_2_without_raising(capsys) -> None:
    assert main(["train", "--out", "x", "--scheme", "-:"]) == 2  # argparse reads "-:" as an option
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("lextra train: error: argument --scheme")
    assert main(["list", "--help"]) == 0


def test_list_prints_every_extension_method_with_its_options_and_derived_defaults(capsys) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert any(line.startswith("training-free extension methods") and "--extend" in line for line in lines)
    for name in EXTENSIONS.names():
        row = next(i for i, line in enumerate(lines) if line.split()[:1] == [name])
        method = EXTENSIONS.get(name)
        assert method.summary in lines[row] and "options:" in lines[row + 1]
        for option in EXTENSIONS.options(name):
            shown = method.derived_defaults[option.name] if option.default is None else repr(option.default)
            assert f"{option.name}={shown}" in lines[row + 1]
    assert "group=8, window=L/4, log_scale=False" in out and "chunk=3L/4, local=L/16" in out
