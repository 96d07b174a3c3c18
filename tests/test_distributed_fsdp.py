"""`lextra train --fsdp` (FSDP2, gloo on the CPU, 2 processes): the sharded GPT trains what one process does with
the same global batch, resumes bit-identically, writes checkpoints that load in one process with the sharded
model's logits, and one process with --fsdp is refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from lextra.cli import main
from lextra.model import load_model
from lextra.train import TrainConfig, train

#: the settings of every run here (dropout 0: each process draws its own rows' masks, so only then does a
#: two-process run equal a one-process run)
SETTINGS = dict(limit_chars=60_000, batch_size=4, steps=4, warmup=2, checkpoint_every=2, log_every=1,
                eval_sequences=2, eval_every=2)  # fmt: skip
MODEL = dict(n_layer=2, n_head=2, d_model=16, train_len=16, layer_plan="kerple_log")

#: run under torchrun: a sharded run stopped after step 2 (recording the sharded model's logits of a fixed batch),
#: resumed, then the same run straight through
SHARDED = """
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from lextra.model import GPTConfig
from lextra.train import GPTTarget, TrainConfig, Trainer, train

out, settings, model = Path(sys.argv[1]), eval(sys.argv[2]), eval(sys.argv[3])
config = lambda: TrainConfig(**settings, model=GPTConfig(**model), fsdp=True)
target = GPTTarget(config())


class Stop(Exception):
    pass


def stop(done):
    if done == 2:  # after the checkpoint of step 2: the sharded model's logits, every process taking part
        target.model.eval()
        with torch.no_grad():
            logits = target.model(torch.arange(32).reshape(2, 16) % 7)
        target.model.train()
        if torch.distributed.get_rank() == 0:
            save_file({"logits": logits.contiguous()}, str(out / "logits.safetensors"))
        raise Stop


try:
    Trainer(target, out / "cut", progress=False, device="cpu", on_step=stop).run()
except Stop:
    pass
train(config(), out / "cut", resume=True, progress=False, device="cpu")
train(config(), out / "whole", progress=False, device="cpu")
"""


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """One process's run (`one`) and the sharded runs of `SHARDED` (`cut`, `whole`) in one folder."""
    from lextra.model import GPTConfig

    out = tmp_path_factory.mktemp("fsdp")
    train(TrainConfig(**SETTINGS, model=GPTConfig(**MODEL)), out / "one", progress=False, device="cpu")
    script = out / "sharded.py"
    script.write_text(SHARDED)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script), str(out),
         repr(SETTINGS), repr(MODEL)],
        env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.slow
def test_sharded_training_equals_one_process_with_the_same_global_batch(runs: Path) -> None:
    one, two = _records(runs / "one"), _records(runs / "whole")
    assert [r["step"] for r in two] == [1, 2, 3, 4]
    for a, b in zip(one, two, strict=True):
        assert abs(a["loss"] - b["loss"]) < 2e-6 and abs(a["grad_norm"] - b["grad_norm"]) < 2e-6, (a, b)
        assert ("val_loss" in a) == ("val_loss" in b) and abs(a.get("val_loss", 0) - b.get("val_loss", 0)) < 2e-6
    assert sum("val_loss" in r for r in two) == 2  # computed by every process under fsdp, recorded once
    weights = load_file(str(runs / "one" / "model" / "model.safetensors"))
    sharded = load_file(str(runs / "whole" / "model" / "model.safetensors"))
    assert weights.keys() == sharded.keys()  # equal weights: the embedding and head stayed one tied matrix
    assert all(torch.allclose(weights[k], sharded[k], atol=1e-6) for k in weights)


@pytest.mark.slow
def test_a_sharded_run_resumed_from_its_checkpoint_equals_a_straight_run(runs: Path) -> None:
    for name in ("model/model.safetensors", "checkpoints/step_0000004/optimizer.safetensors"):
        want, got = load_file(str(runs / "whole" / name)), load_file(str(runs / "cut" / name))
        assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want), name
    strip = [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in _records(runs / "whole")]
    assert [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in _records(runs / "cut")] == strip


@pytest.mark.slow
def test_a_sharded_checkpoint_loads_in_one_process_with_the_sharded_logits(runs: Path) -> None:
    model = load_model(runs / "cut" / "checkpoints" / "step_0000002").eval()
    assert model.head.weight is model.embed.weight
    with torch.no_grad():
        logits = model(torch.arange(32).reshape(2, 16) % 7)
    sharded = load_file(str(runs / "logits.safetensors"))["logits"]
    assert (logits - sharded).abs().max() < 1e-6


def test_fsdp_on_one_process_is_one_line_naming_the_fix_and_exit_2(tmp_path, capsys) -> None:
    args = ["train", "--fsdp", "--n-layer", "1", "--d-model", "16", "--n-head", "2", "--train-len", "16", "--steps",
            "1", "--limit-chars", "60000", "--device", "cpu", "--quiet", "--out", str(tmp_path / "run")]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--fsdp shards the model over torchrun's processes; run under torchrun" in err[0], err
    assert not (tmp_path / "run" / "config.json").exists()  # refused before any work
