"""Attention and training cost of every position scheme and mask on one GPU, next to SDPA's flash kernel.

What it measures
    1. Correctness first: for every registered scheme (`SCHEMES.names()`) x mask (`causal`, `window:W`,
       `bca:W/2`, W = `--train-len`) at `--check-length` (2k), the forward output and the gradients of q, k, v
       and of the scheme's own parameters (T5 table, KERPLE, FIRE) of `attention(..., backend="auto")` (on CUDA:
       fused SDPA for rotary-only causal attention, `flex` otherwise) against `backend="reference"`, both fp32.
       A cell whose error exceeds `--tolerance` is marked and the run exits non-zero at the end.
    2. Attention cost: at every length (4k, 16k, 64k, 128k), batch 1, 8 heads, head dim 64, `--dtype` (bf16):
       forward, and forward + backward (a sum of the output as the loss), of `attention(..., backend="auto")`, as
       a ratio to `F.scaled_dot_product_attention(q, k, v, is_causal=True)` restricted to the flash kernel, at
       the same length in the same run. Time: median of `--repeats` calls between CUDA events, after one warm-up
       call at that shape (which also compiles FlexAttention for it). Memory: peak allocated bytes during the
       call above what was allocated before it (`torch.cuda.max_memory_allocated` after a reset).
    3. Training: tokens/s of lextra's GPT (`--layers` x `--width`, `--heads` heads, AdamW, bf16 autocast,
       backend `auto`) per scheme at L_tr 1024 and 2048 with `--tokens-per-step` tokens per step, relative to
       NoPE (plain fused SDPA) at the same L_tr.

How to read it
    Attention cells are "fwd x / fwd+bwd x / mem x" against flash causal SDPA; the header gives SDPA's absolute
    milliseconds and MiB. Targets (issue 16): every scheme and mask within 1.2x of flash forward and 1.3x of its
    backward, windows and BCA below 1x from 16k; training within 1.2x of NoPE.

Usage
    .venv/bin/python benchmarks/gpu.py                                 # the whole run (CUDA)
    .venv/bin/python benchmarks/gpu.py --quick                         # 2k check, L = 4k, 16k; L_tr 1024 only
    .venv/bin/python benchmarks/gpu.py --sized                         # make gpu-check's run (4k-64k; 128k: a subset)
    .venv/bin/python benchmarks/gpu.py --device cpu --smoke            # the script itself, tiny sizes, on CPU
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from lextra.attention import attention, build_mask
from lextra.attention.backends import attention_path
from lextra.attention.flex import RECOMPILE_LIMIT
from lextra.devices import module_device
from lextra.positions import SCHEMES, HeadDims, build_scheme
from lextra.validate import parse_lengths

BATCH, HEADS, HEAD_DIM = 1, 8, 64
DEFAULT_LENGTHS = (4096, 16384, 65536, 131072)
MASKS = ("causal", "window", "bca")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
#: the schemes `--sized` also measures at 128k: fused SDPA (nope, rope), a per-distance table (alibi, kerple_log)
#: and a per-query bias (fire), so each flex score modifier is timed at the longest length
SIZED_LONG = ("nope", "rope", "alibi", "kerple_log", "fire")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (only with --smoke)")
    parser.add_argument("--schemes", default="all", help="comma-separated scheme names or 'all'")
    parser.add_argument("--masks", default=",".join(MASKS), help="causal, window, bca")
    parser.add_argument("--lengths", default=",".join(map(str, DEFAULT_LENGTHS)), help="attention lengths")
    parser.add_argument("--train-len", type=int, default=1024, help="window width W and BCA block W/2")
    parser.add_argument("--check-length", type=int, default=2048, help="length of the correctness pass")
    parser.add_argument(
        "--tolerance",
        type=float,
        default=2e-3,
        help="max error against reference (fp32), over max(1, its largest value)",
    )
    parser.add_argument("--dtype", default="bf16", choices=sorted(DTYPES), help="dtype of the timed cells")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per cell (median reported)")
    parser.add_argument("--train-lengths", default="1024,2048", help="L_tr of the training cells ('' skips them)")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--tokens-per-step", type=int, default=32768)
    parser.add_argument("--train-steps", type=int, default=10, help="timed training steps (after 3 warm-up)")
    parser.add_argument("--long-lengths", default="", help="lengths measured for --long-schemes only")
    parser.add_argument("--long-schemes", default="", help="comma-separated schemes measured at --long-lengths")
    parser.add_argument("--quick", action="store_true", help="L = 4k, 16k; L_tr 1024; 3 repeats")
    parser.add_argument(
        "--sized",
        action="store_true",
        help="`make gpu-check`'s run: every scheme x mask at 4k-64k, 128k for a subset, training at L_tr 1024",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks the script runs (any device)")
    parser.add_argument("--out", default="benchmarks/results/gpu.json", help="JSON (and .md beside it)")
    args = parser.parse_args(argv)
    if args.quick:
        args.lengths, args.train_lengths, args.repeats = "4096,16384", "1024", 3
    if args.sized:
        args.lengths, args.long_lengths, args.long_schemes = "4096,16384,65536", "131072", ",".join(SIZED_LONG)
        args.train_lengths, args.train_steps, args.repeats = "1024", 5, 3
    if args.smoke:
        args.lengths, args.train_len, args.check_length, args.train_lengths = "256,512", 128, 192, "128"
        args.layers, args.width, args.tokens_per_step, args.train_steps, args.repeats = 2, 64, 1024, 2, 2
    return args


class Timer:
    """Wall time of a call on the device (CUDA events, or perf_counter on CPU) and its peak extra memory."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def measure(self, call: Callable[[], object], repeats: int) -> tuple[float, float | None]:
        """(median ms, peak extra MiB or None on CPU) over `repeats` calls after one warm-up call."""
        call()
        self.sync()
        times = []
        extra: float | None = None
        for _ in range(repeats):
            if self.cuda:
                torch.cuda.reset_peak_memory_stats(self.device)
                before = torch.cuda.memory_allocated(self.device)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                call()
                end.record()
                torch.cuda.synchronize(self.device)
                times.append(start.elapsed_time(end))
                peak = (torch.cuda.max_memory_allocated(self.device) - before) / 2**20
                extra = peak if extra is None else max(extra, peak)
            else:
                t0 = time.perf_counter()
                call()
                times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times), extra


def mask_spec(name: str, train_len: int) -> str:
    return {"causal": "causal", "window": f"window:{train_len}", "bca": f"bca:{train_len // 2}"}[name]


def build(name: str, train_len: int, device: torch.device) -> Any:
    torch.manual_seed(0)
    return build_scheme(name, HeadDims(HEADS, HEAD_DIM, HEADS * HEAD_DIM, train_len)).to(device)


def inputs(scheme: Any, L: int, device: torch.device, dtype: torch.dtype, grad: bool) -> list[torch.Tensor]:
    dims = (HEAD_DIM, scheme.key_dim(), HEAD_DIM)
    return [torch.randn(BATCH, HEADS, L, d, device=device, dtype=dtype, requires_grad=grad) for d in dims]


def check(name: str, mask: str, args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """Max error of `auto` against `reference` (fp32), relative to the reference's scale (`relative_error`): the
    output and every gradient (q, k, v, the scheme's parameters)."""
    scheme = build(name, args.train_len, device)
    spec = mask_spec(mask, args.train_len)
    torch.manual_seed(1)
    base = inputs(scheme, args.check_length, device, torch.float32, grad=False)
    results = {}
    for backend in ("auto", "reference"):
        q, k, v = (t.clone().requires_grad_(True) for t in base)
        for p in scheme.parameters():
            p.grad = None
        out = attention(q, k, v, scheme=scheme, mask=spec, backend=backend)
        out.square().sum().backward()
        grads = [q.grad, k.grad, v.grad] + [p.grad for p in scheme.parameters() if p.grad is not None]
        results[backend] = (out.detach(), grads)
    out_err = relative_error(results["auto"][0], results["reference"][0])
    pairs = zip(results["auto"][1], results["reference"][1], strict=True)
    grad_err = max((relative_error(a, b) for a, b in pairs), default=0.0)
    ok = out_err <= args.tolerance and grad_err <= args.tolerance * 10
    return {"scheme": name, "mask": mask, "forward_err": out_err, "grad_err": grad_err, "ok": ok}


def relative_error(value: torch.Tensor, reference: torch.Tensor) -> float:
    """max |value - reference| over max(1, max |reference|): gradients range from ~1 (q, k, v) to ~1e5 (KERPLE's
    parameters), where two correct fp32 paths differ by ~1e-2 in absolute terms, so large tensors are judged
    relative to their scale; tensors below 1 (FIRE's output bias, whose true gradient is 0: softmax ignores a
    constant) absolutely. nan stays nan."""
    scale = reference.abs().max().item()
    return (value - reference).abs().max().item() / max(scale, 1.0)


def attention_cells(args: argparse.Namespace, device: torch.device, names: list[str], masks: list[str]) -> list:
    """Forward and forward+backward time and memory per (scheme, mask, L), with the flash SDPA baseline."""
    timer, dtype = Timer(device), DTYPES[args.dtype]
    rows = []
    long_names = [n for n in args.long_schemes.split(",") if n.strip() and n in names]
    plan = [(L, names) for L in parse_lengths(args.lengths) or DEFAULT_LENGTHS]
    plan += [(L, long_names) for L in (parse_lengths(args.long_lengths) or []) if long_names]
    for L, names_at_L in plan:
        rows.append(baseline_cell(L, args, device, timer))
        for name in names_at_L:
            scheme = build(name, args.train_len, device)
            for mask in masks:
                spec = mask_spec(mask, args.train_len)
                cell: dict[str, Any] = {"kind": "scheme", "scheme": name, "mask": mask, "length": L}
                try:
                    cell["path"] = cell_path(scheme, spec, L, device, dtype, grad=False)
                    cell["path_bwd"] = cell_path(scheme, spec, L, device, dtype, grad=True)
                    q, k, v = inputs(scheme, L, device, dtype, grad=False)
                    with torch.no_grad():
                        cell["fwd_ms"], cell["fwd_mib"] = timer.measure(
                            lambda q=q, k=k, v=v, s=scheme, m=spec: attention(q, k, v, scheme=s, mask=m), args.repeats
                        )
                    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
                    cell["fwdbwd_ms"], cell["fwdbwd_mib"] = timer.measure(
                        lambda qg=qg, kg=kg, vg=vg, s=scheme, m=spec: (
                            attention(qg, kg, vg, scheme=s, mask=m).sum().backward()
                        ),
                        args.repeats,
                    )
                except (RuntimeError, NotImplementedError, ValueError) as err:
                    cell["error"] = f"{type(err).__name__}: {str(err)[:300]}"
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                rows.append(cell)
                print(f"L={L} {name} {mask}: {cell.get('fwd_ms', cell.get('error'))}", file=sys.stderr)
    return rows


def cell_path(scheme: Any, spec: str, L: int, device: torch.device, dtype: torch.dtype, grad: bool) -> str:
    """The path `backend="auto"` takes for a cell on `device` at `dtype`, in the cell's grad mode (forward cells
    run under no_grad, where the CPU may tile; forward + backward cells with autograd). The positions are on the
    scheme's device, where its parameters are: FIRE's choice compares them with its learned threshold."""
    pos = torch.arange(L, device=module_device(scheme))
    with torch.set_grad_enabled(grad):
        return attention_path(scheme, build_mask(spec), pos, pos, device=device, dtype=dtype)


def baseline_kernels(dtype: torch.dtype) -> list[Any]:
    """The SDPA kernels the baseline may use on CUDA, best first: flash has no fp32, so fp32 falls back to the
    memory-efficient kernel (the fastest fused fp32 causal kernel)."""
    from torch.nn.attention import SDPBackend

    if dtype == torch.float32:
        return [SDPBackend.EFFICIENT_ATTENTION]
    return [SDPBackend.FLASH_ATTENTION]


def flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal SDPA on its flash kernel where the device has one (CUDA; the memory-efficient kernel for fp32),
    else whatever SDPA picks."""
    if q.is_cuda:
        from torch.nn.attention import sdpa_kernel

        with sdpa_kernel(baseline_kernels(q.dtype)):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def baseline_cell(L: int, args: argparse.Namespace, device: torch.device, timer: Timer) -> dict[str, Any]:
    """Flash causal SDPA's forward and forward + backward at length L; a kernel that fails is recorded as the
    cell's error (the scheme cells at L are still measured, their ratios shown as '-')."""
    dtype = DTYPES[args.dtype]
    base: dict[str, Any] = {"kind": "sdpa", "length": L, "fwd_ms": None, "fwd_mib": None}
    base.update(fwdbwd_ms=None, fwdbwd_mib=None)
    try:
        q, k, v = (torch.randn(BATCH, HEADS, L, HEAD_DIM, device=device, dtype=dtype) for _ in range(3))
        base["fwd_ms"], base["fwd_mib"] = timer.measure(lambda: flash(q, k, v), args.repeats)
        qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
        base["fwdbwd_ms"], base["fwdbwd_mib"] = timer.measure(lambda: flash(qg, kg, vg).sum().backward(), args.repeats)
        print(f"L={L} flash: fwd {base['fwd_ms']:.2f} ms, fwd+bwd {base['fwdbwd_ms']:.2f} ms", file=sys.stderr)
    except (RuntimeError, NotImplementedError, ValueError) as err:
        base["error"] = f"{type(err).__name__}: {str(err)[:300]}"
        print(f"L={L} flash baseline failed: {base['error']}", file=sys.stderr)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return base


def training_cells(args: argparse.Namespace, device: torch.device, names: list[str]) -> list[dict[str, Any]]:
    """Tokens/s of a GPT training step per scheme and L_tr (bf16 autocast on CUDA), NoPE first as the baseline."""
    from lextra.devices import autocast
    from lextra.model import GPT, GPTConfig

    rows = []
    lengths = parse_lengths(args.train_lengths) or []
    for L in lengths:
        batch = max(1, args.tokens_per_step // L)
        for name in ["nope", *[n for n in names if n != "nope"]]:
            cell: dict[str, Any] = {"scheme": name, "train_len": L, "batch": batch}
            try:
                torch.manual_seed(0)
                config = GPTConfig(
                    vocab_size=256, n_layer=args.layers, n_head=HEADS, d_model=args.width, train_len=L, layer_plan=name
                )
                model = GPT(config).to(device)
                optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
                tokens = torch.randint(0, 256, (batch, L + 1), device=device)

                def step(model=model, optimizer=optimizer, tokens=tokens) -> None:
                    with autocast("bf16" if device.type == "cuda" else "fp32", device):
                        logits = model(tokens[:, :-1])
                    loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()

                for _ in range(2):
                    step()
                ms, mib = Timer(device).measure(step, args.train_steps)
                cell.update(step_ms=ms, peak_mib=mib, tokens_per_s=batch * L / (ms / 1e3))
            except (RuntimeError, NotImplementedError, ValueError) as err:
                cell["error"] = f"{type(err).__name__}: {str(err)[:300]}"
            rows.append(cell)
            print(f"train L_tr={L} {name}: {cell.get('tokens_per_s', cell.get('error'))}", file=sys.stderr)
    return rows


def path_label(cell: dict[str, Any]) -> str:
    """The cell's path, with the backward's after a slash where autograd takes another one."""
    fwd, bwd = cell["path"], cell.get("path_bwd", cell["path"])
    return fwd if fwd == bwd else f"{fwd}, bwd {bwd}"


def compiled_graphs() -> int:
    """Graphs dynamo compiled in this process (its own counter): the flex kernels against `RECOMPILE_LIMIT`."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def ratio(value: float | None, base: float | None) -> str:
    if value is None or not base:
        return "-"
    return f"{value / base:.2f}x"


def report(checks: list[dict], cells: list[dict], training: list[dict], meta: dict[str, Any]) -> str:
    """Markdown: the correctness table, one attention table per length, and the training table."""
    lines = [f"# GPU benchmark ({meta['device_name']}, torch {meta['torch']}, {meta['dtype']})", ""]
    if "compiled_graphs" in meta:
        budget = f"{meta['compiled_graphs']} graphs compiled (flex budget {meta['recompile_limit']} per process)"
        lines += [f"{meta['seconds']} s; {budget}", ""]
    lines += ["## Correctness: auto vs reference, fp32 (errors over max(1, the reference's largest value))", ""]
    lines += ["| scheme | mask | fwd rel err | grad rel err | ok |"]
    lines += ["|---|---|---:|---:|---|"]
    for c in checks:
        ok = "yes" if c["ok"] else "NO"
        lines.append(f"| {c['scheme']} | {c['mask']} | {c['forward_err']:.1e} | {c['grad_err']:.1e} | {ok} |")
    for L in sorted({c["length"] for c in cells}):
        base = next(c for c in cells if c["kind"] == "sdpa" and c["length"] == L)
        if "error" in base:
            timing = f"baseline failed: {base['error']}"
        else:
            mib = base["fwd_mib"] if base["fwd_mib"] is not None else "-"
            timing = f"{base['fwd_ms']:.2f} ms fwd, {base['fwdbwd_ms']:.2f} ms fwd+bwd, {mib} MiB"
        lines += [
            "",
            f"## Attention at L = {L}: fwd x / fwd+bwd x / mem x against flash causal SDPA ({timing})",
            "",
            "| scheme | " + " | ".join(MASKS) + " |",
            "|---|" + "---|" * len(MASKS),
        ]
        for name in dict.fromkeys(c["scheme"] for c in cells if c["kind"] == "scheme"):
            row = []
            for mask in MASKS:
                c = next(
                    (c for c in cells if c.get("scheme") == name and c.get("mask") == mask and c["length"] == L), None
                )
                if c is None:
                    row.append("")
                elif "error" in c:
                    row.append("err")
                else:
                    row.append(
                        f"{ratio(c['fwd_ms'], base['fwd_ms'])} / {ratio(c['fwdbwd_ms'], base['fwdbwd_ms'])} / "
                        f"{ratio(c['fwd_mib'], base['fwd_mib'])} ({path_label(c)})"
                    )
            lines.append(f"| {name} | " + " | ".join(row) + " |")
    for L in sorted({c["train_len"] for c in training}):
        rows = [c for c in training if c["train_len"] == L]
        nope = next((c for c in rows if c["scheme"] == "nope" and "error" not in c), None)
        lines += ["", f"## Training at L_tr = {L}: tokens/s (step time x NoPE)", "", "| scheme | tokens/s | x |"]
        lines += ["|---|---:|---:|"]
        for c in rows:
            if "error" in c:
                lines.append(f"| {c['scheme']} | err | |")
            else:
                lines.append(
                    f"| {c['scheme']} | {c['tokens_per_s']:,.0f} | {ratio(c['step_ms'], nope and nope['step_ms'])} |"
                )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("benchmarks/gpu.py: torch sees no CUDA device; run it on a GPU machine (or --device cpu --smoke)")
        return 2
    if device.type != "cuda" and not args.smoke:
        print("benchmarks/gpu.py: without CUDA only --smoke runs (the numbers mean nothing on a CPU)")
        return 2
    names = SCHEMES.names() if args.schemes == "all" else [s for s in args.schemes.split(",") if s]
    masks = [m for m in args.masks.split(",") if m]
    start = time.time()
    checks = [check(n, m, args, device) for n in names for m in masks]
    for c in checks:
        if not c["ok"]:
            print(f"MISMATCH {c}", file=sys.stderr)
    cells = attention_cells(args, device, names, masks)
    training = training_cells(args, device, names)
    meta = {
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "dtype": args.dtype,
        "args": vars(args),
        "seconds": round(time.time() - start, 1),
        "compiled_graphs": compiled_graphs(),
        "recompile_limit": RECOMPILE_LIMIT,
    }
    text = report(checks, cells, training, meta)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "checks": checks, "attention": cells, "training": training}, indent=1))
    out.with_suffix(".md").write_text(text)
    print(f"wrote {out} and {out.with_suffix('.md')}", file=sys.stderr)
    return 0 if all(c["ok"] for c in checks) and not any(math.isnan(c["forward_err"]) for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
