"""The folders `lextra hf finetune` writes (`lextra.hf.export`): dynamic NTK keeps the original length, config.json
carries the RoPE scaling in the form of every supported transformers version, YaRN's `max_position_embeddings` is
factor x original and loads without a warning, and the lowest transformers the `hf` extra admits gives the pinned
version's logits."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

import pytest
import torch
import transformers
from test_hf_finetune import VOCAB

from lextra.hf.export import legacy_rope_keys, saved_length
from lextra.hf.finetune import FinetuneConfig, finetune
from lextra.positions.scaling import RopeScaling, frequencies

ROOT = Path(__file__).resolve().parents[1]
#: where `make` installs requirements/transformers-oldest.txt (pip --target), unless this variable says otherwise
OLDEST = Path(os.environ.get("LEXTRA_TRANSFORMERS_OLDEST", Path(sys.prefix) / "transformers-oldest"))


def tune(base: Path, corpus: str, out: Path, **changes) -> Path:
    settings = dict(model=str(base), train_len=64, corpus=corpus, tokenizer="bytes", steps=1, warmup=1, lr=1e-2,
                    checkpoint_every=0, log_every=0)  # fmt: skip
    final, _ = finetune(FinetuneConfig(**(settings | changes)), out, progress=False)
    return final


@pytest.fixture(scope="module")
def folders(tiny_hf_base, tiny_hf_corpus, tmp_path_factory) -> dict[str, Path]:
    """One fine-tuned folder per kind of saved RoPE (YaRN through PoSE, so its target exceeds factor x original)."""
    root = tmp_path_factory.mktemp("tuned")
    runs = {
        "yarn": dict(rope_scaling="yarn:4", train_len=16, positions="pose:256"),
        "dynamic": dict(rope_scaling="dynamic:2"),
        "ntk": dict(rope_scaling="ntk:2"),
        "linear": dict(rope_scaling="linear:2"),
    }
    return {name: tune(tiny_hf_base, tiny_hf_corpus, root / name, **changes) for name, changes in runs.items()}


def saved(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())


def test_dynamic_ntk_keeps_the_original_length_so_the_saved_model_runs_the_trained_frequencies(folders) -> None:
    """Training ran with max_position_embeddings 32 (the base's), which HF's dynamic NTK reads as L_tr; saving the
    64-token window there made the saved model run plain RoPE up to 64 (inv_freq[1] 0.1 instead of the trained
    0.0693, cos up to 1.52 apart at the trained length)."""
    assert saved(folders["dynamic"])["max_position_embeddings"] == 32
    model = transformers.AutoModelForCausalLM.from_pretrained(str(folders["dynamic"])).eval()
    with torch.no_grad():
        model(torch.zeros(1, 64, dtype=torch.long))  # the dynamic update at the trained length
    trained, _ = frequencies(RopeScaling("dynamic", factor=2.0, original_max_position_embeddings=32), 8, 10000.0, 64)
    assert torch.allclose(model.model.rotary_emb.inv_freq, trained, rtol=1e-5)
    assert model.model.rotary_emb.inv_freq[1] < 0.07  # plain RoPE's is 10000 ** -0.25 = 0.1


def test_pose_with_dynamic_ntk_keeps_the_original_length_too(tiny_hf_base, tiny_hf_corpus, tmp_path) -> None:
    final = tune(
        tiny_hf_base, tiny_hf_corpus, tmp_path / "run", rope_scaling="dynamic:2", train_len=32, positions="pose:128"
    )
    assert saved(final)["max_position_embeddings"] == 32


def test_config_json_carries_the_transformers_4_keys_beside_rope_parameters(folders) -> None:
    yarn = saved(folders["yarn"])
    assert yarn["rope_theta"] == 10000.0
    assert yarn["rope_scaling"] == {
        "rope_type": "yarn",
        "type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 32,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "truncate": True,
    }
    assert yarn["rope_parameters"] == {k: v for k, v in yarn["rope_scaling"].items() if k != "type"} | {
        "rope_theta": 10000.0
    }
    dynamic = saved(folders["dynamic"])  # no original length in dynamic's dict: neither version reads it there
    assert dynamic["rope_scaling"] == {"rope_type": "dynamic", "type": "dynamic", "factor": 2.0}
    ntk = saved(folders["ntk"])  # NTK is plain RoPE at a larger base: 4.x reads that base from the top level
    assert ntk["rope_scaling"] is None and ntk["rope_theta"] == pytest.approx(10000 * 2 ** (8 / 6))
    assert saved(folders["linear"])["max_position_embeddings"] == 64  # the window trained


def test_yarn_saves_factor_times_original_and_loads_without_a_warning(folders) -> None:
    assert saved(folders["yarn"])["max_position_embeddings"] == 128  # 4 x 32, not PoSE's target 256
    transformers.utils.logging.warning_once.cache_clear()  # a message logged earlier in this process counts too
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    library = transformers.utils.logging.get_logger("transformers")
    library.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for folder in folders.values():
                transformers.AutoModelForCausalLM.from_pretrained(str(folder))
    finally:
        library.removeHandler(handler)
    assert stream.getvalue() == "" and [str(w.message) for w in caught] == []


def test_saved_length_and_legacy_keys_by_rope_type() -> None:
    yarn = {"rope_type": "yarn", "factor": 2.5, "original_max_position_embeddings": 40, "rope_theta": 1e4}
    assert saved_length(yarn, original=40, trained=300) == 100
    assert saved_length({"rope_type": "dynamic", "factor": 4, "rope_theta": 1e4}, original=40, trained=300) == 40
    assert saved_length({"rope_type": "linear", "factor": 4, "rope_theta": 1e4}, original=40, trained=300) == 300
    plain = legacy_rope_keys({"rope_type": "default", "rope_theta": 5e5})
    assert plain == {"rope_scaling": None, "rope_theta": 5e5}
    assert legacy_rope_keys({"rope_type": "linear", "factor": 2, "rope_theta": 1e4})["rope_scaling"]["factor"] == 2.0


#: run by the lowest transformers: the logits of each folder (argv[2:]) at 64 tokens, saved to argv[1]
OLDEST_SCRIPT = """
import sys, io, logging, warnings
import torch, transformers
stream = io.StringIO()
transformers.utils.logging.get_logger("transformers").addHandler(logging.StreamHandler(stream))
ids = torch.randint(0, {vocab}, (1, 64), generator=torch.Generator().manual_seed(3))
out = {{}}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for folder in sys.argv[2:]:
        with torch.no_grad():
            out[folder] = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()(ids).logits
torch.save({{"version": transformers.__version__, "logits": out, "log": stream.getvalue(),
            "warnings": [str(w.message) for w in caught]}}, sys.argv[1])
"""


def declared_lowest() -> str:
    """The lower bound of transformers in pyproject's `hf` extra (`transformers>=4.56` -> "4.56")."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["hf"]
    (spec,) = [s for s in extra if s.startswith("transformers")]
    match = re.fullmatch(r"transformers>=([\d.]+)(,.*)?", spec)
    assert match, spec
    return match.group(1)


def test_the_lowest_admitted_transformers_gives_the_pinned_versions_logits(folders, tmp_path) -> None:
    """Before the 4.x keys, 4.56 read every scaled folder as plain RoPE at theta 10000 (logits 4e-4 to 1.5e-3 apart
    on these tiny models); now both versions give the same logits to the bit."""
    if not (OLDEST / "transformers").is_dir():
        pytest.fail(f"the lowest admitted transformers is not installed at {OLDEST}; run `make test` (it installs it)")
    out = tmp_path / "logits.pt"
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(OLDEST), os.environ.get("PYTHONPATH", "")])}
    script = OLDEST_SCRIPT.format(vocab=VOCAB)
    names = list(folders)
    subprocess.run([sys.executable, "-c", script, str(out), *(str(folders[n]) for n in names)], check=True, env=env)
    old = torch.load(out)
    assert old["version"].startswith(declared_lowest() + ".")  # the range's own lowest version
    assert old["version"] != transformers.__version__
    assert old["log"] == "" and old["warnings"] == []
    ids = torch.randint(0, VOCAB, (1, 64), generator=torch.Generator().manual_seed(3))
    for name in names:
        model = transformers.AutoModelForCausalLM.from_pretrained(str(folders[name])).eval()
        with torch.no_grad():
            assert torch.equal(old["logits"][str(folders[name])], model(ids).logits), name
