"""Continued training at a new context: `lextra train --init-from MODEL --train-len L' [--rope-scaling TYPE:F]`."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from lextra.attention.plan import parse_variant
from lextra.cli import main
from lextra.errors import ConfigError
from lextra.model import GPTConfig, load_model
from lextra.registry import format_spec
from lextra.train import TrainConfig, train

LIMIT = 400_000


def tiny_config(train_len: int = 32, steps: int = 6, **kwargs) -> TrainConfig:
    model = GPTConfig(n_layer=2, n_head=2, d_model=32, train_len=train_len, layer_plan="rope")
    options = {"warmup": 2, "checkpoint_every": 4, "log_every": 2, "eval_sequences": 2, **kwargs}
    return TrainConfig(limit_chars=LIMIT, model=model, batch_size=4, steps=steps, **options)


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> str:
    return str(train(tiny_config(), tmp_path_factory.mktemp("source"), progress=False))


def test_continuing_at_a_new_length_saves_the_scaling_with_the_source_length(source, tmp_path) -> None:
    config = tiny_config(64, steps=1, init_from=source, lr=1e-12, warmup=0)
    config.model.layer_plan = format_spec("rope", {"scaling": {"type": "yarn", "factor": 2.0}})
    final = train(config, tmp_path, progress=False)
    saved = json.loads((final / "config.json").read_text())["model"]
    assert saved["train_len"] == 64
    assert parse_variant(saved["layer_plan"]).scheme_options["scaling"] == {
        "type": "yarn",
        "factor": 2.0,
        "original_max_position_embeddings": 32,
    }
    model, before = load_model(final), load_model(source)
    scaling = model.scheme_for(0).scaling
    assert (scaling.rope_type, scaling["factor"], scaling["original_max_position_embeddings"]) == ("yarn", 2.0, 32)
    for (name, a), (_, b) in zip(model.state_dict().items(), before.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-8, rtol=0, msg=name)  # it started from the source's weights
    # the optimizer started fresh: its state holds the one step of this run, not the source's six
    state = load_file(str(tmp_path / "checkpoints" / "step_0000001" / "optimizer.safetensors"))
    assert {float(v) for k, v in state.items() if k.endswith(".step")} == {1.0}


def test_continued_training_resumes_exactly(source, tmp_path) -> None:
    def make() -> TrainConfig:
        config = tiny_config(64, steps=8, init_from=source)
        config.model.layer_plan = format_spec("rope", {"scaling": {"type": "linear", "factor": 2.0}})
        return config

    def hook(done: int) -> None:
        if done == 6:
            raise KeyboardInterrupt

    whole = load_model(train(make(), tmp_path / "whole", progress=False))
    with pytest.raises(KeyboardInterrupt):
        train(make(), tmp_path / "cut", progress=False, on_step=hook)
    resumed = load_model(train(make(), tmp_path / "cut", resume=True, progress=False))
    for (name, a), (_, b) in zip(whole.state_dict().items(), resumed.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert whole.config.plan()[0].scheme_options["scaling"]["factor"] == 2.0


def test_other_model_changes_are_refused(source, tmp_path) -> None:
    config = tiny_config(64, init_from=source)
    config.model.n_layer = 3
    with pytest.raises(ConfigError, match=r"n_layer: model 2, this run 3\); only --train-len and --rope-scaling"):
        train(config, tmp_path, progress=False)


def test_a_table_sized_by_the_training_length_is_refused(tmp_path) -> None:
    config = tiny_config(steps=2)
    config.model.layer_plan = "learned"
    learned = str(train(config, tmp_path / "learned", progress=False))
    longer = tiny_config(64, steps=2, init_from=learned)
    longer.model.layer_plan = "learned"
    with pytest.raises(ConfigError, match="have other shapes at --train-len 64"):
        train(longer, tmp_path / "longer", progress=False)


def test_the_cli_continues_with_a_rope_scaling_that_eval_uses(source, tmp_path, capsys) -> None:
    out = tmp_path / "long"
    argv = ["train", "--out", str(out), "--init-from", source, "--train-len", "64", "--rope-scaling", "yarn:2"]
    argv += ["--n-layer", "2", "--d-model", "32", "--n-head", "2", "--steps", "2", "--batch-size", "2"]
    argv += ["--limit-chars", str(LIMIT)]
    assert main(argv) == 0
    model = load_model(out / "model")
    assert model.config.train_len == 64 and model.scheme_for(0).scaling.rope_type == "yarn"
    capsys.readouterr()
    assert main([*argv[:2], str(tmp_path / "bad"), *argv[3:], "--scheme", "alibi"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--rope-scaling applies to rope, xpos, coca models, not alibi" in err[0]
