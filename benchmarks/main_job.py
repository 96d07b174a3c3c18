"""The main job's training step (`make run`: the rope model, batch 16 x 128 tokens) against the machine's matmul rate.

What it measures, in one process, round after round so that a machine that gets busier shows up in every row alike
    - the matmul rate: one 2048 x 2048 fp32 matmul, GFLOP/s (median of 3 per round);
    - the step's matmul ceiling: the step's own matrix products (forward and backward of every linear layer and the
      tied head, at their shapes) run back to back with nothing else, GFLOP/s: the best share of the matmul rate a
      step could reach if everything else were free;
    - one training step per lever (`LEVERS`), each built from the same seed: tokens/s, and 6 x parameters x tokens/s
      as a share of the same round's matmul rate (the issue's measure: attention FLOPs left out, so a floor).
      `before` is the loop as it was (AdamW looping over tensors, a gradient-norm clip per tensor, the eager
      step); each lever changes one thing from it; `after` is `lextra.train`'s step as it is now (`StepLoss`,
      `make_optimizer`, the foreach clip).
    Reported: medians over rounds, and the best round (the fastest step, the highest matmul rate: on a shared
    machine the round least disturbed by other work); compile time (seconds of the steps that compiled new
    graphs, and how many); the largest loss difference of each lever from `before` after the same steps
    (exactness); with `--profile`, the top operators by self CPU time of `after`'s step.

Usage
    .venv/bin/python benchmarks/main_job.py                          # 2 threads, 7 rounds of 5 steps per lever
    .venv/bin/python benchmarks/main_job.py --levers before,after --rounds 3 --profile
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness
from harness import HelpFormatter, csv_list, md_table

#: lever -> what it changes from `before`
LEVERS = {
    "before": "the loop as it was: AdamW looping over tensors, a norm per gradient for the clip, eager",
    "fused-adamw": "AdamW's fused kernel (one call per parameter group)",
    "foreach-clip": "the gradient-norm clip in one foreach call",
    "no-finite-check": "without the per-step finiteness check (its host sync)",
    "compile": "forward and loss through torch.compile (inductor)",
    "after": "lextra.train's step now: fused AdamW, foreach clip, finiteness check, eager (compile off)",
    "bf16": "`after` under bf16 autocast (`--precision bf16`): the matrix products in bf16, weights and AdamW in fp32",
}


def step_gemms(torch: Any, config: Any, tokens: int) -> tuple[Callable[[], None], float]:
    """The step's matrix products (forward, input gradient, weight gradient of each linear layer and the head),
    and their GFLOP."""
    d, hidden = config.d_model, round(config.mlp_ratio * config.d_model)
    layer = [(d, d)] * 4 + [(d, hidden), (hidden, d)]  # q, k, v, o, up, down: (in, out)
    shapes = []
    for i, o in layer * config.n_layer + [(d, config.vocab_size)]:
        shapes += [(tokens, i, o), (tokens, o, i), (o, tokens, i)]
    mats = [(torch.randn(m, k), torch.randn(k, n)) for m, k, n in shapes]

    def run() -> None:
        for a, b in mats:
            a @ b

    return run, sum(2 * m * k * n for m, k, n in shapes) / 1e9


def build_step(name: str, seed: int = 0) -> tuple[Callable[[], float], Any, Any]:
    """A training step of the main job for lever `name` (its loss as a float), the model and the StepLoss."""
    import torch

    from lextra.compile import StepLoss
    from lextra.model import GPT
    from lextra.train import TrainConfig, make_optimizer, non_finite

    config = TrainConfig()
    torch.manual_seed(seed)
    model = GPT(config.model)
    model.train()
    device = torch.device("cpu")
    tokens = torch.randint(0, config.model.vocab_size, (config.batch_size, config.model.train_len + 1))
    params = list(model.parameters())
    optimizer = make_optimizer(model, config)  # fused
    if name not in ("fused-adamw", "after", "bf16"):
        optimizer = torch.optim.AdamW(optimizer.param_groups, lr=config.lr, betas=(config.beta1, config.beta2))
    for group in optimizer.param_groups:
        group["lr"] = config.lr * group["lr_scale"]
    precision = "bf16" if name == "bf16" else config.precision
    step_loss = StepLoss(model, precision, device, compile=name == "compile", label="rope")
    foreach = name in ("foreach-clip", "after", "bf16")
    check = name != "no-finite-check"
    world = _World()

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        loss = step_loss(tokens, None)
        norm = torch.nn.utils.clip_grad_norm_(params, config.grad_clip, foreach=foreach)
        if check and non_finite(world, loss, norm):
            raise FloatingPointError("non-finite loss or gradient norm in the benchmark")
        optimizer.step()
        return float(loss.detach())

    return step, model, step_loss


class _World:
    """One process: `lextra.train.non_finite` sums over processes through this."""

    def total(self, values: Any) -> Any:
        return values


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=HelpFormatter)
    parser.add_argument("--levers", default=",".join(LEVERS), help="comma list of levers (`before` always runs)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds; every lever runs --steps steps per round")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per lever per round")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per lever first (compile happens here)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--profile", action="store_true", help="also profile 10 steps of `after`: top operators")
    harness.add_out_worker(parser, "benchmarks/results/main_job.json")
    args = parser.parse_args(argv)
    unknown = [lever for lever in csv_list(args.levers) if lever not in LEVERS]
    if unknown or min(args.rounds, args.steps, args.threads) < 1 or args.warmup < 1:
        parser.error(f"known levers: {', '.join(LEVERS)}; --rounds, --steps, --threads, --warmup must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from lextra.train import TrainConfig

    torch.set_num_threads(args.threads)
    names = ["before", *(lever for lever in csv_list(args.levers) if lever != "before")]
    meta = harness.machine_meta(args.threads, ("src/lextra/train.py", "src/lextra/compile.py", "src/lextra/model.py"))
    config = TrainConfig()
    tokens = config.batch_size * config.model.train_len
    steps: dict[str, Callable[[], float]] = {}
    losses: dict[str, list[float]] = {}
    compiled: dict[str, str] = {}
    parameters = 0
    for name in names:
        step, model, step_loss = build_step(name)
        parameters = model.num_parameters()
        start = time.perf_counter()
        losses[name] = [step() for _ in range(args.warmup)]
        compiled[name] = step_loss.summary() or f"warm-up {time.perf_counter() - start:.1f} s"
        steps[name] = step
    gemms, gemm_gflop = step_gemms(torch, config.model, tokens)
    gemms()
    rates: list[float] = []
    ceilings: list[float] = []
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(args.rounds):
        rates.append(harness.matmul_rate(torch))
        start = time.perf_counter()
        gemms()
        ceilings.append(gemm_gflop / (time.perf_counter() - start))
        for name in names:
            start = time.perf_counter()
            losses[name] += [steps[name]() for _ in range(args.steps)]
            times[name].append((time.perf_counter() - start) / args.steps)
        print(f"round {round_index + 1}/{args.rounds}: matmul {rates[-1]:.0f} GFLOP/s", file=sys.stderr)
    rate, ceiling = statistics.median(rates), statistics.median(ceilings)
    best_rate, best_ceiling = max(rates), max(ceilings)
    flop_per_token = 6 * parameters
    rows = []
    results = {}
    for name in names:
        step_s, best_s = statistics.median(times[name]), min(times[name])
        per_s, best_per_s = tokens / step_s, tokens / best_s
        share, best_share = flop_per_token * per_s / 1e9 / rate, flop_per_token * best_per_s / 1e9 / best_rate
        drift = max(abs(a - b) for a, b in zip(losses[name], losses["before"], strict=True))
        results[name] = {"step_ms": step_s * 1e3, "tokens_per_s": per_s, "share": share, "loss_max_diff": drift}
        results[name] |= {"best_step_ms": best_s * 1e3, "best_tokens_per_s": best_per_s, "best_share": best_share}
        results[name]["compile"] = compiled[name]
        rows.append(
            [
                name,
                LEVERS[name],
                f"{per_s:,.0f} ({step_s * 1e3:.1f} ms), {share:.0%}",
                f"{best_per_s:,.0f} ({best_s * 1e3:.1f} ms), {best_share:.0%}",
                f"{drift:.1e}",
                compiled[name],
            ]
        )
    header = ["lever", "what changes", "median: tokens/s (step), share", "best round", "loss diff", "compile"]
    report = (
        f"Main job's step (rope, {parameters:,} parameters, batch {config.batch_size} x {config.model.train_len}), "
        f"{args.threads} thread(s): matmul rate {rate:.0f} GFLOP/s median, {best_rate:.0f} best (2048^2 fp32); "
        f"the step's matmuls alone {ceiling:.0f} GFLOP/s median = {ceiling / rate:.0%} of it, {best_ceiling:.0f} "
        f"best = {best_ceiling / best_rate:.0%} (the ceiling of the share)\n\n"
        + md_table(header, rows)
        + f"\n{args.rounds} rounds x {args.steps} steps; share = 6 x parameters x tokens/s / matmul rate (median "
        "over median, best over best); loss diff: largest |loss - before's loss| over the same steps\n"
    )
    data: dict[str, Any] = {
        "meta": meta,
        "matmul_gflops": rates,
        "gemm_ceiling_gflops": ceilings,
        "parameters": parameters,
        "tokens_per_step": tokens,
        "levers": results,
        "step_times_s": times,
    }
    if args.profile:
        report += "\n" + profile(torch, build_step("after")[0], args.warmup)
    harness.write_report(Path(args.out), data, report)
    return 0


def profile(torch: Any, step: Callable[[], float], warmup: int) -> str:
    """The top operators by self CPU time over 10 steps, as a markdown table with each one's share."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    for _ in range(warmup):
        step()
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(10):
            step()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events)
    rows = [
        [e.key[:60], f"{e.self_cpu_time_total / 1e4:.2f}", f"{e.self_cpu_time_total / total:.1%}", str(e.count // 10)]
        for e in events[:15]
    ]
    return "Profile of `after` (10 steps): top operators by self CPU time\n\n" + md_table(
        ["operator", "ms per step", "share", "calls per step"], rows
    )


if __name__ == "__main__":
    sys.exit(main())
