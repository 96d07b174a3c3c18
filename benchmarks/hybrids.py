"""Forward cost of the layer-plan pieces (`lextra.attention.pieces`, the chunk mask, partial rotary, p-RoPE) next to
plain causal SDPA, and of a hybrid plan's forward next to the sum of its layers run alone (CPU, no autograd).

What it measures
    At length L (default 16384), batch 1, 8 heads, head dim 64, fp32, under `torch.no_grad()`, single-threaded
    (`--threads`), the median over `--repeats` back-to-back pairs (after one warm-up call of each) of the ratio of
    - `sdpa`: `F.scaled_dot_product_attention(q, k, v, is_causal=True)`, the baseline every ratio divides by;
    - each piece through `attention(..., backend="auto")`: `chunk:C` (NoPE), `sinks` (causal), `softcap:50`
      (causal), `rope,fraction=0.25` (partial rotary), `rope,proportional=0.75` (p-RoPE), `temp_tuning` (a per-query
      temperature), `gate` as its own projection and gating over causal NoPE attention (the piece's cost alone),
      and `qknorm` / `gate` as their own operations plus RoPE attention;
    - a hybrid plan (`--plan`, default `rnope-swa,window=1024` on 4 layers of width 512): `GPT.forward_layers`
      over all layers, against the sum of each layer run alone (`forward_layers(start=i, stop=i + 1)`).
    Each ratio is a median of pairs run back to back, so it compares like with like on a machine whose load
    changes; the absolute times are not comparable across runs.

Usage
    .venv/bin/python benchmarks/hybrids.py                      # L = 16384, 3 repeats, JSON to stdout's last line
    .venv/bin/python benchmarks/hybrids.py --length 4096 --repeats 5 --out hybrids.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from lextra.attention import attention, build_mask
from lextra.attention.pieces import PIECES
from lextra.model import GPT, GPTConfig
from lextra.positions import HeadDims, build_scheme

HEADS, HEAD_DIM = 8, 64


def timed(call: Callable[[], object]) -> float:
    """Seconds of one call."""
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def paired_ratio(call: Callable[[], object], base: Callable[[], object], repeats: int) -> tuple[float, float, float]:
    """(median ratio, median seconds, median base seconds) of `repeats` back-to-back pairs of `call` and `base`,
    after one warm-up call of each: pairs, so that a machine whose load changes divides like by like."""
    call(), base()
    pairs = [(timed(call), timed(base)) for _ in range(repeats)]
    return (
        statistics.median(a / b for a, b in pairs),
        statistics.median(a for a, _ in pairs),
        statistics.median(b for _, b in pairs),
    )


def piece_calls(length: int, chunk: int) -> dict[str, Callable[[], object]]:
    """The calls timed against SDPA, by name."""
    q, k, v = (torch.randn(1, HEADS, length, HEAD_DIM) for _ in range(3))
    dims = HeadDims(HEADS, HEAD_DIM, HEADS * HEAD_DIM, 128)
    rope = build_scheme("rope", dims)
    partial = build_scheme("rope,fraction=0.25", dims)
    proportional = build_scheme("rope,proportional=0.75", dims)
    sinks = torch.randn(HEADS)
    tuning = PIECES.build("temp_tuning,beta=0.1,gamma=1024", dims)
    tau = 1.0 / tuning.scale(torch.arange(length))[None]
    qknorm = PIECES.build("qknorm", dims)
    gate = PIECES.build("gate", dims)
    x = torch.randn(1, length, HEADS * HEAD_DIM)

    def normed() -> object:
        qn, kn = qknorm(q, k)
        return attention(qn, kn, v, scheme=rope)

    return {
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        f"chunk:{chunk}": lambda: attention(q, k, v, mask=f"chunk:{chunk}"),
        "sinks": lambda: attention(q, k, v, sinks=sinks),
        "rope+sinks": lambda: attention(q, k, v, scheme=rope, sinks=sinks),
        "softcap:50": lambda: attention(q, k, v, softcap=50.0),
        "rope,fraction=0.25": lambda: attention(q, k, v, scheme=partial),
        "rope,proportional=0.75": lambda: attention(q, k, v, scheme=proportional),
        "temp_tuning": lambda: attention(q, k, v, temperature=tau),
        "rope+qknorm": normed,
        "gate": lambda: gate(x, attention(q, k, v)),
        "rope+gate": lambda: gate(x, attention(q, k, v, scheme=rope)),
    }


def hybrid_times(plan: str, length: int, n_layer: int, repeats: int) -> dict[str, float]:
    """The plan's forward over all layers against the sum of its layers run alone, in pairs (`paired_ratio`)."""
    config = GPTConfig(n_layer=n_layer, n_head=HEADS, d_model=HEADS * HEAD_DIM, train_len=128, layer_plan=plan)
    model = GPT(config).eval()
    x = torch.randn(1, length, config.d_model)
    positions = torch.arange(length)
    mask = build_mask("causal")

    def alone() -> None:
        for i in range(n_layer):
            model.forward_layers(x, positions, mask, start=i, stop=i + 1)

    ratio, whole, layers = paired_ratio(lambda: model.forward_layers(x, positions, mask), alone, repeats)
    return {"whole_s": whole, "layers_alone_s": layers, "ratio": ratio}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=16384)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--chunk", type=int, default=1024)
    parser.add_argument("--plan", default="rnope-swa,window=1024")
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with torch.no_grad():
        calls = piece_calls(args.length, args.chunk)
        base = calls.pop("sdpa")
        ratios, times = {}, {}
        for name, call in calls.items():
            ratios[name], times[name], times[f"sdpa (paired with {name})"] = paired_ratio(call, base, args.repeats)
            print(f"{name:<24} {times[name] * 1000:9.1f} ms  {ratios[name]:5.2f}x sdpa (median of pairs)", flush=True)
        hybrid = hybrid_times(args.plan, args.length, args.n_layer, args.repeats)
    print(f"plan {args.plan}: whole {hybrid['whole_s']:.2f} s, layers alone {hybrid['layers_alone_s']:.2f} s, "
          f"{hybrid['ratio']:.3f}x")  # fmt: skip
    record = {
        "length": args.length,
        "threads": args.threads,
        "repeats": args.repeats,
        "times_s": times,
        "ratio_to_sdpa": ratios,
        "hybrid": {"plan": args.plan, "n_layer": args.n_layer, **hybrid},
    }
    if args.out:
        args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record))


if __name__ == "__main__":
    main()
