"""bf16 evaluation (`--eval-precision`): close to fp32, positions and biases kept fp32, `auto` by the hardware, the
precision recorded where results go, bad values refused in one line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from test_hf import _corpus, tiny_causal
from torch.utils._python_dispatch import TorchDispatchMode

from lextra.cli import main
from lextra.data.prepare import prepare_data
from lextra.devices import resolve_precision
from lextra.errors import ConfigError
from lextra.evaluate import EvalConfig, evaluate_model
from lextra.model import GPT, GPTConfig
from lextra.pipelines.study.config import parse_study
from lextra.positions import rotary

#: bf16 keeps 8 significant bits: each rounding is off by at most u = 2^-9 relative
UNIT_ROUNDOFF = 2.0**-9
LAYERS = 2
#: a block rounds the inputs of four products (q/k/v, output, two MLP layers); the errors of the layers add up in
#: the features at most linearly, and a mean NLL moves by no more than its logits do, relatively
NLL_TOLERANCE = LAYERS * 4 * UNIT_ROUNDOFF
SETTINGS = {"lengths": [16, 64], "protocols": ["chunks", "last-token"], "documents": 2, "last_token_targets": 2}


def tiny(scheme: str) -> GPT:
    return GPT(GPTConfig(n_layer=LAYERS, n_head=2, d_model=32, train_len=16, layer_plan=scheme)).eval()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return prepare_data(_corpus(tmp_path_factory.mktemp("text")))


class KernelDtypes(TorchDispatchMode):
    """The dtypes of every fused attention call's tensors (q, k, v[, mask]) as the kernel receives them."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[torch.dtype]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if "scaled_dot_product" in str(func):
            tensors = [a for a in [*args, *kwargs.values()] if isinstance(a, torch.Tensor)]
            self.calls.append([t.dtype for t in tensors])
        return func(*args, **kwargs)


@pytest.mark.parametrize("scheme", ["rope", "alibi", "t5", "kerple_log", "fire", "xpos"])
def test_bf16_perplexity_is_fp32_within_bf16_rounding(scheme: str, data) -> None:
    model = tiny(scheme)
    fp32 = evaluate_model(model, data, EvalConfig(**SETTINGS), progress=False)
    with KernelDtypes() as seen:
        bf16 = evaluate_model(model, data, EvalConfig(precision="bf16", **SETTINGS), progress=False)
    assert fp32.precision == "fp32" and bf16.precision == "bf16"
    assert seen.calls
    if model.schemes[0].has_bias:  # the bias reached the kernel in fp32 beside bf16 q, k, v
        assert all(dtypes == [torch.bfloat16] * 3 + [torch.float32] for dtypes in seen.calls)
    else:  # the unmasked CPU call at head dim 16 runs in fp32 (`fp32_kernel`)
        assert all(dtypes == [torch.float32] * 3 for dtypes in seen.calls)
    differs = False
    for protocol in SETTINGS["protocols"]:
        for n in SETTINGS["lengths"]:
            a, b = fp32.point(protocol, n), bf16.point(protocol, n)
            assert b.tokens == a.tokens and torch.isfinite(torch.tensor(b.nll))
            assert b.nll == pytest.approx(a.nll, rel=NLL_TOLERANCE)
            differs |= b.nll != a.nll
    assert differs  # bf16 did change the arithmetic


def test_rotary_angles_stay_fp32_under_bf16(data, monkeypatch) -> None:
    seen: list[tuple[torch.dtype, torch.dtype]] = []
    original = rotary.rotary_angles

    def recording(positions, inv_freq):
        cos, sin = original(positions, inv_freq)
        seen.append((cos.dtype, sin.dtype))
        return cos, sin

    monkeypatch.setattr(rotary, "rotary_angles", recording)
    evaluate_model(tiny("rope"), data, EvalConfig(precision="bf16", **SETTINGS), progress=False)
    assert seen and set(seen) == {(torch.float32, torch.float32)}


@pytest.mark.parametrize(
    ("flags", "want"),
    [({}, "fp32"), ({"avx512_bf16": True}, "bf16"), ({"amx_bf16": True}, "bf16"), ({"avx512_bf16": False}, "fp32")],
)
def test_auto_is_bf16_only_where_the_cpu_has_native_bf16(flags, want, data, monkeypatch) -> None:
    monkeypatch.setattr("lextra.devices.cpu_capabilities", lambda: dict(flags))
    assert resolve_precision("auto", "cpu") == want
    assert resolve_precision("fp32", "cpu") == "fp32" and resolve_precision("bf16", "cpu") == "bf16"
    config = EvalConfig(precision="auto", lengths=[16], protocols=["chunks"], documents=1)
    evaluation = evaluate_model(tiny("alibi"), data, config, progress=False)
    assert evaluation.precision == want
    assert evaluation.to_dict()["eval"].get("precision", "fp32") == want  # fp32 is left out, as before the flag


def test_unknown_precision_is_refused_in_one_line(capsys) -> None:
    assert main(["eval", "M", "--eval-precision", "fp16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--eval-precision" in err[0] and "'fp32', 'bf16', 'auto'" in err[0], err
    with pytest.raises(ConfigError, match=r"^evaluation precision must be one of fp32, bf16, auto, got 'fp16'$"):
        EvalConfig(precision="fp16").validate()
    models = [{"label": "r", "scheme": "rope"}]
    with pytest.raises(ConfigError, match="eval_precision must be one of fp32, bf16, auto"):
        parse_study({"models": models, "eval_precision": "half"})
    assert parse_study({"models": models, "eval_precision": "auto"}).eval_precision == "auto"


def test_a_study_writes_its_precision_only_when_not_fp32_and_reads_it_back() -> None:
    models = [{"label": "r", "scheme": "rope"}]
    default = parse_study({"models": models}).to_dict()
    assert "eval_precision" not in default  # as every study written before the setting existed
    written = parse_study({"models": models, "eval_precision": "bf16"}).to_dict()
    assert written["eval_precision"] == "bf16"
    assert parse_study(json.loads(json.dumps(written))).to_dict() == written


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def test_compare_records_the_precision_and_recomputes_a_cell_of_another(tmp_path: Path, capsys) -> None:
    corpus = _corpus(tmp_path)
    out = tmp_path / "cmp"
    argv = ["compare", "--out", str(out), "--schemes", "alibi", "--corpus", corpus, "--steps", "2", "--n-layer", "1",
            "--d-model", "16", "--n-head", "2", "--train-len", "16", "--batch-size", "2", "--lengths", "16,32",
            "--protocols", "chunks", "--documents", "2", "--quiet", "--threads", "1"]  # fmt: skip
    assert main([*argv, "--eval-precision", "bf16"]) == 0
    saved = json.loads((out / "results" / "alibi.json").read_text())
    assert saved["eval"]["precision"] == "bf16"
    assert {row["precision"] for row in _rows(out / "results.csv")} == {"bf16"}
    capsys.readouterr()
    assert main([*argv, "--eval-precision", "fp32"]) == 0
    assert "reusing" not in capsys.readouterr().err  # a bf16 cell is not an fp32 one
    fp32 = json.loads((out / "results" / "alibi.json").read_text())
    assert "precision" not in fp32["eval"] and {row["precision"] for row in _rows(out / "results.csv")} == {"fp32"}
    assert fp32["results"]["chunks"]["32"]["nll"] == pytest.approx(
        saved["results"]["chunks"]["32"]["nll"], rel=NLL_TOLERANCE
    )
    assert main(argv) == 0  # fp32 is the default: the cell is reused
    assert "reusing" in capsys.readouterr().err


def test_hf_eval_in_bf16_is_fp32_within_bf16_rounding(tmp_path: Path) -> None:
    tiny_causal(max_pos=16).save_pretrained(tmp_path / "llama")
    common = [str(tmp_path / "llama"), "--tokenizer", "bytes", "--corpus", _corpus(tmp_path), "--quiet",
              "--threads", "1", "--lengths", "16,32", "--protocols", "chunks", "--documents", "2"]  # fmt: skip
    results = {}
    for precision in ("fp32", "bf16"):
        out = tmp_path / precision
        assert main(["eval", *common, "--eval-precision", precision, "--out", str(out)]) == 0
        results[precision] = json.loads((out / "results.json").read_text())
        assert {row["precision"] for row in _rows(out / "results.csv")} == {precision}
    assert results["bf16"]["eval"]["precision"] == "bf16" and "precision" not in results["fp32"]["eval"]
    for n in ("16", "32"):
        a, b = results["fp32"]["results"]["chunks"][n]["nll"], results["bf16"]["results"]["chunks"][n]["nll"]
        assert b == pytest.approx(a, rel=NLL_TOLERANCE) and b != a
