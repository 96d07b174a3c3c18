"""The one training stack (`lextra.train`): a lextra GPT run stopped at step k and resumed equals a straight run
in weights, optimizer state and logged losses; config fields document themselves (their docs are the flags' help);
`--set KEY=VALUE` and generated flags reach the config."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from lextra.cli.app import build_parser, leaf_commands
from lextra.cli.training_options import train_config_from
from lextra.errors import ConfigError
from lextra.hf.finetune import FinetuneConfig
from lextra.model import GPTConfig
from lextra.train import TrainConfig, field_docs, train


def _run(**changes) -> TrainConfig:
    model = GPTConfig(n_layer=1, n_head=2, d_model=16, train_len=16, layer_plan="kerple_log", dropout=0.1)
    settings = dict(limit_chars=60_000, model=model, batch_size=2, steps=4, warmup=2, checkpoint_every=2,
                    log_every=1, eval_sequences=2, eval_every=3)  # fmt: skip
    return TrainConfig(**(settings | changes))


def test_a_gpt_run_resumed_at_step_k_equals_a_straight_run(tmp_path: Path) -> None:
    """Weights, the last checkpoint's optimizer state and every logged loss and validation loss are equal (dropout
    on, so the restored RNG matters too)."""
    train(_run(), tmp_path / "whole", progress=False, device="cpu")

    def stop(done: int) -> None:
        if done == 3:  # after the checkpoint of step 2
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(_run(), tmp_path / "cut", progress=False, device="cpu", on_step=stop)
    assert (tmp_path / "cut" / "checkpoints" / "LATEST").read_text().strip() == "step_0000002"
    train(_run(), tmp_path / "cut", resume=True, progress=False, device="cpu")
    for name in ("model/model.safetensors", "checkpoints/step_0000004/optimizer.safetensors"):
        want, got = load_file(str(tmp_path / "whole" / name)), load_file(str(tmp_path / "cut" / name))
        assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want), name

    def records(run: str) -> list[dict]:
        lines = (tmp_path / run / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(line).items() if k != "tokens_per_s"} for line in lines]

    assert records("cut") == records("whole") and [r["step"] for r in records("cut")] == [1, 2, 3, 4]
    assert [r["step"] for r in records("cut") if "val_loss" in r] == [3, 4]
    state = json.loads((tmp_path / "cut" / "checkpoints" / "step_0000004" / "state.json").read_text())
    assert set(state["sha256"]) == {"model.safetensors", "config.json", "optimizer.safetensors"}


@pytest.mark.parametrize("cls", [TrainConfig, FinetuneConfig])
def test_every_config_field_has_a_doc_that_is_its_help(cls: type) -> None:
    docs = field_docs(cls)
    assert set(docs) == {f.name for f in fields(cls)}
    assert all(docs.values()), [name for name, doc in docs.items() if not doc]
    assert docs["lr"].startswith("peak learning rate")  # a redeclared default keeps the loop's doc
    parser = dict(leaf_commands(build_parser()))[("hf", "finetune") if cls is FinetuneConfig else ("train",)]
    help_text = " ".join(parser.format_help().split())
    assert "AdamW's weight decay, on matrices only (default: " in help_text


def test_set_and_generated_flags_reach_the_config(tmp_path: Path) -> None:
    config = tmp_path / "run.toml"
    config.write_text("steps = 3\nweight_decay = 0.3\n[model]\nn_layer = 3\n")
    argv = ["train", "--config", str(config), "--out", "x", "--set", "model.n_layer=2", "--set", "beta2=0.99",
            "--set", "precision=bf16", "--grad-clip", "0.5", "--weight-decay", "0.2", "--compile"]  # fmt: skip
    resolved = train_config_from(build_parser().parse_args(argv))
    assert (resolved.steps, resolved.model.n_layer, resolved.beta2, resolved.precision) == (3, 2, 0.99, "bf16")
    assert (resolved.grad_clip, resolved.weight_decay, resolved.compile) == (0.5, 0.2, True)  # flags win
    with pytest.raises(ConfigError, match="--set takes KEY=VALUE"):
        train_config_from(build_parser().parse_args(["train", "--out", "x", "--set", "lr"]))
    with pytest.raises(ConfigError, match="unknown field"):
        train_config_from(build_parser().parse_args(["train", "--out", "x", "--set", "stepz=3"]))
