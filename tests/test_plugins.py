"""Plugins: a scheme, mask, RoPE scaling, attention piece, extension method, retrieval task and RULER task defined
outside the package (tests/plugins/lextra_toy.py, the worked examples of docs/extending.md) are listed by `lextra list`,
named in the generated help and usable by their specs from the command line, in fresh interpreters."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import lextra

PLUGIN = Path(__file__).parent / "plugins" / "lextra_toy.py"
SRC = Path(lextra.__file__).parent.parent
TINY = ["--layers", "1", "--width", "32", "--heads", "2", "--train-len", "32", "--limit-chars", "60000"]
TINY += ["--batch-size", "2", "--steps", "2", "--warmup", "1", "--threads", "1", "--device", "cpu"]


def _env(plugins: str | None = str(PLUGIN)) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "COLUMNS": "10000"}
    env.pop("LEXTRA_PLUGINS", None)
    if plugins is not None:
        env["LEXTRA_PLUGINS"] = plugins
    return env


def _run(args: list[str], env: dict[str, str] | None = None, code: int = 0) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, *args], env=env or _env(), capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == code, result.stderr
    return result


def _lextra(*args: str, env: dict[str, str] | None = None, code: int = 0) -> subprocess.CompletedProcess:
    return _run(["-m", "lextra", *args], env, code)


def _python(code: str, env: dict[str, str] | None = None) -> dict:
    return json.loads(_run(["-c", code], env).stdout.strip().splitlines()[-1])


EACH = """
import json, sys
from lextra.cli import main
for argv in json.loads(sys.argv[1]):
    assert main(argv) == 0, argv
"""


def _lextra_each(*commands: list[str]) -> None:
    """`lextra COMMAND` for each of `commands` in turn, all in one fresh interpreter (torch is imported once),
    each expected to succeed."""
    _run(["-c", EACH, json.dumps(commands)])


def test_list_shows_every_plugin_class_with_its_options() -> None:
    out = _lextra("list").stdout.splitlines()
    expected = {
        "toy_bias": ("options: slope=0.5", "spec: toy_bias[,key=value...] (slope: float)"),
        "stride": ("options: step=2", "spec: stride[:STEP][,key=value...] (step: int)"),
        "sqrt_pi": ("options: factor=1.0", "spec: sqrt_pi[:FACTOR][,key=value...] (factor: float)"),
        "toy_qscale": ("options: factor=2.0", "spec: toy_qscale[:FACTOR][,key=value...] (factor: float)"),
        "clip": ("options: cap=L/2", "spec: clip[,key=value...] (cap: int | None)"),
        "toy-key": ("options: digits=5, distractors=4, ends=0.0", "spec: toy-key[,key=value...]"),
        "niah_pair": ("options: digits=7, budget=128", "spec: niah_pair[,key=value...]"),
    }
    for name, (options, spec) in expected.items():
        row = next(i for i, line in enumerate(out) if line.split()[:1] == [name])
        assert "toy:" in out[row]
        assert out[row + 1].strip() == options and out[row + 2].strip().startswith(spec)
    # without the plugin none of them exists; `--plugin FILE` loads it as the variable does
    plain = _lextra("list", env=_env(None)).stdout
    assert not any(f"  {name} " in plain for name in expected)
    assert "toy_bias" in _lextra("--plugin", str(PLUGIN), "list", env=_env(None)).stdout
    missing = _lextra("--plugin", "no/such/plugin.py", "list", env=_env(None), code=2)
    assert "plugin 'no/such/plugin.py': no such file" in missing.stderr


def test_generated_help_names_the_plugin_classes() -> None:
    helps = _python(
        "import json; from lextra.cli.app import leaf_commands\n"
        "print(json.dumps({' '.join(p): parser.format_help() for p, parser in leaf_commands()}))"
    )
    flat = {path: " ".join(text.split()) for path, text in helps.items()}  # COLUMNS: no line breaks in names
    assert "toy_bias" in flat["train"] and "stride[:STEP]" in flat["eval"]
    assert "sqrt_pi" in flat["eval"] and "clip" in flat["eval"]
    assert "toy-key" in flat["retrieval train"]
    assert any("niah_pair" in text for path, text in flat.items() if "ruler" in path)
    # the help of the same commands without the plugin does not list them
    plain = _python(
        "import json; from lextra.cli.app import leaf_commands\n"
        "print(json.dumps({' '.join(p): parser.format_help() for p, parser in leaf_commands()}))",
        env=_env(None),
    )
    plain_eval = " ".join(plain["eval"].split())
    assert "stride[:STEP]" not in plain_eval and "sqrt_pi" not in plain_eval and "window[:WIDTH]" in plain_eval


def test_plugin_classes_compute_what_they_declare() -> None:
    values = _python(
        """
import json, math, os, torch
from lextra.registry import load_plugins
load_plugins(os.environ["LEXTRA_PLUGINS"])
from lextra.attention import build_mask
from lextra.extend import build_extension
from lextra.positions import HeadDims, build_scheme
from lextra.positions.scaling import RopeScaling, frequencies, parse_rope_scaling, rope_inv_freq
from lextra.positions.scaling_hf import to_hf
mask = build_mask("stride:3")
pos = torch.arange(7)
scheme = build_scheme("toy_bias,slope=0.25", HeadDims(2, 8, 16, 32))
bias = scheme.bias(pos, pos)
inv, att = frequencies(RopeScaling(**parse_rope_scaling("sqrt_pi:4")), 16)
clip = build_extension("clip,cap=3", 32)
from lextra.data.tokenizers import ByteTokenizer
from lextra.tasks.retrieval import build_task
from lextra.tasks.registry import parse_task_spec
from lextra.tasks.ruler import build_ruler_task
import random
pair = build_ruler_task("niah_pair", ByteTokenizer()).sample(1500, 0)
key = build_task("toy-key", ByteTokenizer()).sample(40, 0.5, random.Random(0))
d, visible = clip.remap(torch.tensor([9]), torch.arange(10))
from lextra.attention import attention
rope = build_scheme("rope", HeadDims(2, 16, 32, 32))
gen = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, 2, 100, 16, generator=gen) for _ in range(3))
with torch.no_grad():
    ref = attention(q, k, v, scheme=rope, extension=clip, backend="reference")
    tiled = [attention(q, k, v, scheme=rope, extension=clip, backend="tiled", block_size=b) for b in (7, None)]
    errors = [(out - ref).abs().max() for out in tiled]
    fast_error = float(max(errors))
try:
    to_hf(RopeScaling("sqrt_pi", factor=4))
    hf = "no error"
except Exception as err:
    hf = str(err)
print(json.dumps({
    "allowed": mask.allowed(pos, pos).int().tolist(),
    "window_default": build_mask("stride").step,
    "bias": bias[1].tolist(), "heads_equal": bool(torch.equal(bias[0], bias[1])),
    "inv": bool(torch.equal(inv, rope_inv_freq(16) / 2)), "att": att,
    "fast_error": fast_error, "clip": d.tolist(), "visible": visible.tolist(),
    "clip_default": build_extension("clip", 32).cap,
    "hf": hf,
    "pair": [len(pair.prompt_ids), len(pair.references), len(pair.needle_spans), pair.text.count(" is: ")],
    "pair_found": all(r in pair.text for r in pair.references),
    "key": [len(key.prompt_ids), key.prompt_text.count("Key" + key.answer_text + ". ")],
    "spec": [parse_task_spec("toy-key:0.25,digits=3").ratio, parse_task_spec("toy-key:0.25,digits=3").options],
}))
"""
    )
    assert values["allowed"] == [[int(q - k >= 0 and (q - k) % 3 == 0) for k in range(7)] for q in range(7)]
    assert values["window_default"] == 2
    assert values["bias"] == [[-0.25 * abs(q - k) for k in range(7)] for q in range(7)] and values["heads_equal"]
    assert values["inv"] and values["att"] == 1.0
    assert values["clip"] == [3.0] * 7 + [2.0, 1.0, 0.0] and all(values["visible"]) and values["clip_default"] == 16
    assert "'sqrt_pi' has no Hugging Face rope_type" in values["hf"]
    assert values["fast_error"] < 1e-5  # the method's passes reproduce its formula
    assert values["pair"] == [1500, 2, 2, 2] and values["pair_found"]  # two needles, both asked
    assert values["key"] == [40, 1] and values["spec"] == [0.25, {"digits": 3}]


def test_a_plugin_piece_trains_in_a_plan_and_acts_in_every_backend(tmp_path: Path) -> None:
    """`rope;rope+toy_qscale:3` trained from the command line is the plain two-layer model whose second layer's
    query projection is three times larger, in every backend: the piece is built through its registry and applied
    through its hook, like the built-in pieces."""
    run = tmp_path / "run"
    errors = _python(
        f"""
import dataclasses, json, os, torch
from lextra.registry import load_plugins
load_plugins(os.environ["LEXTRA_PLUGINS"])
from lextra.cli import main
from lextra.model import GPT, load_model
argv = {TINY!r}
argv[argv.index("--layers") + 1] = "2"
assert main(["train", "--out", {str(run)!r}, "--layer-plan", "rope;rope+toy_qscale:3", *argv]) == 0
model = load_model({str(run / "model")!r}).eval()
plain = GPT(dataclasses.replace(model.config, layer_plan="rope;rope")).eval()
plain.load_state_dict(model.state_dict())
with torch.no_grad():
    plain.blocks[1].attn.q_proj.weight.mul_(3.0)
    tokens = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(0))
    scaled = {{b: float((model(tokens, backend=b) - plain(tokens, backend=b)).abs().max())
              for b in ("reference", "sdpa", "chunked", "flex")}}
    unscaled = plain.blocks[1].attn.q_proj.weight.div_(3.0)
    moved = float((model(tokens, backend="reference") - plain(tokens, backend="reference")).abs().max())
print(json.dumps({{"pieces": model.blocks[1].attn.piece_names, "first": model.blocks[0].attn.piece_names,
                  "factor": model.blocks[1].attn.toy_qscale.factor, "scaled": scaled, "moved": moved}}))
"""
    )
    assert errors["pieces"] == ["toy_qscale"] and errors["first"] == [] and errors["factor"] == 3.0
    assert all(error < 1e-5 for error in errors["scaled"].values()), errors["scaled"]
    assert errors["moved"] > 100 * max(errors["scaled"].values())  # without the factor they differ: the piece acts


@pytest.mark.slow
def test_a_tiny_run_uses_every_plugin_class_by_its_spec(tmp_path: Path) -> None:
    toy, rope, task = tmp_path / "toy", tmp_path / "rope", tmp_path / "task"
    args = ["--rope-scaling", "sqrt_pi:4", "--extend", "clip,cap=8", "--lengths", "64", "--documents", "1"]
    retrieval = ["--lengths", "48", "--depths", "0.5", "--samples", "2", "--candidates", "3", "--quiet"]
    _lextra_each(
        ["train", "--out", str(toy), "--scheme", "toy_bias,slope=0.25", *TINY],
        ["eval", str(toy), "--mask", "stride:3", "--lengths", "32,64", "--documents", "1", "--threads", "1"],
        ["train", "--out", str(rope), "--scheme", "rope", *TINY],
        ["eval", str(rope), *args, "--threads", "1", "--out", str(tmp_path / "stretched")],
        ["eval", str(rope), *args[4:], "--threads", "1", "--out", str(tmp_path / "plain")],
        ["retrieval", "train", "--out", str(task), "--task", "toy-key:0.5", "--scheme", "toy_bias", *TINY],
        ["retrieval", "eval", str(task), "--task", "toy-key", *retrieval, "--threads", "1", "--device", "cpu"],
    )
    saved = json.loads((toy / "model" / "config.json").read_text())
    model = saved.get("model", saved)
    assert model["layer_plan"] == "toy_bias,slope=0.25"
    assert json.loads((toy / "eval-stride-3" / "results.json").read_text())["eval"]["mask"] == "stride:3"
    # the trained model under the plugin mask: a key at distance 1 is hidden, one at distance 3 is seen
    hidden = _python(
        f"""
import json, os, torch
from lextra.registry import load_plugins
load_plugins(os.environ["LEXTRA_PLUGINS"])
from lextra.model import load_model
model = load_model({str(toy / "model")!r})
tokens = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(0))
def last(t):
    with torch.no_grad():
        return model(t, mask="stride:3", backend="reference")[0, -1]
base = last(tokens)
near, far = tokens.clone(), tokens.clone()
near[0, 14] = (near[0, 14] + 1) % 256
far[0, 12] = (far[0, 12] + 1) % 256
print(json.dumps({{"near": bool(torch.equal(last(near), base)), "far": bool(torch.equal(last(far), base))}}))
"""
    )
    assert hidden == {"near": True, "far": False}

    assert "| rope+sqrt_pi:4+clip,cap=8 |" in (tmp_path / "stretched" / "table.md").read_text()
    stretched, plain = (
        json.loads((tmp_path / p / "results.json").read_text())["results"] for p in ("stretched", "plain")
    )
    assert stretched["chunks"]["64"]["tokens"] == plain["chunks"]["64"]["tokens"]
    assert stretched["chunks"]["64"]["nll"] != plain["chunks"]["64"]["nll"]  # the scaling and the method both act

    assert json.loads((task / "config.json").read_text())["train"]["task"] == "toy-key:0.5"
    result = json.loads((task / "retrieval-toy-key" / "results.json").read_text())
    assert result["task"] == "toy-key" and result["cells"]["48"]["0.5"]["samples"] == 2
    assert all(len(e["answer"]) == 6 for e in result["cells"]["48"]["0.5"]["examples"])  # " " + 5 digits


def test_docs_show_the_plugin_code() -> None:
    """docs/extending.md's worked examples are the classes this file runs, verbatim."""
    doc = (Path(__file__).parent.parent / "docs" / "extending.md").read_text()
    source = PLUGIN.read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", doc, flags=re.S) if b.lstrip().startswith("@")]
    assert len(blocks) == 8
    for block in blocks:
        assert block.strip() in source


def test_only_a_top_level_plugin_flag_loads_a_plugin(capsys) -> None:
    from lextra.cli import main

    # after the command, --plugin is that command's argument (here a bad --scheme value), not a plugin to import
    assert main(["train", "--out", "x", "--scheme", "--plugin", "--width", "16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("lextra train: error: argument --scheme: expected one argument")
    assert main(["--plugin", "no_such_lextra_plugin_module", "list"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "lextra: error: plugin 'no_such_lextra_plugin_module': cannot import it (No module named "
        "'no_such_lextra_plugin_module'); check the name or PYTHONPATH"
    ]


def test_a_model_saved_with_a_plugin_scheme_names_the_plugin_flag_when_loaded_without_it(tmp_path: Path) -> None:
    folder = tmp_path / "toy"
    # saved with the plugin, and with it the saved model loads (and evaluates), in one interpreter
    assert _python(
        "import json, os\nfrom lextra.registry import load_plugins\nload_plugins(os.environ['LEXTRA_PLUGINS'])\n"
        "from lextra.cli import main\nfrom lextra.model import GPT, GPTConfig, save_model\n"
        "config = GPTConfig(vocab_size=256, n_layer=1, d_model=32, n_head=2, train_len=16, layer_plan='toy_bias')\n"
        f"save_model(GPT(config), {str(folder)!r})\n"
        f"argv = ['eval', {str(folder)!r}, '--lengths', '16', '--documents', '1', '--threads', '1', '--out', "
        f"{str(tmp_path / 'e')!r}]\nprint(json.dumps({{'code': main(argv)}}))"
    ) == {"code": 0}
    failed = _lextra("eval", str(folder), "--lengths", "16", "--documents", "1", env=_env(None), code=2)
    line = failed.stderr.strip()
    assert "\n" not in line and "unknown position scheme 'toy_bias'" in line
    assert "pass `lextra --plugin FILE` or set LEXTRA_PLUGINS=FILE" in line


def test_scheme_options_from_the_command_line_are_typed_by_the_plugin_class() -> None:
    values = _python(
        "import json\nfrom lextra.registry import load_env_plugins\nload_env_plugins()\n"
        "from lextra.cli.options import scheme_options\n"
        "try:\n    scheme_options('toy_bias', ['slope=nan'])\n    error = ''\n"
        "except Exception as err:\n    error = f'{type(err).__name__}: {err}'\n"
        "print(json.dumps({'typed': scheme_options('toy_bias', ['slope=0.25']), 'error': error}))"
    )
    assert values["typed"] == {"slope": 0.25}
    assert values["error"].startswith("ConfigError: position scheme 'toy_bias': slope takes a number")


def test_a_scaling_type_declares_a_parameter_of_its_own(tmp_path: Path) -> None:
    """The plugin's `power_pi` declares `alpha`, a parameter no other type has: parsed, typed and checked from
    its spec, applied at inference, trained with, saved and loaded back with the same frequencies."""
    values = _python(
        f"""
import json, os, torch
from lextra.registry import load_env_plugins
load_env_plugins()
from lextra.extend import InferenceSetup
from lextra.attention.plan import parse_variant
from lextra.model import GPT, GPTConfig, load_model, save_model
from lextra.positions.scaling import SCALING_TYPES, RopeScaling, parse_rope_scaling, rope_inv_freq
from lextra.registry import format_spec
spec = parse_rope_scaling("power_pi:4,alpha=0.25")
scaling = RopeScaling(**spec)
errors = []
for bad in ("power_pi:4,alpha=2", "power_pi:4,alpha=x", "power_pi:4,beta=1"):
    try:
        RopeScaling(**parse_rope_scaling(bad))
    except Exception as err:
        errors.append(str(err))
config = GPTConfig(vocab_size=256, n_layer=1, d_model=32, n_head=2, train_len=16, layer_plan="rope")
model = InferenceSetup(rope_scaling="power_pi:4,alpha=0.25").apply(GPT(config))
applied = model.schemes[0].inv_freq
trained = GPT(GPTConfig(vocab_size=256, n_layer=1, d_model=32, n_head=2, train_len=16,
                        layer_plan=format_spec("rope", {{"scaling": spec}})))
save_model(trained, {str(tmp_path / "m")!r})
loaded = load_model({str(tmp_path / "m")!r}).schemes[0]
expected = rope_inv_freq(16) / 4**0.25
print(json.dumps({{
    "spec": spec, "alpha": scaling["alpha"], "dict": dict(scaling), "errors": errors,
    "options": SCALING_TYPES.describe("power_pi"),
    "applied": bool(torch.equal(applied, expected)),
    "saved": parse_variant(json.load(open({str(tmp_path / "m" / "config.json")!r}))["model"]["layer_plan"])
    .scheme_options,
    "loaded": bool(torch.equal(loaded.inv_freq, expected)) and loaded.scaling == scaling,
}}))
"""
    )
    assert values["spec"] == {"rope_type": "power_pi", "factor": 4.0, "alpha": 0.25} and values["alpha"] == 0.25
    assert values["dict"] == values["spec"] and values["options"] == "factor=1.0, alpha=0.5"
    assert "alpha must be" in values["errors"][0] and "alpha takes a number" in values["errors"][1]
    assert "has no option 'beta'; its options: factor, alpha" in values["errors"][2]
    assert values["applied"] and values["loaded"]
    saved = values["saved"]
    assert saved["scaling"] == {"rope_type": "power_pi", "factor": 4.0, "alpha": 0.25}


def test_a_plugin_file_that_is_not_python_is_one_line(tmp_path: Path) -> None:
    from lextra.errors import ConfigError
    from lextra.registry import load_plugins

    notes = tmp_path / "notes.txt"
    notes.write_text("not a module\n")
    with pytest.raises(ConfigError) as err:
        load_plugins(str(notes))
    assert str(err.value) == f"plugin {str(notes)!r}: {notes} is not a Python file; give a .py file"
