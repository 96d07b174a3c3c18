"""Training speed on the length-generalization tasks at Ruoss et al.'s shape, against this machine's matmul rate.

What it measures
    (1) Task data: generation + encoding tokens/s of every registered task (batch 128, its longest training length).
    (2) One training step of Ruoss et al.'s model (5 layers, width 64, 8 heads, MLP 256; encoder style, `full`
        mask) on `ruoss.reverse_string` at batch 128, lengths 1-40 drawn per step as in training: forward, masked
        loss, backward, clipping and AdamW, eager and through `torch.compile` (`dynamic=None`: one recompile, then
        one graph for every width), and eager under bf16 autocast (`--precision bf16`). Reported: median tokens/s
        over the timed steps, and its share of the fp32 matmul rate: the step's matrix FLOPs (6 x parameters x
        tokens + 12 x layers x width x W^2 x batch for attention) per second over the FLOP/s of a 2048 x 2048 fp32
        matmul on the same thread, measured in the same process.
    (3) Two runs side by side, one thread each (two processes), against one alone: the summed tokens/s.

Usage
    .venv/bin/python benchmarks/task_training.py                 # all three, ~2 minutes
    .venv/bin/python benchmarks/task_training.py --steps 20 --out benchmarks/results/task_training.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import harness
import numpy as np
import torch

from lextra.attention import build_mask
from lextra.compile import StepLoss, answer_loss
from lextra.model import GPT, GPTConfig
from lextra.tasks import AlgorithmicTask, LengthRange, TaskBatches, build_task, encode, task_rng
from lextra.tasks.registry import TRAINING_TASKS
from lextra.train import TrainConfig
from lextra.train.gpt import make_optimizer

FULL = build_mask("full", 1)


def data_rates(batch: int = 128, repeats: int = 5) -> dict[str, float]:
    """tokens/s of generate + encode per task at its longest training length."""
    rates = {}
    for name in TRAINING_TASKS.names():
        cls = TRAINING_TASKS.get(name)
        if not issubclass(cls, AlgorithmicTask):
            continue
        task = cls()
        length = task.length_values(task.train_lengths)[-1]
        rng = task_rng(0, 1)
        times, tokens = [], 0
        for _ in range(repeats):
            start = time.perf_counter()
            encoded = encode(task, task.generate(length, batch, rng))
            times.append(time.perf_counter() - start)
            tokens = encoded.inputs.numel()
        rates[name] = tokens / statistics.median(times)
    return rates


def step_rates(steps: int, compile: bool, batch: int = 128, precision: str = "fp32") -> dict[str, float]:
    """Median tokens/s of a training step at Ruoss et al.'s shape, and the share of the matmul rate."""
    task = build_task("ruoss.reverse_string")
    config = TrainConfig(task=task.name, batch_size=batch, model=GPTConfig(n_layer=5, d_model=64, n_head=8))
    config.validate()
    torch.manual_seed(0)
    model = GPT(config.model)
    optimizer = make_optimizer(model, config)
    loss = StepLoss(model, precision, torch.device("cpu"), compile=compile, loss=_full_mask_loss, dynamic=None)
    source = TaskBatches(task, LengthRange(1, 40))
    params = sum(p.numel() for p in model.parameters())
    rates, shares, peak = [], [], harness.matmul_rate(torch) * 1e9
    for step in range(steps + 5):
        tokens = source.batch(step, batch, 0, seed=0)
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss(tokens, None)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        seconds = time.perf_counter() - start
        if step >= 5:  # warm-up steps (and compiling) left out
            n, width = tokens.shape[0] * tokens.shape[-1], tokens.shape[-1]
            flops = 6 * params * n + 12 * config.model.n_layer * config.model.d_model * width * width * batch
            rates.append(n / seconds)
            shares.append(flops / seconds / peak)
    return {
        "tokens_per_s": statistics.median(rates),
        "matmul_share": statistics.median(shares),
        "matmul_gflops": peak / 1e9,
    }


def _full_mask_loss(network, precision, device, batch, positions):
    return answer_loss(network, precision, device, batch, positions, mask=FULL)


def side_by_side(steps: int) -> dict[str, float]:
    """Summed tokens/s of two one-thread processes running the eager step at once, and one alone."""
    command = [sys.executable, __file__, "--worker", "--steps", str(steps)]
    alone = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    both = [json.loads(p.communicate()[0]) for p in procs]
    return {"alone": alone["tokens_per_s"], "two_summed": sum(b["tokens_per_s"] for b in both)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--out", default=None)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.worker:
        print(json.dumps(step_rates(args.steps, compile=False)))
        return
    data = data_rates()
    eager, compiled = step_rates(args.steps, compile=False), step_rates(args.steps, compile=True)
    bf16 = step_rates(args.steps, compile=False, precision="bf16")
    parallel = side_by_side(args.steps)
    result = {"data_tokens_per_s": data, "eager": eager, "compiled": compiled, "bf16": bf16, "parallel": parallel,
              "torch": torch.__version__, "numpy": np.__version__}  # fmt: skip
    slowest = min(data, key=data.__getitem__)
    median = statistics.median(data.values())
    print(f"task data: slowest {slowest} {data[slowest] / 1e6:.1f}M tokens/s; median {median / 1e6:.1f}M")
    for name, r in (("eager", eager), ("compiled", compiled), ("eager bf16", bf16)):
        print(f"{name}: {r['tokens_per_s']:,.0f} tokens/s, {100 * r['matmul_share']:.0f}% of the matmul rate "
              f"({r['matmul_gflops']:.1f} GFLOP/s)")  # fmt: skip
    print(f"two runs side by side: {parallel['two_summed']:,.0f} tokens/s summed vs {parallel['alone']:,.0f} alone")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
