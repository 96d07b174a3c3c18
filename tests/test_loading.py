"""`lextra.pipelines.loading`: one function turns a lextra run or model folder, a Hugging Face folder, a GGUF file or
`smollm2` into a loaded model with its tokenizer, label and result-cell key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lextra.errors import CheckpointError, ConfigError, DataError
from lextra.extend import InferenceSetup
from lextra.model import GPT, GPTConfig, save_model
from lextra.pipelines.loading import (
    LoadedModel,
    ModelOptions,
    lextra_folder,
    load_lextra,
    load_model_spec,
    model_folder,
    read_temperatures,
)


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, d_model=16, train_len=32, layer_plan="rope"))
    run = tmp_path_factory.mktemp("loading") / "run"
    save_model(model, run / "model", extra={"tokenizer": {"kind": "bytes"}})
    return run


def test_a_run_and_its_model_folder_load_the_same_lextra_model(run_folder: Path) -> None:
    assert model_folder(run_folder) == model_folder(run_folder / "model") == run_folder / "model"
    assert lextra_folder(run_folder) == run_folder / "model"
    by_run, by_folder = load_model_spec(str(run_folder)), load_model_spec(str(run_folder / "model"))
    for loaded in (by_run, by_folder):
        assert isinstance(loaded, LoadedModel) and loaded.is_lextra and loaded.folder == run_folder / "model"
        assert (
            loaded.label == "rope" and loaded.inference.mask_spec is None and loaded.name == str(run_folder / "model")
        )
        assert loaded.tokenizer.name == "bytes" and loaded.meta["tokenizer"] == {"kind": "bytes"}
        assert loaded.key == {"model": str(run_folder / "model"), "weights": loaded.meta["weights_sha256"]}
    assert loaded.meta["weights_sha256"] and len(loaded.meta["weights_sha256"]) == 64
    tokens = torch.randint(0, 256, (1, 20))
    assert torch.equal(by_run.model.eval()(tokens), by_folder.model.eval()(tokens))
    assert load_lextra(run_folder).tokenizer is None  # asked for only where it is needed


def test_options_are_applied_in_order_and_named_in_label_and_key(run_folder: Path, tmp_path: Path) -> None:
    align = tmp_path / "alignment.json"
    align.write_text(json.dumps({"strategy": "pmax", "temperatures": [[1.5, 0.5], [1.0, 2.0]]}))
    options = ModelOptions(InferenceSetup(rope_scaling="linear:2", mask="window:8"), temperatures=str(align))
    loaded = load_model_spec(str(run_folder), options)
    assert loaded.label == "rope+linear:2+window:8+tau-pmax" and loaded.inference.mask_spec == "window:8"
    assert loaded.key["temperatures"] == [[1.5, 0.5], [1.0, 2.0]]
    assert loaded.model.config.temperatures == [[1.5, 0.5], [1.0, 2.0]]
    assert torch.equal(loaded.model.blocks[0].attn.inference.temperature, torch.tensor([1.5, 0.5]))
    plain = load_model_spec(str(run_folder))
    tokens = torch.randint(0, 256, (1, 40))
    assert not torch.allclose(plain.model.eval()(tokens), loaded.model.eval()(tokens))
    assert read_temperatures(align) == ([[1.5, 0.5], [1.0, 2.0]], "pmax")


def test_a_log_scaling_applies_to_a_lextra_model_as_its_inference_setup(run_folder: Path) -> None:
    loaded = load_lextra(run_folder, ModelOptions(InferenceSetup(log_scaling="qwen")))
    assert loaded.label == "rope+logn-qwen"
    assert all(block.attn.inference.log_scaling == "qwen" for block in loaded.model.blocks)
    with pytest.raises(ConfigError, match="ssmax is a learned per-head scale"):
        load_lextra(run_folder, ModelOptions(InferenceSetup(log_scaling="ssmax")))


def test_bad_options_and_specs_are_one_clear_error(run_folder: Path, tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(DataError, match=r"not an alignment\.json from `lextra align`"):
        load_lextra(run_folder, ModelOptions(temperatures=str(tmp_path / "bad.json")))
    with pytest.raises(ConfigError, match="unknown mask"):
        load_lextra(run_folder, ModelOptions(InferenceSetup(mask="bogus")))
    hf_like = tmp_path / "hf"
    hf_like.mkdir()
    (hf_like / "config.json").write_text(json.dumps({"model_type": "llama", "model": "x"}))
    assert lextra_folder(hf_like) is None and lextra_folder(tmp_path / "nothing") is None
    with pytest.raises(
        CheckpointError, match=r"no checkpoint at .*a lextra run or model folder, a Hugging Face folder"
    ):
        load_model_spec(str(tmp_path / "nothing"))


def test_a_fine_tuned_hugging_face_folder_is_labelled_by_its_run() -> None:
    from lextra.pipelines.loading import hf_label

    assert hf_label("runs/ft-yarn/model") == "ft-yarn"  # lextra hf finetune --out runs/ft-yarn
    assert hf_label("runs/ft-yarn/model/") == "ft-yarn"
    assert hf_label("models/SmolLM2-135M") == "SmolLM2-135M" and hf_label("w/model.gguf") == "model"
    assert hf_label("smollm2") == "smollm2"


def test_a_layer_plans_label_names_a_scaling_once(tmp_path: Path) -> None:
    model = GPT(GPTConfig(n_layer=2, n_head=2, d_model=16, train_len=32, layer_plan="rope;rope+window:8"))
    save_model(model, tmp_path / "model", extra={"tokenizer": {"kind": "bytes"}})
    loaded = load_model_spec(str(tmp_path), ModelOptions(InferenceSetup(rope_scaling="yarn:4")))
    assert loaded.label == "rope;rope+window:8+yarn:4"  # the plan as trained, then the change
    assert "yarn" in loaded.model.config.layer_plan  # the model itself carries the scaling
