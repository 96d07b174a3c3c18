"""Forward time and memory of x-transformers' decoder (rotary / ALiBi) next to lextra's GPT of the same shape.

What it measures
    A decoder of width 256, depth 4, 8 heads of dim 32, MLP ratio 4, byte vocabulary (256), batch 1, fp32, one
    forward call to logits under `torch.no_grad()` in eval mode, at each length L (1k, 4k, 16k, 32k by default):
      - lextra `GPT` with scheme `rope` and with `alibi` (attention backend `auto`: fused SDPA for RoPE, query
        blocks with a strided per-distance bias for ALiBi),
      - x-transformers `TransformerWrapper(attn_layers=Decoder(...))` with `rotary_pos_emb=True` and with
        `alibi_pos_bias=True`, each with `attn_flash=True` (torch SDPA with a dense bias) and with the default
        eager attention. Same shape: `attn_dim_head=32` (x-transformers' default is 64, i.e. 512-wide attention),
        `rotary_emb_dim=32` (the whole head rotated, as lextra does; the default rotates half), no absolute
        position embedding (`use_abs_pos_emb=False`; x-transformers would otherwise add one to ALiBi models).
    Reported: the median time of `--repeats` calls (after one warm-up call at L = 128 and allocating the input),
    the process's peak RSS, and the extra memory = growth of the peak RSS over the timed calls. x-transformers'
    ALiBi caches its 1 x H x L x L bias on the first call at a new length: that first timed call includes
    building it (its time is in the JSON as `times_ms[0]`); at L >= 16384 there is only that call.

How it measures
    Every (model, L) cell runs in a fresh subprocess, single-threaded by default, with its address space capped
    (`--mem-limit-gib`, RLIMIT_AS) so that a cell that would need more fails with an allocation error instead of
    pushing the shared machine into the OOM killer; a cell running past `--cell-timeout` seconds is abandoned.
    Both are reported as such (`OOM (cap N GiB)`, `timeout`).

Usage
    .venv/bin/pip install x-transformers==2.31.10            # the `bench` extra; it keeps torch as it is
    .venv/bin/python benchmarks/xtransformers_compare.py                       # L = 1k, 4k, 16k, 32k
    .venv/bin/python benchmarks/xtransformers_compare.py --lengths 1024,4096
    .venv/bin/python benchmarks/xtransformers_compare.py --models lextra-rope,xt-rotary-flash --quick
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness
from harness import BaseCell, HelpFormatter, csv_list, md_table, ratio_text

D_MODEL = 256
N_LAYER = 4
N_HEAD = 8
HEAD_DIM = 32
VOCAB = 256
TRAIN_LEN = 1024  # lextra's L_tr (no effect on rope / alibi forward)
DEFAULT_LENGTHS = (1024, 4096, 16384, 32768)
QUICK_LENGTHS = (256, 1024)
LONG = 16384  # at and above this length a cell repeats once by default
WARMUP_LEN = 128
XT_VERSION = "2.31.10"  # the version pinned by the `bench` extra (the one benchmarks/README.md reports)

#: name -> (library, scheme, x-transformers Decoder options); rows in this order
MODELS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "lextra-rope": ("lextra", "rope", {}),
    "xt-rotary-flash": ("x-transformers", "rope", {"rotary_pos_emb": True, "attn_flash": True}),
    "xt-rotary": ("x-transformers", "rope", {"rotary_pos_emb": True}),
    "lextra-alibi": ("lextra", "alibi", {}),
    "xt-alibi-flash": ("x-transformers", "alibi", {"alibi_pos_bias": True, "attn_flash": True}),
    "xt-alibi": ("x-transformers", "alibi", {"alibi_pos_bias": True}),
}
LEXTRA_OF = {"rope": "lextra-rope", "alibi": "lextra-alibi"}


# --------------------------------------------------------------------------------------------------------------
# worker
# --------------------------------------------------------------------------------------------------------------


def _cap_memory(gib: float) -> None:
    """Cap the process's address space at `gib` GiB (RLIMIT_AS); 0 = no cap."""
    import resource

    if gib > 0:
        limit = int(gib * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def build_model(name: str, dim_head: int) -> tuple[Any, dict[str, Any]]:
    """The model for `name` (eval mode) and a description of how it was built."""
    library, scheme, options = MODELS[name]
    if library == "lextra":
        from lextra.model import GPT, GPTConfig

        config = GPTConfig(
            vocab_size=VOCAB, n_layer=N_LAYER, n_head=N_HEAD, d_model=D_MODEL, train_len=TRAIN_LEN, layer_plan=scheme
        )
        return GPT(config).eval(), {"config": config.to_dict(), "backend": "auto"}
    from x_transformers import Decoder, TransformerWrapper

    decoder_kwargs = {"dim": D_MODEL, "depth": N_LAYER, "heads": N_HEAD, "attn_dim_head": dim_head, **options}
    if options.get("rotary_pos_emb"):
        decoder_kwargs["rotary_emb_dim"] = dim_head  # rotate the whole head, as lextra's RoPE does
    wrapper_kwargs = {"num_tokens": VOCAB, "max_seq_len": 0, "use_abs_pos_emb": False}
    model = TransformerWrapper(**wrapper_kwargs, attn_layers=Decoder(**decoder_kwargs)).eval()
    return model, {"decoder_kwargs": decoder_kwargs, "wrapper_kwargs": wrapper_kwargs}


def _versions() -> dict[str, str]:
    """Installed versions of torch, x-transformers and x-transformers' dependencies."""
    from importlib import metadata

    out = {}
    for dist in ("torch", "x-transformers", "einops", "einx", "loguru", "frozendict", "torch-einops-utils"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def run_cell(spec: dict[str, Any]) -> dict[str, Any]:
    """Measure one cell (`spec`: model, length, repeats, threads, mem_limit_gib, dim_head)."""
    _cap_memory(float(spec["mem_limit_gib"]))
    import torch

    torch.set_num_threads(int(spec["threads"]))
    torch.manual_seed(0)
    name, L, repeats = spec["model"], int(spec["length"]), int(spec["repeats"])
    model, built = build_model(name, int(spec["dim_head"]))
    result: dict[str, Any] = {
        "num_threads": torch.get_num_threads(),
        "parameters": sum(p.numel() for p in model.parameters()),
        "built": built,
        "versions": _versions(),
    }
    if MODELS[name][0] == "lextra":
        import lextra.attention.backends as backends
        from lextra.attention import build_mask

        pos = torch.arange(L)
        with torch.no_grad():
            result["backend"] = backends.attention_path(model.scheme_for(0), build_mask("causal", TRAIN_LEN), pos, pos)
    tokens = torch.randint(0, VOCAB, (1, L), generator=torch.Generator().manual_seed(0))
    try:
        with torch.no_grad():
            model(tokens[:, : min(WARMUP_LEN, L)])  # one-off allocations, kernels
            times_ms, peak_before, peak_after = harness.timed_calls(lambda: model(tokens), repeats)
    except (RuntimeError, MemoryError) as exc:
        text = str(exc)
        out_of_memory = isinstance(exc, MemoryError) or "allocate" in text or "memory" in text.lower()
        peak = harness.peak_rss_kib() / 1024
        tag = type(exc).__name__
        if out_of_memory:
            asked = re.search(r"allocate (\d+) bytes", text)
            wanted = f"; a {int(asked.group(1)) / (1 << 30):.1f} GiB allocation failed" if asked else ""
            tag = f"OOM (cap {spec['mem_limit_gib']:g} GiB{wanted})"
        return result | {"error": f"{tag}: {text[:300]}", "oom": out_of_memory, "peak_rss_mib": peak}
    return result | {
        "times_ms": times_ms,
        "time_ms": statistics.median(times_ms),
        "peak_rss_mib": peak_after / 1024,
        "extra_mib": (peak_after - peak_before) / 1024,
        "peak_before_mib": peak_before / 1024,
    }


# --------------------------------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------------------------------


@dataclass
class Cell(BaseCell):
    """One measurement: a model at length L."""

    model: str
    length: int
    repeats: int


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (`--quick` applied, bounds checked)."""
    parser = argparse.ArgumentParser(
        description="Forward time and memory of x-transformers' decoder (rotary, ALiBi; flash and eager) next to "
        "lextra's GPT of the same shape (rope, alibi), one fresh subprocess per cell.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--models", default="all", help=f"comma list of {', '.join(MODELS)}, or 'all'")
    parser.add_argument("--lengths", default=",".join(map(str, DEFAULT_LENGTHS)), help="comma list of L")
    harness.add_quick_repeats(parser, QUICK_LENGTHS, LONG)
    harness.add_threads(parser)
    parser.add_argument(
        "--dim-head", type=int, default=HEAD_DIM, help="x-transformers attn_dim_head (its own default is 64)"
    )
    harness.add_cell_timeout(parser, 300.0)
    parser.add_argument(
        "--mem-limit-gib", type=float, default=12.0, help="address-space cap per cell (RLIMIT_AS); 0 = none"
    )
    harness.add_out_worker(parser, "benchmarks/results/xtransformers_compare.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.lengths = ",".join(map(str, QUICK_LENGTHS))
    if args.threads < 1 or (args.repeats is not None and args.repeats < 1) or args.dim_head < 1:
        parser.error("--threads, --repeats and --dim-head must be >= 1")
    return args


def check_x_transformers(models: list[str]) -> str | None:
    """x-transformers' installed version (None when no x-transformers model is asked for); exits when missing."""
    if all(MODELS[m][0] == "lextra" for m in models):
        return None
    code = "from importlib.metadata import version; import x_transformers; print(version('x-transformers'))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(
            f"x-transformers is not importable ({proc.stderr.strip().splitlines()[-1:]}); install the benchmark "
            f"extra: .venv/bin/pip install x-transformers=={XT_VERSION}"
        )
    version = proc.stdout.strip()
    if version != XT_VERSION:
        print(f"warning: x-transformers {version} installed; the pinned version is {XT_VERSION}", file=sys.stderr)
    return version


def _cell_text(cell: Cell | None) -> str:
    """A table cell: ms / peak RSS MiB (extra), or what went wrong."""
    if cell is None:
        return ""
    if not cell.ok:
        error = cell.result.get("error", "?")
        if error.startswith("OOM"):
            return error.split(":", 1)[0]
        if error.startswith("timeout"):
            return error
        return "err"
    r = cell.result
    return f"{r['time_ms']:,.0f} ms / {r['peak_rss_mib']:,.0f} MiB ({r['extra_mib']:,.0f})"


def _description(name: str, cells: list[Cell]) -> str:
    """How model `name` is built, for its table row."""
    library, scheme, options = MODELS[name]
    if library == "lextra":
        backends = sorted({c.result["backend"] for c in cells if c.model == name and "backend" in c.result})
        return f"lextra GPT, `{scheme}`, backend auto ({'/'.join(backends) or '?'})"
    flags = ", ".join(f"{k}=True" for k in options)
    return f"x-transformers, `{flags}`" + ("" if "attn_flash" in options else " (eager)")


def markdown(cells: list[Cell], models: list[str], lengths: list[int]) -> str:
    """The absolute table: rows models, columns L."""
    by_key = {(c.model, c.length): c for c in cells}
    header = ["model", "", *(f"L={L}: ms / peak RSS MiB (extra)" for L in lengths)]
    rows = [[name, _description(name, cells), *(_cell_text(by_key.get((name, L))) for L in lengths)] for name in models]
    return md_table(header, rows)


def ratio_markdown(cells: list[Cell], models: list[str], lengths: list[int]) -> str:
    """Time and extra memory of each x-transformers cell over lextra's cell of the same scheme and L."""
    by_key = {(c.model, c.length): c for c in cells}
    header = ["model", *(f"L={L}: time x / extra mem x" for L in lengths)]
    rows = []
    for name in models:
        library, scheme, _ = MODELS[name]
        if library == "lextra":
            continue
        entries = []
        for L in lengths:
            cell, ref = by_key.get((name, L)), by_key.get((LEXTRA_OF[scheme], L))
            if cell is None:
                entries.append("")
            elif not cell.ok:
                entries.append(_cell_text(cell))
            elif ref is None or not ref.ok:
                entries.append("no lextra cell")
            else:
                time_x = cell.result["time_ms"] / ref.result["time_ms"]
                base_mem = ref.result["extra_mib"]
                mem_x = cell.result["extra_mib"] / base_mem if base_mem >= harness.MIN_MEM_BASE_MIB else None
                entries.append(f"{ratio_text(time_x)} / {ratio_text(mem_x)}")
        rows.append([f"{name} vs {LEXTRA_OF[scheme]}", *entries])
    return md_table(header, rows)


def main(argv: list[str] | None = None) -> int:
    """Run the comparison (or, with `--worker`, one cell of it)."""
    args = parse_args(argv)
    if args.worker is not None:
        return harness.worker_main(run_cell, args.worker)
    models = harness.select_names(args.models, list(MODELS), "model")
    lengths = [int(x) for x in csv_list(args.lengths)]
    xt_version = check_x_transformers(models)
    cells = [Cell(m, L, harness.default_repeats(args.repeats, L, LONG)) for L in lengths for m in models]
    sources = (
        "src/lextra/attention/backends/chunked.py",
        "src/lextra/attention/backends/tiled.py",
        "src/lextra/positions/bias.py",
        "src/lextra/model.py",
    )
    meta = harness.machine_meta(args.threads, sources) | {"x_transformers": xt_version}
    print(
        f"x-transformers comparison: {len(models)} models x L={lengths}, {len(cells)} subprocess cells, "
        f"{args.threads} thread(s), torch {meta['torch']}, x-transformers {xt_version}, "
        f"cap {args.mem_limit_gib:g} GiB / {args.cell_timeout:g} s per cell",
        file=sys.stderr,
    )
    total_s = harness.run_cells(
        cells,
        Path(__file__).resolve(),
        lambda cell: {
            "model": cell.model,
            "length": cell.length,
            "repeats": cell.repeats,
            "threads": args.threads,
            "mem_limit_gib": args.mem_limit_gib,
            "dim_head": args.dim_head,
        },
        args.threads,
        args.cell_timeout,
        lambda cell: f"L={cell.length:<6d} {cell.model:<16s}",
        lambda r: f"{r['time_ms']:9.0f} ms {r['peak_rss_mib']:7.0f} MiB peak {r['extra_mib']:7.0f} MiB extra",
        error_chars=120,
    )
    harness.finish_meta(meta, total_s, cells, backends_sha=False)
    versions = next((c.result["versions"] for c in cells if "versions" in c.result), {})
    meta["versions"] = versions

    load = harness.load_text(meta)
    footer = (
        f"\ntorch {meta['torch']}, x-transformers {versions.get('x-transformers', xt_version)} (einops "
        f"{versions.get('einops', '?')}, einx {versions.get('einx', '?')}), {args.threads} thread(s), "
        f"{meta['cpu_model']} ({meta['cpu_count']} cores, {load}), {meta['date']}; d={D_MODEL}, {N_LAYER} layers, "
        f"{N_HEAD} heads, head dim {HEAD_DIM} (x-transformers attn_dim_head {args.dim_head}), vocab {VOCAB}, batch 1, "
        f"fp32, forward to logits under no_grad; median of 3 calls (1 at L >= {LONG}) unless --repeats; cells "
        f"capped at {args.mem_limit_gib:g} GiB of address space and {args.cell_timeout:g} s; "
        f"total {total_s / 60:.1f} min\n"
    )
    report = (
        "Forward, absolute: median ms / peak RSS MiB of the process (extra = peak RSS growth during the timed "
        "calls):\n\n"
        + markdown(cells, models, lengths)
        + "\nx-transformers over lextra (same scheme, same L): time x / extra memory x:\n\n"
        + ratio_markdown(cells, models, lengths)
        + footer
    )
    data = {
        "meta": meta,
        "config": {
            "models": {m: {"library": MODELS[m][0], "scheme": MODELS[m][1], "options": MODELS[m][2]} for m in models},
            "lengths": lengths,
            "repeats": args.repeats,
            "long_length": LONG,
            "warmup_len": WARMUP_LEN,
            "dim_head": args.dim_head,
            "mem_limit_gib": args.mem_limit_gib,
            "cell_timeout_s": args.cell_timeout,
        },
        "cells": [
            {"model": c.model, "length": c.length, "repeats": c.repeats, "wall_s": round(c.wall_s, 2)} | c.result
            for c in cells
        ],
    }
    harness.write_report(args.out, data, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
