"""Forward cost of `lextra.attention.attention(..., backend="auto")` per position scheme and mask, next to SDPA.

What it measures
    For every registered position scheme (`SCHEMES.names()`), every mask (`causal`, `window:W` with W = the
    training length, `bca` with block = W / 2) and every length L, one forward call of
    `attention(q, k, v, scheme=..., mask=..., backend="auto")` on batch 1, 8 heads, head dim 64, fp32, under
    `torch.no_grad()`: its wall time and its peak extra memory (growth of the process's peak RSS,
    `ru_maxrss`, across the timed calls, measured after the inputs are allocated and after one warm-up call at
    a small length). The baseline is plain `F.scaled_dot_product_attention(q, k, v, is_causal=True)` at the same
    L, measured in the same run.

How it measures
    Every (scheme, mask, L) cell runs in a fresh subprocess so that its peak RSS is its own, single-threaded by
    default (`--threads`). Each cell repeats the call (`--repeats`; default 3, 1 at L >= 16384) and keeps the
    median time. The SDPA baseline runs in its own subprocesses too, interleaved with the scheme cells (at the
    start of each L, every `--baseline-every` cells and at the end); its reported value is the median of those
    runs and their spread (`drift`) is printed, so slow drift or a busy machine shows.

How to read it
    Table cells are "time x / mem x": the cell's median time over the SDPA time, and its extra memory over
    SDPA's extra memory, at the same L. 1.00x means as fast / as lean as fused causal SDPA. The header row gives
    SDPA's absolute ms and MiB. "err" marks a failed cell (its error is in the JSON), "-" a memory ratio whose
    baseline is below 1 MiB (too small to divide by). The backend column says what `auto` chose per L
    (`lextra.attention.backends.attention_path`): `sdpa` one fused call; `tiled` query blocks x key chunks merged
    by log-sum-exp (rotary schemes from 4k on: no rotated copies of q and k); `chunked/strided` query blocks whose
    bias is a strided view of one per-distance table; `chunked/gathered` a bias built per block (FIRE past its
    threshold); `chunked` query blocks with a mask alone.
    Extra memory is RSS, so it includes what glibc keeps after `free`: read it as an order of magnitude, the time
    ratio as the precise number (benchmarks/README.md, "How it measures").

The `flex` backend (`--backend flex`)
    The same cells through `attention(..., backend="flex")` (FlexAttention compiled, `lextra.attention.flex`).
    Its warm-up call runs at the measured length L, since a compiled kernel is specific to L's bucket: it
    compiles (or loads from inductor's on-disk cache) and builds the cached BlockMask, and its wall time is
    recorded as `first_call_ms`. The memory the warm-up freed is then returned to the system (`malloc_trim`)
    and the peak RSS reset (`/proc/self/clear_refs`), so the timed calls' extra memory is their own, as in a
    model where every layer reuses the compiled kernel and the BlockMask.

Content-dependent attention (`--content fox`)
    `--content fox` adds Forgetting Attention's row (Lin et al. 2025, arXiv 2503.02130): no position encoding and
    a forget bias c_i - c_j from random log forget gates (logsigmoid of N(3, 1) logits), through `auto` (the
    forget tiles on CPU, `lextra.attention.backends.forget`); with `--backward` the gates require grad too.

Attention pieces and the backward pass (`--pieces`, `--backward`)
    `--pieces diffattn` adds a row `SCHEME+diffattn` per scheme: the piece's `attend` hook around the call, as a
    layer runs it (differential attention: two maps of half-width q/k, each as two calls on the value's halves);
    `--rows nope+stickbreak,rope+diffattn` adds the rows named, one each.
    `--backward` times forward and backward (the gradients of q, k and v from the output's sum), the SDPA
    baseline's too, with autograd on.

Usage
    .venv/bin/python benchmarks/attention.py                       # all schemes x masks, L = 1k, 4k, 16k, 32k
    .venv/bin/python benchmarks/attention.py --quick               # smoke run, L = 256, 1024
    .venv/bin/python benchmarks/attention.py --schemes rope,alibi --masks causal --lengths 1024,4096
    .venv/bin/python benchmarks/attention.py --backend flex --schemes rope,fire --lengths 4096 --out flex.json
    .venv/bin/python benchmarks/attention.py --schemes rope --pieces diffattn --masks causal --lengths 16384 --backward
    .venv/bin/python benchmarks/attention.py --schemes none --content fox --masks causal --lengths 16384 --backward
    .venv/bin/python benchmarks/attention.py --schemes cope --masks causal --lengths 16384 --backward
    .venv/bin/python benchmarks/attention.py --schemes rope,alibi,cope --content fox \
        --rows nope+stickbreak,rope+diffattn --masks causal --lengths 16384 --backward   # issue 46's speed table
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness
from harness import BaseCell, HelpFormatter, csv_list, file_sha, md_table, ratio_text

BATCH = 1
HEADS = 8
HEAD_DIM = 64
DEFAULT_LENGTHS = (1024, 4096, 16384, 32768)
QUICK_LENGTHS = (256, 1024)
DEFAULT_MASKS = ("causal", "window", "bca")
LONG = 16384  # at and above this length a cell repeats once by default
WARMUP_LEN = 128
BASELINE = "sdpa"


# --------------------------------------------------------------------------------------------------------------
# worker: one cell in a fresh process (torch is only ever imported here, never in the driver, so that the
# driver's own RSS does not leak into a worker's ru_maxrss through fork/exec)
# --------------------------------------------------------------------------------------------------------------
#: content-dependent attention rows (`--content`): not position schemes, so built here
CONTENT_ROWS = ("fox",)


def run_cell(spec: dict[str, Any]) -> dict[str, Any]:
    """Measure one cell (`spec`: kind, scheme, mask, length, repeats, threads, train_len, backend); returns a
    JSON-able dict."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(int(spec["threads"]))
    torch.manual_seed(0)
    L, repeats = int(spec["length"]), int(spec["repeats"])
    result: dict[str, Any] = {"num_threads": torch.get_num_threads()}

    backward = bool(spec.get("backward"))
    extra: dict[str, torch.Tensor] = {}
    if spec["kind"] == BASELINE:
        key_dim = HEAD_DIM

        def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        result["backend"] = "sdpa"
    elif spec["scheme"] == "fox":
        from lextra.attention import attention, build_mask
        from lextra.attention.backends.forget import forget_backend
        from lextra.attention.forget_bias import ForgetBias, cumulative_log_gates

        key_dim = HEAD_DIM
        mask = build_mask(spec["mask"], train_len=int(spec["train_len"]))

        def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            logits = extra.get("gates")
            if logits is None or logits.shape[-1] != q.shape[-2]:
                logits = extra["gates"] = (torch.randn(BATCH, HEADS, q.shape[-2]) + 3.0).requires_grad_(backward)
            c = cumulative_log_gates(F.logsigmoid(logits))
            return attention(q, k, v, mask=mask, forget=ForgetBias(c, c))

        pos = torch.arange(L)
        probe = torch.zeros(BATCH, HEADS, 1)
        with torch.no_grad():
            ctx = backends_context(q_pos=pos, k_pos=pos, mask=mask, forget=ForgetBias(probe, probe))
            result["backend"] = "forget/" + forget_backend(ctx).name
    else:
        import lextra.attention.backends as backends
        from lextra.attention import attention, build_mask
        from lextra.positions import HeadDims, build_scheme

        train_len = int(spec["train_len"])
        scheme_spec, *piece_names = spec["scheme"].split("+")  # `rope+diffattn`: a scheme and attention pieces
        dims = HeadDims(HEADS, HEAD_DIM, HEADS * HEAD_DIM, train_len)
        scheme = build_scheme(scheme_spec, dims).eval()
        mask = build_mask(spec["mask"], train_len=train_len)
        key_dim = scheme.key_dim()
        pos = torch.arange(L)
        backend = spec.get("backend", "auto")
        with torch.enable_grad() if spec.get("backward") else torch.no_grad():  # `auto` decides by grad mode
            result["backend"] = backends.attention_path(scheme, mask, pos, pos) if backend == "auto" else backend
        result["mask_repr"] = repr(mask)
        result["backends_sha"] = file_sha(backends.__file__)

        def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return attention(q, k, v, scheme=scheme, mask=mask, backend=backend)

        if piece_names:  # the pieces' `attend` hooks around the call, as a layer runs them
            from lextra.attention.pieces import PIECES, attend_through

            attend = attend_through([PIECES.build(name, dims) for name in piece_names], attention, 0)

            def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
                return attend(q, k, v, scheme=scheme, mask=mask, backend=backend)

    def inputs(n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return (
            torch.randn(BATCH, HEADS, n, HEAD_DIM, requires_grad=backward),
            torch.randn(BATCH, HEADS, n, key_dim, requires_grad=backward),
            torch.randn(BATCH, HEADS, n, HEAD_DIM, requires_grad=backward),
        )

    if backward:  # forward and backward of the output's sum, the inputs' gradients dropped each call
        forward = call

        def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            out = forward(q, k, v)
            torch.autograd.grad(out.sum(), (q, k, v))
            return out

    with torch.enable_grad() if backward else torch.no_grad():
        call(*inputs(min(WARMUP_LEN, L)))  # one-off allocations (kernels, thread pools, caches) happen here
        extra.clear()
        q, k, v = inputs(L)
        if result["backend"] == "flex":  # compile for L's bucket and build its BlockMask, then forget that peak
            start = time.perf_counter()
            call(q, k, v)
            result["first_call_ms"] = (time.perf_counter() - start) * 1e3
            reset_peak_rss()
        rss_before = harness.rss_now_kib()
        times_ms, peak_before, peak_after = harness.timed_calls(lambda: call(q, k, v), repeats)
    result.update(
        times_ms=times_ms,
        time_ms=statistics.median(times_ms),
        extra_mib=(peak_after - peak_before) / 1024,
        peak_rss_mib=peak_after / 1024,
        rss_before_mib=rss_before / 1024,
        peak_before_mib=peak_before / 1024,
    )
    return result


def backends_context(**options: Any) -> Any:
    """An `AttentionContext` over these positions (what `auto` decides from), on expanded zeros."""
    import torch

    from lextra.attention.backends import AttentionContext

    probe = torch.zeros(BATCH, HEADS, 1, HEAD_DIM).expand(-1, -1, options["k_pos"].numel(), -1)
    return AttentionContext.build(probe, probe, **options)


def reset_peak_rss() -> None:
    """Return freed heap memory to the system (glibc `malloc_trim`) and reset the peak RSS to the current RSS
    (Linux `clear_refs` 5, which `ru_maxrss` follows): later peaks measure later calls alone."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


# --------------------------------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------------------------------


@dataclass
class Cell(BaseCell):
    """One measurement: a scheme x mask at length L, or an SDPA baseline run (scheme = mask = "sdpa")."""

    kind: str  # "sdpa" or "scheme"
    scheme: str
    mask: str
    length: int
    repeats: int

    @property
    def label(self) -> str:
        """The cell's name in progress lines."""
        return "SDPA is_causal baseline" if self.kind == BASELINE else f"{self.scheme} / {self.mask}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (`--quick` applied, bounds checked)."""
    parser = argparse.ArgumentParser(
        description="Forward time and peak extra memory of lextra attention(backend='auto') per scheme and mask, "
        "relative to plain causal SDPA at the same length.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--schemes", default="all", help="comma list of position schemes, 'all' or 'none'")
    parser.add_argument(
        "--content", default="", help=f"comma list of content-dependent attention rows ({', '.join(CONTENT_ROWS)})"
    )
    parser.add_argument(
        "--masks",
        default=",".join(DEFAULT_MASKS),
        help="comma list of masks: causal, window (width = train length), bca (block = train length / 2), "
        "or explicit specs like window:256",
    )
    parser.add_argument("--lengths", default=",".join(map(str, DEFAULT_LENGTHS)), help="comma list of L")
    parser.add_argument(
        "--backend",
        default="auto",
        choices=["auto", "flex"],
        help="the scheme cells' backend: auto, or flex (FlexAttention compiled; see the module docstring)",
    )
    parser.add_argument(
        "--pieces",
        default="",
        help="comma list of attention pieces (e.g. diffattn): each adds a row SCHEME+PIECE per scheme, the piece's "
        "attend hook run around the call as a layer runs it",
    )
    parser.add_argument(
        "--rows",
        default="",
        help="comma list of SCHEME+PIECE rows added as given (e.g. nope+stickbreak,rope+diffattn), where --pieces "
        "would pair every piece with every scheme",
    )
    parser.add_argument(
        "--backward",
        action="store_true",
        help="time forward and backward (gradients of q, k, v from the output's sum), the baseline too",
    )
    harness.add_quick_repeats(parser, QUICK_LENGTHS, LONG)
    harness.add_threads(parser)
    parser.add_argument("--train-len", type=int, default=1024, help="training length: window width, 2x bca block")
    parser.add_argument(
        "--baseline-every", type=int, default=12, help="rerun the SDPA baseline after this many scheme cells"
    )
    harness.add_cell_timeout(parser, 1800.0)
    harness.add_out_worker(parser, "benchmarks/results/attention.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.lengths = ",".join(map(str, QUICK_LENGTHS))
    if args.threads < 1 or (args.repeats is not None and args.repeats < 1) or args.baseline_every < 1:
        parser.error("--threads, --repeats and --baseline-every must be >= 1")
    return args


def mask_spec(name: str, train_len: int) -> str:
    """Expand bare `window` / `bca` into explicit specs tied to the training length."""
    if name == "window":
        return f"window:{train_len}"
    if name == "bca":
        return f"bca:{train_len // 2}"
    return name


def plan(schemes: list[str], masks: list[str], lengths: list[int], args: argparse.Namespace) -> list[Cell]:
    """All cells in run order: per L, the baseline, then scheme cells with the baseline every few, then it again."""
    cells: list[Cell] = []
    for L in lengths:
        repeats = harness.default_repeats(args.repeats, L, LONG)
        cells += harness.interleave(
            [Cell("scheme", scheme, mask, L, repeats) for mask in masks for scheme in schemes],
            args.baseline_every,
            lambda L=L, repeats=repeats: Cell(BASELINE, BASELINE, BASELINE, L, repeats),
        )
    return cells


def cell_spec(cell: Cell, args: argparse.Namespace) -> dict[str, Any]:
    """The worker's JSON spec for `cell`."""
    return {
        "kind": cell.kind,
        "scheme": cell.scheme,
        "mask": cell.mask,
        "length": cell.length,
        "repeats": cell.repeats,
        "threads": args.threads,
        "train_len": args.train_len,
        "backend": args.backend,
        "backward": args.backward,
    }


def summarise_baselines(cells: list[Cell], lengths: list[int]) -> dict[int, dict[str, Any]]:
    """Per L: median time and extra memory over the baseline runs, and the runs' spread."""

    def summary(runs: list[Cell], times: list[float]) -> dict[str, Any]:
        mems = [c.result["extra_mib"] for c in runs]
        return {
            "time_ms": statistics.median(times),
            "extra_mib": statistics.median(mems),
            "run_times_ms": times,
            "run_extra_mib": mems,
            "drift": max(times) / min(times) if min(times) > 0 else None,
        }

    return harness.summarise_baselines([c for c in cells if c.kind == BASELINE], lengths, summary)


def add_ratios(cells: list[Cell], baselines: dict[int, dict[str, Any]]) -> None:
    """Add each scheme cell's time and memory ratios to the baseline at its L."""
    for cell in cells:
        base = baselines.get(cell.length, {})
        if cell.kind == BASELINE or not cell.ok or "time_ms" not in base:
            continue
        cell.result["time_ratio"] = cell.result["time_ms"] / base["time_ms"]
        cell.result["mem_ratio"] = (
            cell.result["extra_mib"] / base["extra_mib"] if base["extra_mib"] >= harness.MIN_MEM_BASE_MIB else None
        )


def markdown(
    cells: list[Cell], schemes: list[str], masks: list[str], lengths: list[int], baselines: dict[int, dict[str, Any]]
) -> str:
    """The ratio table (rows scheme + mask, columns L) with SDPA's absolute numbers as the first row."""
    by_key = {(c.scheme, c.mask, c.length): c for c in cells if c.kind != BASELINE}
    header = ["scheme", "mask", "auto backend", *(f"L={L}: time x / mem x" for L in lengths)]
    base_row = ["**SDPA is_causal**", "causal", "sdpa"]
    for L in lengths:
        base = baselines[L]
        if "error" in base:
            base_row.append("err")
        else:
            base_row.append(f"**{base['time_ms']:.0f} ms / {base['extra_mib']:.1f} MiB** (drift {base['drift']:.2f})")
    rows = [base_row]
    for mask in masks:
        for scheme in schemes:
            entries, chosen = [], []
            for L in lengths:
                cell = by_key.get((scheme, mask, L))
                if cell is None:
                    entries.append("")
                    chosen.append("")
                elif not cell.ok:
                    entries.append("err")
                    chosen.append(cell.result.get("backend", "?"))
                else:
                    entries.append(f"{ratio_text(cell.result['time_ratio'])} / {ratio_text(cell.result['mem_ratio'])}")
                    chosen.append(cell.result["backend"])
            backend = chosen[0] if len(set(chosen)) == 1 else "/".join(b or "-" for b in chosen)
            rows.append([scheme, mask, backend, *entries])
    return md_table(header, rows)


def absolute_markdown(cells: list[Cell], schemes: list[str], masks: list[str], lengths: list[int]) -> str:
    """The same grid in absolute numbers: median ms / peak extra MiB."""
    by_key = {(c.scheme, c.mask, c.length): c for c in cells if c.kind != BASELINE}
    header = ["scheme", "mask", *(f"L={L}: ms / MiB" for L in lengths)]
    rows = []
    for mask in masks:
        for scheme in schemes:
            entries = []
            for L in lengths:
                cell = by_key.get((scheme, mask, L))
                if cell is None:
                    entries.append("")
                elif not cell.ok:
                    entries.append("err")
                else:
                    entries.append(f"{cell.result['time_ms']:.0f} / {cell.result['extra_mib']:.1f}")
            rows.append([scheme, mask, *entries])
    return md_table(header, rows)


def machine_info(args: argparse.Namespace) -> dict[str, Any]:
    """The harness's machine metadata plus this benchmark's shape and training length."""
    sources = (
        "src/lextra/attention/backends/chunked.py",
        "src/lextra/attention/backends/tiled.py",
        "src/lextra/positions/bias.py",
    )
    return harness.machine_meta(args.threads, sources) | {
        "shape": {"batch": BATCH, "heads": HEADS, "head_dim": HEAD_DIM, "dtype": "float32"},
        "train_len": args.train_len,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or, with `--worker`, one cell of it)."""
    args = parse_args(argv)
    if args.worker is not None:
        return harness.worker_main(run_cell, args.worker, error_chars=None)
    schemes = [] if args.schemes == "none" else harness.scheme_names(args.schemes)
    schemes += [f"{scheme}+{piece}" for piece in csv_list(args.pieces) for scheme in schemes]
    schemes += csv_list(args.rows)
    content = csv_list(args.content)
    unknown = sorted(set(content) - set(CONTENT_ROWS))
    if unknown:
        raise SystemExit(f"--content: unknown rows {', '.join(unknown)}; known: {', '.join(CONTENT_ROWS)}")
    schemes += content
    masks = [mask_spec(m, args.train_len) for m in csv_list(args.masks)]
    lengths = [int(x) for x in csv_list(args.lengths)]
    cells = plan(schemes, masks, lengths, args)
    meta = machine_info(args)
    print(
        f"attention benchmark: {len(schemes)} schemes x {len(masks)} masks x L={lengths}, "
        f"{len(cells)} subprocess cells, {args.threads} thread(s), torch {meta['torch']}",
        file=sys.stderr,
    )
    total_s = harness.run_cells(
        cells,
        Path(__file__).resolve(),
        lambda cell: cell_spec(cell, args),
        args.threads,
        args.cell_timeout,
        lambda cell: f"L={cell.length:<6d} {cell.label:<32s}",
        lambda r: f"{r['time_ms']:9.1f} ms {r['extra_mib']:8.1f} MiB  {r['backend']}",
    )

    baselines = summarise_baselines(cells, lengths)
    add_ratios(cells, baselines)
    table = markdown(cells, schemes, masks, lengths, baselines)
    absolute = absolute_markdown(cells, schemes, masks, lengths)
    harness.finish_meta(meta, total_s, cells)

    footer = (
        f"\ntorch {meta['torch']}, {args.threads} thread(s), {meta['cpu_model']}, {meta['date']}, "
        f"batch {BATCH}, {HEADS} heads, head dim {HEAD_DIM}, fp32, "
        f"{'forward and backward' if args.backward else 'forward under no_grad'}; "
        f"total {total_s / 60:.1f} min\n"
    )
    report = (
        "Ratios to plain causal SDPA at the same L (time x = median time / SDPA time; "
        "mem x = peak extra RSS / SDPA's):\n\n"
        + table
        + "\nAbsolute: median ms / peak extra MiB:\n\n"
        + absolute
        + footer
    )
    data = {
        "meta": meta,
        "config": {
            "schemes": schemes,
            "masks": masks,
            "lengths": lengths,
            "repeats": args.repeats,
            "long_length": LONG,
            "baseline_every": args.baseline_every,
            "warmup_len": WARMUP_LEN,
            "backend": args.backend,
            "pieces": csv_list(args.pieces),
            "backward": args.backward,
        },
        "baseline": {str(L): v for L, v in baselines.items()},
        "cells": [
            {"kind": c.kind, "scheme": c.scheme, "mask": c.mask, "length": c.length, "repeats": c.repeats}
            | {"wall_s": round(c.wall_s, 2)}
            | c.result
            for c in cells
        ],
    }
    harness.write_report(args.out, data, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
