"""The command line: listings name every scheme and mask; user mistakes exit 2 with one line; one spelling per
concept (old ones hidden aliases), defaults and examples in every `--help`, `lextra train --config FILE`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import ALL_SCHEMES

from lextra.attention.masks import MASKS
from lextra.cli import main
from lextra.cli.app import build_parser, expand_aliases, leaf_commands
from lextra.cli.training_options import train_config_from
from lextra.extend import EXTENSIONS
from lextra.positions import SCHEMES
from lextra.tasks.retrieval import TASKS


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


def test_list_prints_every_position_sampler_with_its_options(capsys) -> None:
    from lextra.data.positions import SAMPLERS

    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("position samplers"))
    assert "--positions SPEC" in lines[title] and "lextra hf finetune" in lines[title]
    assert sorted(SAMPLERS.names()) == ["contiguous", "pose", "randomized"]
    for name in SAMPLERS.names():
        row = next(i for i, line in enumerate(lines) if i > title and line.split()[:1] == [name])
        assert SAMPLERS.get(name).summary in lines[row]
        assert lines[row + 1].split("options: ")[1] == SAMPLERS.describe(name)
    rows = {line.split()[0]: lines[i + 1].strip() for i, line in enumerate(lines[title + 1 : title + 10], title + 1)
            if line.startswith("  ") and not line.startswith("   ")}  # fmt: skip
    assert rows == {"contiguous": "options: no options", "pose": "options: target=16 x L_tr, chunks=2, span=1",
                    "randomized": "options: max=16 x L_tr"}  # fmt: skip
    assert "spec: pose[:TARGET][,key=value...] (target: int | None, chunks: int, span: int)" in "\n".join(lines)


# --- one spelling per concept, defaults and examples in --help ----------------------------------------------------
def _parse(argv: list[str]) -> dict:
    """The namespace `lextra ARGV` parses to (aliases expanded as `main` does), without running it."""
    args = vars(build_parser().parse_args(expand_aliases(argv)))
    return {k: v for k, v in args.items() if k != "handler"} | {"handler": args["handler"].__qualname__}


def _option_blocks(text: str) -> dict[str, str]:
    """`--help` text -> {first option string: its help text, whitespace collapsed}."""
    blocks: dict[str, str] = {}
    current = None
    for line in text.split("\nExamples:")[0].splitlines():
        match = re.match(r"^  (-[-\w]+)", line)
        if match:
            current = match.group(1)
            blocks[current] = line
        elif current and line.startswith("    "):
            blocks[current] += " " + line.strip()
        else:
            current = None
    return {k: " ".join(v.split()) for k, v in blocks.items()}


def test_every_command_help_shows_every_default_and_an_examples_epilog() -> None:
    hidden = {"--batch", "--eval-batch", "--eval-batch-size", "--temperatures", "--layers", "--width", "--heads"}
    hidden |= {"--tasks", "--task", "--eval-seed"}
    seen = set()
    for path, parser in leaf_commands(build_parser()):
        text = parser.format_help()
        examples = text.split("\nExamples:\n")[1].strip().splitlines()
        assert 1 <= len(examples) <= 2, path
        assert all(e.strip().startswith(f"lextra {path[0]}") or e.strip().startswith("lextra ") for e in examples)
        assert any(e.strip().startswith("lextra " + " ".join(path)) for e in examples), (path, examples)
        blocks = _option_blocks(text)
        for action in parser._actions:
            if not action.option_strings or action.nargs == 0 or action.required or action.dest == "help":
                continue
            block = blocks[action.option_strings[0]]
            assert "default" in block.lower(), (path, block)
            for alias in getattr(action, "hidden_aliases", ()):
                assert alias in hidden and not re.search(rf"{alias}\b(?!-)", text.split("\nExamples:")[0]), alias
                seen.add(alias)
    assert seen == hidden  # every old spelling is somewhere, and never shown


def test_training_defaults_in_help_are_the_config_dataclasses_values() -> None:
    from lextra.cli.training_options import TRAIN_FLAGS
    from lextra.model import GPTConfig
    from lextra.train import TrainConfig

    train, model = TrainConfig(), GPTConfig()
    assert train.steps == 600  # `lextra train` and `make run` (lextra compare) train 600 steps by default
    for path in (("train",), ("compare",), ("retrieval", "train"), ("retrieval", "compare")):
        parser = dict(leaf_commands(build_parser()))[path]
        blocks = _option_blocks(parser.format_help())
        for action in parser._actions:
            target = TRAIN_FLAGS.get(action.dest)
            if target is None or action.dest in ("scheme_option", "limit_chars", "init_from", "tensorboard", "log_dir"):
                continue
            holder, name = (model, target[6:]) if target.startswith("model.") else (train, target)
            assert f"(default: {getattr(holder, name)})" in blocks[action.option_strings[0]], (path, action.dest)


def test_every_training_flag_sets_a_config_field() -> None:
    from dataclasses import fields

    from lextra.cli.training_options import TRAIN_FLAGS
    from lextra.model import GPTConfig
    from lextra.train import TrainConfig

    train_fields = {f.name for f in fields(TrainConfig)}
    model_fields = {f.name for f in fields(GPTConfig)}
    for target in TRAIN_FLAGS.values():
        assert (target[6:] in model_fields) if target.startswith("model.") else (target in train_fields), target
    own = {"help", "out", "resume", "config", "device", "threads", "quiet", "task", "schemes", "init_from_compare"}
    own |= {"set"}  # --set KEY=VALUE sets any field by name
    own |= {"plans"}  # compare's --layer-plan LABEL=PLAN: models beside --schemes
    # compare's evaluation
    own |= {"lengths", "protocols", "stride", "documents", "span", "split", "backend", "temperature", "seeds"}
    own |= {"eval_precision"}  # compare's evaluation precision (EvalConfig.precision)
    # retrieval compare's evaluation
    own |= {"depths", "samples", "candidates", "eval_seed", "eval_batch_size", "answer_inside"}
    own |= {"task_lengths"}  # train's --task-lengths: it sets TrainConfig.task_lengths with --task
    own |= {"data"}  # train's prepared folder: it sets TrainConfig.data itself (compare and retrieval read corpora)
    own |= {"rope_scaling"}  # the scheme option `scaling`, which `train_config_from` sets after --scheme-option
    for path in (("train",), ("compare",), ("retrieval", "train"), ("retrieval", "compare")):
        parser = dict(leaf_commands(build_parser()))[path]
        dests = {a.dest for a in parser._actions} - own
        assert dests and dests <= set(TRAIN_FLAGS), (path, dests - set(TRAIN_FLAGS))
    # the model's scheme, its options and its layer plan are what compare's --schemes varies
    assert set(TRAIN_FLAGS) - {"scheme", "scheme_option", "layer_plan"} <= {
        a.dest for a in dict(leaf_commands(build_parser()))[("compare",)]._actions
    }


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (["ruler", "M", "--out", "o", "--batch", "3"], ["ruler", "run", "M", "--out", "o", "--batch-size", "3"]),
        (["ruler", "M", "--out", "o", "--task", "vt"], ["ruler", "run", "M", "--out", "o", "--tasks", "vt"]),
        (["ruler-compare", "a", "b", "--out", "c"], ["ruler", "compare", "a", "b", "--out", "c"]),
        (["retrieval", "eval", "M", "--eval-batch", "3"], ["retrieval", "eval", "M", "--batch-size", "3"]),
        (["retrieval", "eval", "M", "--eval-batch-size", "3"], ["retrieval", "eval", "M", "--batch-size", "3"]),
        (["retrieval", "eval", "M", "--tasks", "kv"], ["retrieval", "eval", "M", "--task", "kv"]),
        (
            ["retrieval", "compare", "--out", "o", "--eval-batch", "3", "--batch-size", "5"],
            ["retrieval", "compare", "--out", "o", "--eval-batch-size", "3", "--batch-size", "5"],
        ),
        (
            ["train", "--out", "o", "--layers", "2", "--width", "32", "--heads", "2"],
            ["train", "--out", "o", "--n-layer", "2", "--d-model", "32", "--n-head", "2"],
        ),
        (["compare", "--out", "o", "--width", "64"], ["compare", "--out", "o", "--d-model", "64"]),
    ],
)
def test_old_spellings_parse_to_the_same_values(old: list[str], new: list[str]) -> None:
    assert _parse(old) == _parse(new)


def test_temperatures_file_is_an_alias_and_a_missing_file_or_wrong_word_is_one_line(tmp_path, capsys) -> None:
    align = tmp_path / "alignment.json"
    align.write_text('{"temperatures": [[1.0]], "strategy": "pmax"}')
    for command in (["ruler", "M", "--out", "o"], ["eval", "M"], ["analyze", "dispersion", "M", "--out", "o"]):
        old = _parse([*command, "--temperatures", str(align)])
        assert old == _parse([*command, "--temperature", str(align)]) and old["temperature"] == str(align)
    assert _parse(["eval", "M", "--temperature", "log-length"])["temperature"] == "log-length"
    assert main(["eval", "M", "--temperature", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "argument --temperature" in err[0] and "no file" in err[0] and "log-length" in err[0]
    assert main(["compare", "--out", str(tmp_path / "c"), "--temperature", str(align)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "must be one of none, log-length, got" in err[0]
    assert main(["ruler", "M", "--out", "o", "--temperature", "log-length"]) == 2  # ruler takes none or FILE
    assert "no file 'log-length'" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["ruler", "M", "--out", "{o}", "--threshold", "0.856"], "a fraction? write 85.6 for 0.856"),
        (["ruler", "M", "--out", "{o}", "--threshold", "101"], "is a percentage in [0, 100], got '101'"),
        (["ruler", "M", "--out", "{o}", "--threshold", "-5"], "is a percentage in [0, 100]"),
        (["analyze", "receptive-field", "M", "--out", "{o}", "--threshold", "0.99"], "write 99 for 0.99"),
        (["analyze", "receptive-field", "M", "--out", "{o}", "--threshold", "0"], "is a percentage in (0, 100]"),
        (["analyze", "receptive-field", "M", "--out", "{o}", "--threshold", "1"], "a fraction? write 100 for 1"),
    ],
)
def test_thresholds_are_percentages_and_fractions_are_refused_naming_the_unit(tmp_path, capsys, argv, needle):
    out = tmp_path / "out"
    assert main([a.replace("{o}", str(out)) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "argument --threshold" in err[0] and needle in err[0], err
    assert not out.exists()
    assert _parse(["ruler", "M", "--out", "o", "--threshold", "0"])["threshold"] == 0.0
    assert _parse(["analyze", "receptive-field", "M", "--out", "o"])["threshold"] == 99.0


def test_bare_group_words_reach_help_and_subcommand_names_are_not_taken_as_models() -> None:
    assert expand_aliases(["ruler", "--help"]) == ["ruler", "--help"]
    assert expand_aliases(["ruler", "compare", "a"]) == ["ruler", "compare", "a"]
    assert expand_aliases(["ruler", "run", "compare"]) == ["ruler", "run", "compare"]
    assert expand_aliases(["ruler", "smollm2", "--out", "o"]) == ["ruler", "run", "smollm2", "--out", "o"]
    assert expand_aliases(["retrieval", "runs/x"]) == ["retrieval", "runs/x"]  # no default: argparse refuses it
    assert expand_aliases(["train", "--out", "ruler"]) == ["train", "--out", "ruler"]


# --- lextra train --config FILE -----------------------------------------------------------------------------------
RUN_TOML = """
corpus = "python-code"
limit_chars = 300000
steps = 3
batch_size = 2
warmup = 1
seed = 5
checkpoint_every = 2

[model]
n_layer = 1
n_head = 2
d_model = 16
train_len = 16
scheme = "alibi"
scheme_options = {slope_shift = 1.0}
"""


def test_train_config_file_is_read_and_every_flag_given_overrides_it(tmp_path, capsys) -> None:
    config = tmp_path / "run.toml"
    config.write_text(RUN_TOML)
    out = tmp_path / "run"
    argv = ["train", "--config", str(config), "--out", str(out), "--steps", "2", "--d-model", "32", "--seed", "0"]
    assert main([*argv, "--threads", "1", "--device", "cpu"]) == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train_loss, val_loss = records[-1]["loss"], next(r["val_loss"] for r in reversed(records) if "val_loss" in r)
    printed = f"final train loss {train_loss:.4f}, validation loss {val_loss:.4f}\nmodel saved to {out / 'model'}"
    assert printed in capsys.readouterr().out  # the run's last losses, then where its model is
    saved = json.loads((out / "config.json").read_text())["train"]
    assert saved["steps"] == 2 and saved["seed"] == 0  # flags win, also one equal to the default
    assert saved["batch_size"] == 2 and saved["warmup"] == 1 and saved["limit_chars"] == 300000  # from the file
    assert saved["checkpoint_every"] == 2 and saved["lr"] == 2e-3  # file, then TrainConfig's default
    model = saved["model"]
    assert (model["n_layer"], model["n_head"], model["d_model"], model["train_len"]) == (1, 2, 32, 16)
    assert model["layer_plan"] == "alibi,slope_shift=1.0"
    # the same file as a study's [train] section; --scheme-option replaces the file's value of that option
    study_style = tmp_path / "study-style.toml"
    study_style.write_text("[train]\n" + RUN_TOML.replace("[model]", "[train.model]"))
    argv = ["train", "--config", str(study_style), "--out", "x", "--scheme-option", "slope_shift=2"]
    resolved = train_config_from(build_parser().parse_args(argv))
    assert resolved.steps == 3 and resolved.model.d_model == 16 and resolved.model.plan()[0].scheme == "alibi"
    assert resolved.model.plan()[0].scheme_options == {"slope_shift": 2}
    # a whole study file: its [train] section, the study's own keys left to the study
    hybrids = Path(__file__).parents[1] / "experiments" / "hybrids.toml"
    argv = ["train", "--config", str(hybrids), "--out", "x", "--layer-plan", "rope+sinks", "--steps", "7"]
    resolved = train_config_from(build_parser().parse_args(argv))
    assert (resolved.steps, resolved.batch_size, resolved.lr, resolved.checkpoint_every) == (7, 16, 2e-3, 80)
    assert (resolved.model.d_model, resolved.model.layer_plan) == (128, "rope+sinks")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("stepz = 3\n", "unknown field(s) stepz; known: batch_size"),
        ("[model]\nwidht = 3\n", "model config: unknown field(s) widht; known: abacus, d_model"),
        ("steps = 3\n[model\n", "is not valid TOML"),
        ("steps = 0\n", "steps"),
    ],
)
def test_a_bad_config_file_is_one_line_naming_the_file_and_the_key(tmp_path, capsys, text, needle) -> None:
    config = tmp_path / "run.toml"
    config.write_text(text)
    out = tmp_path / "run"
    assert main(["train", "--config", str(config), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lextra train: error: ") and needle in err[0], err
    if needle != "steps":
        assert f"--config {config}" in err[0]
    assert not out.exists()
    assert main(["train", "--config", str(tmp_path / "missing.toml"), "--out", str(out)]) == 2
    assert "missing.toml: cannot read it" in capsys.readouterr().err


def test_every_help_example_is_a_command_line_the_parser_accepts(tmp_path, monkeypatch) -> None:
    import shlex

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "hf" / "align-8k").mkdir(parents=True)
    (tmp_path / "runs" / "hf" / "align-8k" / "alignment.json").write_text("{}")
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "train.toml").write_text("")
    parser = build_parser()
    for _path, leaf in leaf_commands(parser):
        for example in leaf.epilog.split("Examples:\n")[1].strip().splitlines():
            words = shlex.split(example.split("|")[0])
            assert words[0] == "lextra", example
            args = parser.parse_args(expand_aliases(words[1:]))
            assert args.command_path.split()[0] == words[1], example


def test_the_example_train_config_holds_the_defaults() -> None:
    from pathlib import Path

    from lextra.cli.training_options import read_train_file
    from lextra.train import TrainConfig

    example = Path(__file__).parents[1] / "experiments" / "train.toml"
    assert read_train_file(example).validate().to_dict() == TrainConfig().validate().to_dict()


def test_a_reader_that_leaves_early_ends_the_command_quietly() -> None:
    """`lextra list | head -1`: the closed pipe ends the command with exit 0 and no traceback (a one-page pipe, so
    that the listing cannot fit in it before the reader leaves)."""
    import fcntl
    import os
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    command = [sys.executable, "-m", "lextra", "list"]
    with subprocess.Popen(command, stdout=write_end, stderr=subprocess.PIPE) as process:
        os.close(write_end)
        first = os.read(read_end, 40)
        os.close(read_end)
        code = process.wait(timeout=120)
        err = process.stderr.read().decode() if process.stderr else ""
    assert first.startswith(b"every spec reads") and code == 0 and err == ""


def test_help_and_list_import_neither_torch_nor_the_library(tmp_path) -> None:
    """`lextra --help` and `lextra list` (its cached text after a first run) stay light: no torch, numpy or
    transformers, under 0.5 s of CPU time in the process (the interpreter's own start aside; CPU, not wall, time so
    that other processes on the machine do not count; the least of 3 runs)."""
    import json
    import os
    import subprocess
    import sys

    code = (
        "import json, sys, time\nstart = time.process_time()\nfrom lextra.cli import main\n"
        "main(sys.argv[1:])\n"
        "heavy = sorted(m for m in ('torch', 'numpy', 'transformers') if m in sys.modules)\n"
        "print(json.dumps({'heavy': heavy, 'seconds': time.process_time() - start}))"
    )
    env = {**os.environ, "LEXTRA_CACHE": str(tmp_path)}
    env.pop("LEXTRA_PLUGINS", None)

    def run(*argv: str) -> tuple[list[str], dict]:
        done = subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True, text=True, check=True)
        lines = done.stdout.strip().splitlines()
        return lines[:-1], json.loads(lines[-1])

    def least_of_3(*argv: str) -> tuple[list[str], dict]:
        """The first run's output; the modules any of 3 runs imported and the least CPU time of them."""
        runs = [run(*argv) for _ in range(3)]
        heavy = sorted({m for _, r in runs for m in r["heavy"]})
        return runs[0][0], {"heavy": heavy, "seconds": min(r["seconds"] for _, r in runs)}

    generated, first = run("list")  # the first run builds the registries and caches the text
    assert "torch" in first["heavy"] and list((tmp_path / "catalog").glob("*.txt"))
    cached, measured = least_of_3("list")
    assert cached == generated and any(line.startswith("  rope ") for line in cached)
    assert not measured["heavy"] and measured["seconds"] < 0.5, measured
    for argv in (["--help"], ["retrieval", "--help"]):
        _, measured = least_of_3(*argv)
        assert not measured["heavy"] and measured["seconds"] < 0.5, (argv, measured)


def test_threads_must_be_positive(capsys) -> None:
    for value in ("0", "-2"):
        assert main(["tasks", "eval", "nowhere", "--threads", value]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert "--threads" in err[-1] and value in err[-1]


def test_an_unknown_flag_points_to_its_commands_help(capsys) -> None:
    for argv, prog in (
        (["eval", "run", "--bogus"], "lextra eval"),
        (["ruler", "run", "m", "--out", "o", "-z"], "lextra ruler run"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"{prog}: error: unrecognized arguments: {argv[-1]} (see `{prog} --help`)"]


@pytest.mark.slow
def test_help_is_printed_from_the_cache_without_importing_torch(tmp_path) -> None:
    import os
    import subprocess
    import sys

    probe = (
        "import contextlib, io, sys\n"
        "from lextra.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    code = main(['eval', '--help'])\n"
        "print(code, 'torch' in sys.modules, len(out.getvalue()), hash(out.getvalue()))\n"
    )
    env = {**os.environ, "LEXTRA_CACHE": str(tmp_path), "PYTHONHASHSEED": "0"}
    env.pop("LEXTRA_PLUGINS", None)
    run = lambda: subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)  # noqa: E731
    first, second = run().stdout.split(), run().stdout.split()
    assert first[:2] == ["0", "True"]  # generated: the parser imports the library
    assert second[:2] == ["0", "False"] and second[2:] == first[2:]  # the same text, no torch
    assert len(list((tmp_path / "help").glob("*.txt"))) == 1


def test_list_prints_abacus_beside_the_content_dependent_pieces_and_schemes(capsys) -> None:
    """Issue 46's five: FoX, stick-breaking and differential attention as pieces, CoPE as a scheme, Abacus as the
    model's digit embeddings with its defaults."""
    from lextra.positions.abacus import ABACUS_MAX_K, ABACUS_POSITIONS

    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = {line.split()[0] for line in lines if line.startswith("  ") and line.split()}
    assert {"fox", "stickbreak", "diffattn", "cope", "abacus"} <= names
    row = next(i for i, line in enumerate(lines) if line.split()[:1] == ["abacus"])
    assert "--abacus MAX_K" in lines[row - 1]
    assert f"max_k={ABACUS_MAX_K}, positions={ABACUS_POSITIONS}" in lines[row + 1]
