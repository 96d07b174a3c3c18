"""Training throughput (tokens/s) of lextra's GPT per position scheme, relative to NoPE (plain fused SDPA).

What it measures
    For every registered position scheme (`SCHEMES.names()`) and every training length L_tr, one full training
    step of a GPT of width 256, depth 4, 8 heads (head dim 32), MLP ratio 4, byte vocabulary (256), at
    batch = 8192 // L_tr sequences (8192 tokens per step): forward, next-token cross-entropy, backward, gradient
    clipping and the AdamW step, built exactly as `lextra.train` builds them (`GPT`, `make_optimizer`, fp32, the
    attention backend `auto`). Reported: the median step time over `--steps` timed steps after `--warmup`
    untimed ones, tokens/s = 8192 / median step time, and the process's peak RSS.
    The baseline is scheme `nope` (no position signal at all, so every layer's attention is exactly one fused
    `F.scaled_dot_product_attention(q, k, v, is_causal=True)` call) at the same L, measured in the same run.

How it measures
    Every (scheme, L) cell runs in a fresh subprocess (the driver never imports torch), single-threaded by
    default (`--threads`). The NoPE baseline runs in its own subprocesses too, interleaved with the scheme cells
    (first at each L, again every `--baseline-every` cells, and last); its value is the median of those runs,
    their spread is printed as `drift` (a machine that got busier during the run shows up there).

How to read it
    Table cells are "tokens/s (step x)": throughput, and the median step time over NoPE's at the same L
    (1.00x = as fast as plain causal SDPA; 2.00x = each step takes twice as long). The path column says how
    `auto` runs attention under training: `sdpa` (one fused call), `chunked/strided` (query blocks whose bias is
    a strided view of one fixed per-distance table, flash kernel: ALiBi, Sandwich), `chunked/gathered` (a learned
    table needs autograd, so each block's (H, block, keys) bias is gathered, in fp64 so the gradient sums stay
    exact, and SDPA, given a float mask that requires grad, runs its math kernel: T5, KERPLE, FIRE) and, for FIRE
    past its 512-position threshold, `+per-query` (its bias depends on the query row, so it is built per (query,
    key) pair: the MLP as linear pieces, a bucketize and two gathers in fp64).

Usage
    .venv/bin/python benchmarks/train_step.py                         # all schemes, L_tr = 128, 512, 1024
    .venv/bin/python benchmarks/train_step.py --quick                 # smoke run: L_tr = 128, 512, 1 + 1 steps
    .venv/bin/python benchmarks/train_step.py --schemes rope,alibi,t5 --lengths 1024 --steps 10
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness
from harness import BaseCell, HelpFormatter, csv_list, file_sha, md_table, ratio_text

D_MODEL = 256
N_LAYER = 4
N_HEAD = 8
VOCAB = 256
TOKENS_PER_STEP = 8192
DEFAULT_LENGTHS = (128, 512, 1024)
QUICK_LENGTHS = (128, 512)
BASELINE = "nope"


# --------------------------------------------------------------------------------------------------------------
# worker: one (scheme, L) cell in a fresh process
# --------------------------------------------------------------------------------------------------------------


def _attention_path(model: Any, L: int) -> tuple[str, int | None]:
    """What `backend="auto"` does in layer 0 under training at length L, and its query block size (chunked)."""
    import torch

    import lextra.attention.backends as backends
    from lextra.attention import build_mask

    scheme = model.scheme_for(0)
    mask = build_mask("causal", L)
    pos = torch.arange(L)
    try:  # private helpers for the block size: informative only, so tolerate their changing
        with torch.enable_grad():
            path = backends.attention_path(scheme, mask, pos, pos)
            if path == "chunked/strided":
                return path, getattr(backends, "LEAN_BLOCK", None) or min(L, backends.MAX_BLOCK)
            if path == "sdpa":
                return path, None
            block = backends._block_size(scheme, L, N_HEAD, None)
        if scheme.bias_per_query and not scheme.distance_only(pos):
            path += "+per-query"
        return path, block
    except (AttributeError, TypeError) as exc:
        return f"unknown ({exc!r})", None


def run_cell(spec: dict[str, Any]) -> dict[str, Any]:
    """Measure one cell (`spec`: scheme, length, warmup, steps, threads); returns a JSON-able dict."""
    import torch

    import lextra.attention.backends as backends
    from lextra.model import GPT, GPTConfig
    from lextra.train import TrainConfig, make_optimizer

    torch.set_num_threads(int(spec["threads"]))
    torch.manual_seed(0)
    L = int(spec["length"])
    batch = max(1, TOKENS_PER_STEP // L)
    config = GPTConfig(
        vocab_size=VOCAB, n_layer=N_LAYER, n_head=N_HEAD, d_model=D_MODEL, train_len=L, layer_plan=spec["scheme"]
    )
    train = TrainConfig(model=config, batch_size=batch, steps=1, warmup=0)
    model = GPT(config)
    model.train()
    optimizer = make_optimizer(model, train)
    for group in optimizer.param_groups:  # as lextra.train sets them (constant here: no schedule is timed)
        group["lr"] = train.lr * group["lr_scale"]
    tokens = torch.randint(0, VOCAB, (batch, L + 1), generator=torch.Generator().manual_seed(0))
    path, block = _attention_path(model, L)

    def step() -> float:
        # the body of lextra.train's loop (fp32): forward, loss, zero_grad, backward, clip, AdamW step
        loss = model.loss(tokens)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train.grad_clip)
        optimizer.step()
        return float(loss.detach())

    losses = [step() for _ in range(int(spec["warmup"]))]  # optimizer state, allocator caches, kernels
    times_ms, peak_before, peak_after = harness.timed_calls(lambda: losses.append(step()), int(spec["steps"]))
    median_ms = statistics.median(times_ms)
    if not all(math.isfinite(x) for x in losses):
        raise FloatingPointError(f"non-finite loss during the benchmark: {losses}")
    return {
        "num_threads": torch.get_num_threads(),
        "batch": batch,
        "tokens_per_step": batch * L,
        "parameters": model.num_parameters(),
        "path": path,
        "block_size": block,
        "times_ms": times_ms,
        "time_ms": median_ms,
        "tokens_per_s": batch * L / (median_ms / 1e3),
        "peak_rss_mib": peak_after / 1024,
        "peak_rss_before_timed_mib": peak_before / 1024,
        "losses": losses,
        "backends_sha": file_sha(backends.__file__),
    }


# --------------------------------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------------------------------


@dataclass
class Cell(BaseCell):
    """One measurement: a scheme at L_tr, or a NoPE baseline run (kind = "baseline")."""

    kind: str  # "baseline" or "scheme"
    scheme: str
    length: int

    @property
    def label(self) -> str:
        """The cell's name in progress lines."""
        return f"{self.scheme} (baseline)" if self.kind == "baseline" else self.scheme


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (`--quick` applied, bounds checked)."""
    parser = argparse.ArgumentParser(
        description="Training tokens/s of lextra's GPT (width 256, depth 4, 8 heads, 8192 tokens per step, AdamW, "
        "fp32) per position scheme, relative to NoPE (plain fused causal SDPA) at the same training length.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--schemes", default="all", help="comma list of position schemes, or 'all'")
    parser.add_argument("--lengths", default=",".join(map(str, DEFAULT_LENGTHS)), help="comma list of L_tr")
    parser.add_argument("--steps", type=int, default=5, help="timed training steps per cell (median reported)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed training steps before them")
    harness.add_threads(parser)
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: L_tr 128,512, 1 warm-up + 1 timed step (overrides those)"
    )
    parser.add_argument(
        "--baseline-every", type=int, default=6, help="rerun the NoPE baseline after this many scheme cells"
    )
    harness.add_cell_timeout(parser, 900.0)
    harness.add_out_worker(parser, "benchmarks/results/train_step.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.lengths = ",".join(map(str, QUICK_LENGTHS))
        args.steps, args.warmup = 1, 1
    if args.threads < 1 or args.steps < 1 or args.warmup < 0 or args.baseline_every < 1:
        parser.error("--threads, --steps and --baseline-every must be >= 1, --warmup >= 0")
    bad = [x for x in csv_list(args.lengths) if not x.isdigit() or int(x) < 1 or int(x) > TOKENS_PER_STEP]
    if bad:
        parser.error(f"--lengths must be integers in 1..{TOKENS_PER_STEP}; got {', '.join(bad)}")
    return args


def plan(schemes: list[str], lengths: list[int], every: int) -> list[Cell]:
    """Per L: the baseline, the scheme cells with the baseline again every few, then the baseline once more."""
    cells: list[Cell] = []
    others = [s for s in schemes if s != BASELINE]
    for L in lengths:
        cells += harness.interleave(
            [Cell("scheme", scheme, L) for scheme in others], every, lambda L=L: Cell("baseline", BASELINE, L)
        )
    return cells


def summarise_baselines(cells: list[Cell], lengths: list[int]) -> dict[int, dict[str, Any]]:
    """Per L: the median over the baseline runs' median step times, and the runs' spread."""

    def summary(runs: list[Cell], times: list[float]) -> dict[str, Any]:
        median = statistics.median(times)
        return {
            "time_ms": median,
            "tokens_per_s": runs[0].result["tokens_per_step"] / (median / 1e3),
            "peak_rss_mib": statistics.median(c.result["peak_rss_mib"] for c in runs),
            "run_times_ms": times,
            "drift": max(times) / min(times),
            "path": runs[0].result["path"],
        }

    return harness.summarise_baselines([c for c in cells if c.kind == "baseline"], lengths, summary)


def add_ratios(cells: list[Cell], baselines: dict[int, dict[str, Any]]) -> None:
    """Add each scheme cell's step-time ratio to the baseline at its L."""
    for cell in cells:
        base = baselines.get(cell.length, {})
        if cell.kind == "scheme" and cell.ok and "time_ms" in base:
            cell.result["step_ratio"] = cell.result["time_ms"] / base["time_ms"]


def _path_column(entries: list[str]) -> str:
    """One path if every L took it, else them all."""
    return entries[0] if len(set(entries)) == 1 else " / ".join(e or "-" for e in entries)


def markdown(cells: list[Cell], schemes: list[str], lengths: list[int], baselines: dict[int, dict[str, Any]]) -> str:
    """Rows: NoPE (the baseline, absolute) then each scheme; columns: L_tr. Cells: tokens/s (step time x)."""
    by_key = {(c.scheme, c.length): c for c in cells if c.kind == "scheme"}
    header = ["scheme", "attention path (training)", *(f"L_tr={L} (batch {TOKENS_PER_STEP // L})" for L in lengths)]
    base_row = [f"**{BASELINE}** (baseline)", _path_column([baselines[L].get("path", "?") for L in lengths])]
    for L in lengths:
        base = baselines[L]
        if "error" in base:
            base_row.append("err")
        else:
            base_row.append(
                f"**{base['tokens_per_s']:,.0f} tok/s, {base['time_ms']:,.0f} ms** (drift {base['drift']:.2f})"
            )
    rows = [base_row]
    for scheme in schemes:
        if scheme == BASELINE:
            continue
        entries, paths = [], []
        for L in lengths:
            cell = by_key.get((scheme, L))
            if cell is None:
                entries.append("")
                paths.append("")
            elif not cell.ok:
                entries.append("err")
                paths.append(cell.result.get("path", "?"))
            else:
                ratio = ratio_text(cell.result.get("step_ratio"))
                entries.append(f"{cell.result['tokens_per_s']:,.0f} ({ratio})")
                paths.append(cell.result["path"])
        rows.append([scheme, _path_column(paths), *entries])
    return md_table(header, rows)


def absolute_markdown(cells: list[Cell], schemes: list[str], lengths: list[int]) -> str:
    """Median step ms / peak RSS MiB of every scheme cell (NoPE: its first run)."""
    by_key: dict[tuple[str, int], Cell] = {}
    for c in cells:
        by_key.setdefault((c.scheme, c.length), c)
    header = ["scheme", *(f"L_tr={L}: step ms / peak RSS MiB" for L in lengths)]
    rows = []
    for scheme in [BASELINE, *(s for s in schemes if s != BASELINE)]:
        entries = []
        for L in lengths:
            cell = by_key.get((scheme, L))
            if cell is None:
                entries.append("")
            elif not cell.ok:
                entries.append("err")
            else:
                entries.append(f"{cell.result['time_ms']:,.0f} / {cell.result['peak_rss_mib']:,.0f}")
        rows.append([scheme, *entries])
    return md_table(header, rows)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or, with `--worker`, one cell of it)."""
    args = parse_args(argv)
    if args.worker is not None:
        return harness.worker_main(run_cell, args.worker)
    schemes = harness.scheme_names(args.schemes)
    lengths = [int(x) for x in csv_list(args.lengths)]
    cells = plan(schemes, lengths, args.baseline_every)
    meta = harness.machine_meta(
        args.threads,
        (
            "src/lextra/attention/backends/chunked.py",
            "src/lextra/attention/backends/tiled.py",
            "src/lextra/positions/bias.py",
            "src/lextra/model.py",
        ),
    )
    print(
        f"train-step benchmark: {len(schemes)} schemes x L_tr={lengths}, {len(cells)} subprocess cells, "
        f"{args.warmup} warm-up + {args.steps} timed steps each, {args.threads} thread(s), torch {meta['torch']}",
        file=sys.stderr,
    )
    total_s = harness.run_cells(
        cells,
        Path(__file__).resolve(),
        lambda cell: {
            "scheme": cell.scheme,
            "length": cell.length,
            "warmup": args.warmup,
            "steps": args.steps,
            "threads": args.threads,
        },
        args.threads,
        args.cell_timeout,
        lambda cell: f"L={cell.length:<5d} {cell.label:<16s}",
        lambda r: f"{r['time_ms']:9.0f} ms {r['tokens_per_s']:9.0f} tok/s {r['peak_rss_mib']:7.0f} MiB  {r['path']}",
    )

    baselines = summarise_baselines(cells, lengths)
    add_ratios(cells, baselines)
    harness.finish_meta(meta, total_s, cells)
    load = harness.load_text(meta)
    footer = (
        f"\ntorch {meta['torch']}, {args.threads} thread(s), {meta['cpu_model']} ({meta['cpu_count']} cores, {load}), "
        f"{meta['date']}; GPT d={D_MODEL}, {N_LAYER} layers, {N_HEAD} heads (head dim {D_MODEL // N_HEAD}), "
        f"vocab {VOCAB}, {TOKENS_PER_STEP} tokens per step, fp32, AdamW; {args.warmup} warm-up + median of "
        f"{args.steps} timed steps per cell; total {total_s / 60:.1f} min\n"
    )
    report = (
        "Training tokens/s per scheme (step x = median step time / NoPE's at the same L_tr; "
        "NoPE = plain fused causal SDPA):\n\n"
        + markdown(cells, schemes, lengths, baselines)
        + "\nAbsolute: median step ms / peak RSS MiB:\n\n"
        + absolute_markdown(cells, schemes, lengths)
        + footer
    )
    data = {
        "meta": meta,
        "config": {
            "schemes": schemes,
            "lengths": lengths,
            "steps": args.steps,
            "warmup": args.warmup,
            "baseline": BASELINE,
            "baseline_every": args.baseline_every,
            "model": {"d_model": D_MODEL, "n_layer": N_LAYER, "n_head": N_HEAD, "vocab": VOCAB},
            "tokens_per_step": TOKENS_PER_STEP,
        },
        "baseline": {str(L): v for L, v in baselines.items()},
        "cells": [
            {"kind": c.kind, "scheme": c.scheme, "length": c.length, "wall_s": round(c.wall_s, 2)} | c.result
            for c in cells
        ],
    }
    harness.write_report(args.out, data, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
