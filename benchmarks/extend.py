"""Forward cost of the training-free extension methods (`attention` under a method, `tiled` backend) beside SDPA.

What it measures
    For every registered extension method (`EXTENSIONS.names()`, the authors' defaults at training length
    `--train-len`, 4096 by default: Self-Extend W = 1024, ReRoPE w = 512, DCA s = 3072 / w = 256, ...) and every
    length L, one forward call of `attention(q, k, v, scheme=rope, extension=method,
    backend="tiled")` on batch 1, 8 heads, head dim 64, fp32, under `torch.no_grad()`: its wall time and peak
    extra memory (growth of the process's peak RSS across the timed calls, after the inputs are allocated and one
    warm-up call at a small length). The baseline is plain `F.scaled_dot_product_attention(q, k, v,
    is_causal=True)` on q and k that are already rotated.

How it measures
    As benchmarks/attention.py (`harness`): every (method, L) cell in a fresh subprocess, single-threaded by
    default, the median of `--repeats` calls (default 3, 1 at L >= 16384); the SDPA baseline in its own
    subprocesses, interleaved with the method cells, reported as the median of those runs with their spread.

How to read it
    "time x / mem x": median time over SDPA's, peak extra memory over SDPA's, at the same L. The passes column
    names the method's passes. Extra memory is RSS (includes what the allocator keeps after `free`): read it as
    an order of magnitude, the time ratio as the precise number.

Usage
    .venv/bin/python benchmarks/extend.py                          # every method, L = 16384
    .venv/bin/python benchmarks/extend.py --quick                  # smoke run, L = 1024
    .venv/bin/python benchmarks/extend.py --methods rerope,dca --lengths 4096,16384
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness
from harness import BaseCell, HelpFormatter, csv_list, file_sha, md_table, ratio_text

BATCH = 1
HEADS = 8
HEAD_DIM = 64
DEFAULT_LENGTHS = (16384,)
QUICK_LENGTHS = (1024,)
LONG = 16384
WARMUP_LEN = 128
BASELINE = "sdpa"


def run_cell(spec: dict[str, Any]) -> dict[str, Any]:
    """Measure one cell (`spec`: kind, method, length, repeats, threads, train_len); returns a JSON-able dict."""
    import torch
    import torch.nn.functional as F

    from lextra.attention import attention
    from lextra.extend import build_extension
    from lextra.positions import HeadDims, build_scheme

    torch.set_num_threads(int(spec["threads"]))
    torch.manual_seed(0)
    L, repeats, train_len = int(spec["length"]), int(spec["repeats"]), int(spec["train_len"])
    scheme = build_scheme("rope", HeadDims(HEADS, HEAD_DIM, HEADS * HEAD_DIM, train_len)).eval()
    result: dict[str, Any] = {"num_threads": torch.get_num_threads()}

    if spec["kind"] == BASELINE:

        def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def inputs(n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            q, k, v = (torch.randn(BATCH, HEADS, n, HEAD_DIM) for _ in range(3))
            for lo in range(0, n, 1024):  # rotated a slice at a time: no memory peak before the timed calls
                hi = min(lo + 1024, n)
                pos = torch.arange(lo, hi)
                q[..., lo:hi, :], k[..., lo:hi, :] = scheme.rotate(q[..., lo:hi, :], k[..., lo:hi, :], pos, pos)
            return q, k, v

    else:
        import lextra.attention.backends.tiled as tiled

        method = build_extension(spec["method"], train_len)
        result["method_repr"] = repr(method)
        result["passes"] = "+".join(p.name for p in method.passes(L - 1, L - 1))
        result["tiled_sha"] = file_sha(tiled.__file__)

        def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return attention(q, k, v, scheme=scheme, extension=method, backend="tiled")

        def inputs(n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            return tuple(torch.randn(BATCH, HEADS, n, HEAD_DIM) for _ in range(3))  # type: ignore[return-value]

    with torch.no_grad():
        call(*inputs(min(WARMUP_LEN, L)))
        q, k, v = inputs(L)
        times_ms, peak_before, peak_after = harness.timed_calls(lambda: call(q, k, v), repeats)
    result.update(
        times_ms=times_ms,
        time_ms=statistics.median(times_ms),
        extra_mib=(peak_after - peak_before) / 1024,
        peak_rss_mib=peak_after / 1024,
    )
    return result


@dataclass
class Cell(BaseCell):
    """One measurement: a method at length L, or an SDPA baseline run (method = "sdpa")."""

    kind: str
    method: str
    length: int
    repeats: int


def method_names(requested: str) -> list[str]:
    """The registered extension methods (read in a subprocess so that the driver never imports torch)."""
    code = "from lextra.extend import EXTENSIONS; print(','.join(EXTENSIONS.names()))"
    known = csv_list(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)
    return harness.select_names(requested, known, "extension method")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (`--quick` applied, bounds checked)."""
    parser = argparse.ArgumentParser(
        description="Forward time and peak extra memory of each extension method relative to causal SDPA.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--methods", default="all", help="comma list of extension methods, or 'all'")
    parser.add_argument("--lengths", default=",".join(map(str, DEFAULT_LENGTHS)), help="comma list of L")
    harness.add_quick_repeats(parser, QUICK_LENGTHS, LONG)
    harness.add_threads(parser)
    parser.add_argument("--train-len", type=int, default=4096, help="training length the methods' defaults scale with")
    parser.add_argument("--baseline-every", type=int, default=4, help="rerun the SDPA baseline after this many cells")
    harness.add_cell_timeout(parser, 1800.0)
    harness.add_out_worker(parser, "benchmarks/results/extend.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.lengths = ",".join(map(str, QUICK_LENGTHS))
    if args.threads < 1 or (args.repeats is not None and args.repeats < 1) or args.baseline_every < 1:
        parser.error("--threads, --repeats and --baseline-every must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or, with `--worker`, one cell of it)."""
    args = parse_args(argv)
    if args.worker is not None:
        return harness.worker_main(run_cell, args.worker, error_chars=None)
    methods = method_names(args.methods)
    lengths = [int(x) for x in csv_list(args.lengths)]
    cells: list[Cell] = []
    for L in lengths:
        repeats = harness.default_repeats(args.repeats, L, LONG)
        cells += harness.interleave(
            [Cell("method", name, L, repeats) for name in methods],
            args.baseline_every,
            lambda L=L, repeats=repeats: Cell(BASELINE, BASELINE, L, repeats),
        )
    meta = harness.machine_meta(
        args.threads,
        (
            "src/lextra/extend/methods.py",
            "src/lextra/attention/backends/chunked.py",
            "src/lextra/attention/backends/tiled.py",
        ),
    )
    meta |= {"shape": {"batch": BATCH, "heads": HEADS, "head_dim": HEAD_DIM, "dtype": "float32"}}
    meta["train_len"] = args.train_len
    total_s = harness.run_cells(
        cells,
        Path(__file__).resolve(),
        lambda c: {
            "kind": c.kind,
            "method": c.method,
            "length": c.length,
            "repeats": c.repeats,
            "threads": args.threads,
            "train_len": args.train_len,
        },
        args.threads,
        args.cell_timeout,
        lambda c: f"L={c.length:<6d} {c.method:<14s}",
        lambda r: f"{r['time_ms']:9.1f} ms {r['extra_mib']:8.1f} MiB",
    )

    def summary(runs: list[Cell], times: list[float]) -> dict[str, Any]:
        mems = [c.result["extra_mib"] for c in runs]
        drift = max(times) / min(times) if min(times) > 0 else None
        return {"time_ms": statistics.median(times), "extra_mib": statistics.median(mems), "drift": drift}

    baselines = harness.summarise_baselines([c for c in cells if c.kind == BASELINE], lengths, summary)
    rows = []
    for L in lengths:
        base = baselines[L]
        if "error" in base:
            rows.append(["**SDPA is_causal**", str(L), "-", "err", "err"])
            continue
        rows.append(
            [
                "**SDPA is_causal** (rotated q, k)",
                str(L),
                "-",
                f"{base['time_ms']:.0f} ms",
                f"{base['extra_mib']:.1f} MiB",
            ]
        )
        for c in cells:
            if c.kind == BASELINE or c.length != L:
                continue
            if not c.ok:
                rows.append([c.method, str(L), "-", "err", "err"])
                continue
            t = c.result["time_ms"] / base["time_ms"]
            m = c.result["extra_mib"] / base["extra_mib"] if base["extra_mib"] >= harness.MIN_MEM_BASE_MIB else None
            c.result.update(time_ratio=t, mem_ratio=m)
            rows.append(
                [
                    c.result["method_repr"],
                    str(L),
                    c.result["passes"],
                    f"{c.result['time_ms']:.0f} ms ({ratio_text(t)})",
                    f"{c.result['extra_mib']:.1f} MiB ({ratio_text(m)})",
                ]
            )
    harness.finish_meta(meta, total_s, cells, backends_sha=False)
    drifts = ", ".join(f"{b.get('drift') or 0:.2f}" for b in baselines.values())
    report = (
        md_table(["method", "L", "passes (last query)", "time (x SDPA)", "peak extra memory (x SDPA)"], rows)
        + f"\ntorch {meta['torch']}, {args.threads} thread(s), {meta['cpu_model']}, {meta['date']}, batch {BATCH}, "
        f"{HEADS} heads, head dim {HEAD_DIM}, fp32, no_grad, rope, L_train {args.train_len}; "
        f"SDPA drift {drifts}; {harness.load_text(meta)}\n"
    )
    data = {
        "meta": meta,
        "baseline": {str(L): v for L, v in baselines.items()},
        "cells": [
            {"kind": c.kind, "method": c.method, "length": c.length, "repeats": c.repeats, "wall_s": round(c.wall_s, 2)}
            | c.result
            for c in cells
        ],
    }
    harness.write_report(args.out, data, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
