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
    a strided view of one fixed per-distance table, flash kernel: ALiBi, Sandwich), `chunked/gather` (a learned
    table needs autograd, so each block's (H, block, keys) bias is gathered, in fp64 so the gradient sums stay
    exact, and SDPA, given a float mask that requires grad, runs its math kernel: T5, KERPLE, FIRE) and, for FIRE
    past its 512-position threshold, `+pair-MLP` (its MLP runs per (query, key) pair).

Usage
    .venv/bin/python benchmarks/train_step.py                         # all schemes, L_tr = 128, 512, 1024
    .venv/bin/python benchmarks/train_step.py --quick                 # smoke run: L_tr = 128, 512, 1 + 1 steps
    .venv/bin/python benchmarks/train_step.py --schemes rope,alibi,t5 --lengths 1024 --steps 10
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

D_MODEL = 256
N_LAYER = 4
N_HEAD = 8
VOCAB = 256
TOKENS_PER_STEP = 8192
DEFAULT_LENGTHS = (128, 512, 1024)
QUICK_LENGTHS = (128, 512)
BASELINE = "nope"
ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------------------------------------------
# small helpers, also used by xtransformers_compare.py (stdlib only: the driver must not import torch)
# --------------------------------------------------------------------------------------------------------------


def csv_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def file_sha(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]


def clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60:d}:{minutes % 60:02d}:{secs:02d}"


def ratio_text(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}x" if value < 10 else f"{value:.1f}x" if value < 100 else f"{value:.0f}x"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, except the uninformative None / False ones."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False):
            return action.help
        return super()._get_help_string(action)


def run_worker(script: Path, spec: dict[str, Any], threads: int, timeout: float) -> dict[str, Any]:
    """Run `script --worker SPEC` in a fresh interpreter with `threads` OpenMP / MKL threads; its last stdout line
    is the JSON result. Failures (exception, signal, timeout) come back as {"error": ...}."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    command = [sys.executable, str(script), "--worker", json.dumps(spec)]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:g} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode == 0 and lines:
        try:
            return json.loads(lines[-1])
        except json.JSONDecodeError:
            pass
    reason = f"exit status {proc.returncode}"
    if proc.returncode < 0:
        reason = f"killed by signal {-proc.returncode}" + (" (out of memory?)" if proc.returncode == -9 else "")
    return {"error": reason, "stderr_tail": proc.stderr[-2000:]}


def worker_main(run_cell: Any, raw: str) -> int:
    """Worker entry: run one cell from its JSON spec and print the JSON result (or the error) as the last line."""
    spec = json.loads(raw)
    try:
        result = run_cell(spec)
    except Exception as exc:  # e.g. RuntimeError (allocation failed), MemoryError: the driver records it
        result = {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
    print(json.dumps(result), flush=True)
    return 0


def machine_meta(threads: int) -> dict[str, Any]:
    """Versions, CPU, date, load and the hashes of the attention sources (read without importing torch here)."""
    code = "import torch; print(torch.__version__)"
    torch_version = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()
    cpu_model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    sources = {}
    for rel in ("src/lextra/attention/backends.py", "src/lextra/positions/bias.py", "src/lextra/model.py"):
        path = ROOT / rel
        sources[rel] = file_sha(path) if path.exists() else None
    return {
        "torch": torch_version,
        "python": platform.python_version(),
        "threads": threads,
        "cpu_model": cpu_model,
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "loadavg_start": os.getloadavg(),
        "thp_mem_alloc_enable": os.environ.get("THP_MEM_ALLOC_ENABLE"),
        "source_sha256_12": sources,
    }


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
    try:  # private helpers: informative only, so tolerate their changing
        if backends._sdpa_applies(scheme, mask, pos, pos):
            return "sdpa", None
        with torch.enable_grad():
            lean = backends._toeplitz_possible(scheme, mask, pos)
        if lean:
            return "chunked/strided", getattr(backends, "LEAN_BLOCK", None) or min(L, backends.MAX_BLOCK)
        block = backends._block_size(scheme, L, N_HEAD, None)
        path = "chunked/gather"
        if scheme.bias_per_query and not scheme.distance_only(pos):
            path += "+pair-MLP"
        return path, block
    except (AttributeError, TypeError) as exc:
        return f"unknown ({exc!r})", None


def run_cell(spec: dict[str, Any]) -> dict[str, Any]:
    """Measure one cell (`spec`: scheme, length, warmup, steps, threads); returns a JSON-able dict."""
    import resource

    import torch

    import lextra.attention.backends as backends
    from lextra.model import GPT, GPTConfig
    from lextra.train import TrainConfig, make_optimizer

    torch.set_num_threads(int(spec["threads"]))
    torch.manual_seed(0)
    L = int(spec["length"])
    batch = max(1, TOKENS_PER_STEP // L)
    config = GPTConfig(
        vocab_size=VOCAB, n_layer=N_LAYER, n_head=N_HEAD, d_model=D_MODEL, train_len=L, scheme=spec["scheme"]
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
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times_ms = []
    for _ in range(int(spec["steps"])):
        start = time.perf_counter()
        losses.append(step())
        times_ms.append((time.perf_counter() - start) * 1e3)
    peak_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
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
class Cell:
    """One measurement: a scheme at L_tr, or a NoPE baseline run (kind = "baseline")."""

    kind: str  # "baseline" or "scheme"
    scheme: str
    length: int
    result: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return "error" not in self.result and "time_ms" in self.result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Training tokens/s of lextra's GPT (width 256, depth 4, 8 heads, 8192 tokens per step, AdamW, "
        "fp32) per position scheme, relative to NoPE (plain fused causal SDPA) at the same training length.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--schemes", default="all", help="comma list of position schemes, or 'all'")
    parser.add_argument("--lengths", default=",".join(map(str, DEFAULT_LENGTHS)), help="comma list of L_tr")
    parser.add_argument("--steps", type=int, default=5, help="timed training steps per cell (median reported)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed training steps before them")
    parser.add_argument("--threads", type=int, default=1, help="torch / OpenMP threads per cell")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: L_tr 128,512, 1 warm-up + 1 timed step (overrides those)"
    )
    parser.add_argument(
        "--baseline-every", type=int, default=6, help="rerun the NoPE baseline after this many scheme cells"
    )
    parser.add_argument("--cell-timeout", type=float, default=900.0, help="seconds before a cell is abandoned")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/train_step.json"), help="JSON output")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
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


def scheme_names(requested: str) -> list[str]:
    """The registered schemes (read in a subprocess so that the driver never imports torch)."""
    code = "from lextra.positions import SCHEMES; print(','.join(SCHEMES.names()))"
    known = csv_list(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)
    if requested == "all":
        return known
    names = csv_list(requested)
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SystemExit(f"unknown scheme(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return names


def plan(schemes: list[str], lengths: list[int], every: int) -> list[Cell]:
    """Per L: the baseline, the scheme cells with the baseline again every few, then the baseline once more."""
    cells: list[Cell] = []
    others = [s for s in schemes if s != BASELINE]
    for L in lengths:
        cells.append(Cell("baseline", BASELINE, L))
        for i, scheme in enumerate(others):
            if i and i % every == 0:
                cells.append(Cell("baseline", BASELINE, L))
            cells.append(Cell("scheme", scheme, L))
        cells.append(Cell("baseline", BASELINE, L))
    return cells


def summarise_baselines(cells: list[Cell], lengths: list[int]) -> dict[int, dict[str, Any]]:
    """Per L: the median over the baseline runs' median step times, and the runs' spread."""
    out: dict[int, dict[str, Any]] = {}
    for L in lengths:
        runs = [c for c in cells if c.kind == "baseline" and c.length == L and c.ok]
        if not runs:
            out[L] = {"error": "every baseline run failed"}
            continue
        times = [c.result["time_ms"] for c in runs]
        median = statistics.median(times)
        out[L] = {
            "time_ms": median,
            "tokens_per_s": runs[0].result["tokens_per_step"] / (median / 1e3),
            "peak_rss_mib": statistics.median(c.result["peak_rss_mib"] for c in runs),
            "run_times_ms": times,
            "drift": max(times) / min(times),
            "path": runs[0].result["path"],
        }
    return out


def add_ratios(cells: list[Cell], baselines: dict[int, dict[str, Any]]) -> None:
    for cell in cells:
        base = baselines.get(cell.length, {})
        if cell.kind == "scheme" and cell.ok and "time_ms" in base:
            cell.result["step_ratio"] = cell.result["time_ms"] / base["time_ms"]


def _path_column(entries: list[str]) -> str:
    return entries[0] if len(set(entries)) == 1 else " / ".join(e or "-" for e in entries)


def markdown(cells: list[Cell], schemes: list[str], lengths: list[int], baselines: dict[int, dict[str, Any]]) -> str:
    """Rows: NoPE (the baseline, absolute) then each scheme; columns: L_tr. Cells: tokens/s (step time x)."""
    by_key = {(c.scheme, c.length): c for c in cells if c.kind == "scheme"}
    header = ["scheme", "attention path (training)", *(f"L_tr={L} (batch {TOKENS_PER_STEP // L})" for L in lengths)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    base_row = [f"**{BASELINE}** (baseline)", _path_column([baselines[L].get("path", "?") for L in lengths])]
    for L in lengths:
        base = baselines[L]
        if "error" in base:
            base_row.append("err")
        else:
            base_row.append(
                f"**{base['tokens_per_s']:,.0f} tok/s, {base['time_ms']:,.0f} ms** (drift {base['drift']:.2f})"
            )
    lines.append("| " + " | ".join(base_row) + " |")
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
        lines.append("| " + " | ".join([scheme, _path_column(paths), *entries]) + " |")
    return "\n".join(lines) + "\n"


def absolute_markdown(cells: list[Cell], schemes: list[str], lengths: list[int]) -> str:
    """Median step ms / peak RSS MiB of every scheme cell (NoPE: its first run)."""
    by_key: dict[tuple[str, int], Cell] = {}
    for c in cells:
        by_key.setdefault((c.scheme, c.length), c)
    header = ["scheme", *(f"L_tr={L}: step ms / peak RSS MiB" for L in lengths)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
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
        lines.append("| " + " | ".join([scheme, *entries]) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker is not None:
        return worker_main(run_cell, args.worker)
    schemes = scheme_names(args.schemes)
    lengths = [int(x) for x in csv_list(args.lengths)]
    cells = plan(schemes, lengths, args.baseline_every)
    meta = machine_meta(args.threads)
    print(
        f"train-step benchmark: {len(schemes)} schemes x L_tr={lengths}, {len(cells)} subprocess cells, "
        f"{args.warmup} warm-up + {args.steps} timed steps each, {args.threads} thread(s), torch {meta['torch']}",
        file=sys.stderr,
    )
    script = Path(__file__).resolve()
    t0 = time.perf_counter()
    for i, cell in enumerate(cells, 1):
        label = f"{cell.scheme} (baseline)" if cell.kind == "baseline" else cell.scheme
        print(
            f"[{i:3d}/{len(cells)}] {clock(time.perf_counter() - t0)} L={cell.length:<5d} {label:<16s}",
            end="",
            file=sys.stderr,
            flush=True,
        )
        spec = {"scheme": cell.scheme, "length": cell.length, "warmup": args.warmup, "steps": args.steps}
        start = time.perf_counter()
        cell.result = run_worker(script, spec | {"threads": args.threads}, args.threads, args.cell_timeout)
        cell.wall_s = time.perf_counter() - start
        if cell.ok:
            r = cell.result
            detail = f"{r['time_ms']:9.0f} ms {r['tokens_per_s']:9.0f} tok/s {r['peak_rss_mib']:7.0f} MiB  {r['path']}"
        else:
            detail = f"ERROR {cell.result['error']}"
        print(f" {detail}  ({cell.wall_s:.1f} s)", file=sys.stderr, flush=True)
    total_s = time.perf_counter() - t0

    baselines = summarise_baselines(cells, lengths)
    add_ratios(cells, baselines)
    meta.update(total_seconds=round(total_s, 1), loadavg_end=os.getloadavg())
    shas = sorted({c.result["backends_sha"] for c in cells if c.result.get("backends_sha")})
    if len(shas) > 1:
        print(f"warning: backends.py changed during the run (sha {shas})", file=sys.stderr)
    meta["backends_sha_seen"] = shas
    load = f"load average {meta['loadavg_start'][0]:.1f} at start, {meta['loadavg_end'][0]:.1f} at end"
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
    print(report)

    args.out.parent.mkdir(parents=True, exist_ok=True)
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
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(report)
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
