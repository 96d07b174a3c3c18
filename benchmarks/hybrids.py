"""Cost of the layer-plan pieces (`lextra.attention.pieces`, the chunk mask, partial rotary, p-RoPE) next to plain
causal SDPA, and of a hybrid plan's forward next to the sum of its layers run alone; on the CPU or on a CUDA GPU.

What it measures
    At length L (default 16384), batch 1, 8 heads, head dim 64, the median over `--repeats` back-to-back pairs
    (after one warm-up call of each, which on CUDA also compiles FlexAttention for the shape) of the ratio of
    - `sdpa`: `F.scaled_dot_product_attention(q, k, v, is_causal=True)`, the baseline every ratio divides by (on
      CUDA in bf16/fp16 restricted to the flash kernel);
    - each piece through `attention(..., backend="auto")` (on CUDA: flex for the chunk mask, sinks, softcap and
      temperatures): `chunk:C` (NoPE), `sinks` (causal), `softcap:50` (causal), `rope,fraction=0.25` (partial
      rotary), `rope,proportional=0.75` (p-RoPE), `temp_tuning` (a per-query temperature), `gate` as its own
      projection and gating over causal NoPE attention (the piece's cost alone), and `qknorm` / `gate` as their
      own operations plus RoPE attention;
    - a hybrid plan (`--plan`, default `rnope-swa,window=1024` on 4 layers of width 512): `GPT.forward_layers`
      over all layers, against the sum of each layer run alone (`forward_layers(start=i, stop=i + 1)`).
    Forward only under `torch.no_grad()` by default; `--backward` times forward + backward (the output's sum as
    the loss) of the pieces instead. CPU: `--dtype` fp32, `--threads` 1 by default; CUDA: bf16, each call between
    two `torch.cuda.synchronize()`. Each ratio is a median of pairs run back to back, so it compares like with like
    on a machine whose load changes; the absolute times are not comparable across runs.

Usage
    .venv/bin/python benchmarks/hybrids.py                      # CPU, L = 16384, 3 repeats, JSON to stdout's last line
    .venv/bin/python benchmarks/hybrids.py --length 4096 --repeats 5 --out hybrids.json
    .venv/bin/python benchmarks/hybrids.py --device cuda --backward --repeats 5 --out hybrids-gpu.json
"""

from __future__ import annotations

import argparse
import contextlib
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
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def timed(call: Callable[[], object], device: torch.device) -> float:
    """Seconds of one call (on CUDA, from an idle device until its work is done)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def paired_ratio(
    call: Callable[[], object], base: Callable[[], object], repeats: int, device: torch.device
) -> tuple[float, float, float]:
    """(median ratio, median seconds, median base seconds) of `repeats` back-to-back pairs of `call` and `base`,
    after one warm-up call of each: pairs, so that a machine whose load changes divides like by like."""
    call(), base()
    pairs = [(timed(call, device), timed(base, device)) for _ in range(repeats)]
    return (
        statistics.median(a / b for a, b in pairs),
        statistics.median(a for a, _ in pairs),
        statistics.median(b for _, b in pairs),
    )


def flash_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal SDPA; on CUDA in half precision, the flash kernel only (the baseline of every ratio)."""
    context: contextlib.AbstractContextManager = contextlib.nullcontext()
    if q.device.type == "cuda" and q.dtype in (torch.bfloat16, torch.float16):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        context = sdpa_kernel(SDPBackend.FLASH_ATTENTION)
    with context:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def piece_calls(length: int, chunk: int, device: torch.device, dtype: torch.dtype) -> dict[str, Callable[[], object]]:
    """The calls timed against SDPA, by name (forward only; `with_backward` adds the backward)."""
    grad = torch.is_grad_enabled()
    q, k, v = (torch.randn(1, HEADS, length, HEAD_DIM, device=device, dtype=dtype, requires_grad=grad) for _ in "qkv")
    dims = HeadDims(HEADS, HEAD_DIM, HEADS * HEAD_DIM, 128)
    rope = build_scheme("rope", dims).to(device)
    partial = build_scheme("rope,fraction=0.25", dims).to(device)
    proportional = build_scheme("rope,proportional=0.75", dims).to(device)
    sinks = torch.randn(HEADS, device=device)
    tuning = PIECES.build("temp_tuning,beta=0.1,gamma=1024", dims)
    tau = (1.0 / tuning.query_scale(torch.arange(length))[None]).to(device)
    qknorm = PIECES.build("qknorm", dims).to(device, dtype)
    gate = PIECES.build("gate", dims).to(device, dtype)
    x = torch.randn(1, length, HEADS * HEAD_DIM, device=device, dtype=dtype)

    def normed() -> object:
        qn, kn = qknorm.transform_qk(q, k)
        return attention(qn, kn, v, scheme=rope)

    return {
        "sdpa": lambda: flash_sdpa(q, k, v),
        f"chunk:{chunk}": lambda: attention(q, k, v, mask=f"chunk:{chunk}"),
        "sinks": lambda: attention(q, k, v, sinks=sinks),
        "rope+sinks": lambda: attention(q, k, v, scheme=rope, sinks=sinks),
        "softcap:50": lambda: attention(q, k, v, softcap=50.0),
        "rope,fraction=0.25": lambda: attention(q, k, v, scheme=partial),
        "rope,proportional=0.75": lambda: attention(q, k, v, scheme=proportional),
        "temp_tuning": lambda: attention(q, k, v, temperature=tau),
        "rope+qknorm": normed,
        "gate": lambda: gate.transform_output(x, attention(q, k, v)),
        "rope+gate": lambda: gate.transform_output(x, attention(q, k, v, scheme=rope)),
    }


def with_backward(call: Callable[[], object]) -> Callable[[], object]:
    """`call`'s forward and the backward of its output's sum (gradients accumulate into the inputs; unread)."""

    def both() -> object:
        out = call()
        assert isinstance(out, torch.Tensor)
        out.float().sum().backward()
        return out

    return both


def hybrid_times(
    plan: str, length: int, n_layer: int, repeats: int, device: torch.device, dtype: torch.dtype
) -> dict[str, float]:
    """The plan's forward over all layers against the sum of its layers run alone, in pairs (`paired_ratio`);
    in a half `dtype` under autocast (weights fp32)."""
    config = GPTConfig(n_layer=n_layer, n_head=HEADS, d_model=HEADS * HEAD_DIM, train_len=128, layer_plan=plan)
    model = GPT(config).eval().to(device)
    x = torch.randn(1, length, config.d_model, device=device)
    positions = torch.arange(length, device=device)
    mask = build_mask("causal")
    half = dtype != torch.float32
    autocast = torch.autocast(device.type, dtype=dtype) if half else contextlib.nullcontext()

    def alone() -> None:
        for i in range(n_layer):
            model.forward_layers(x, positions, mask, start=i, stop=i + 1)

    with torch.no_grad(), autocast:
        ratio, whole, layers = paired_ratio(lambda: model.forward_layers(x, positions, mask), alone, repeats, device)
    return {"whole_s": whole, "layers_alone_s": layers, "ratio": ratio}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=16384)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads on the CPU")
    parser.add_argument("--chunk", type=int, default=1024)
    parser.add_argument("--plan", default="rnope-swa,window=1024")
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default=None, help="default: fp32 on the CPU, bf16 on CUDA")
    parser.add_argument("--backward", action="store_true", help="time forward + backward of the pieces")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    args.device = torch.device(args.device)
    if args.device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device (a CPU build of torch, or no GPU)")
    args.dtype = args.dtype or ("bf16" if args.device.type == "cuda" else "fp32")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dtype = DTYPES[args.dtype]
    with torch.set_grad_enabled(args.backward):
        calls = piece_calls(args.length, args.chunk, args.device, dtype)
        if args.backward:
            calls = {name: with_backward(call) for name, call in calls.items()}
        base = calls.pop("sdpa")
        ratios, times = {}, {}
        for name, call in calls.items():
            timing = paired_ratio(call, base, args.repeats, args.device)
            ratios[name], times[name], times[f"sdpa (paired with {name})"] = timing
            print(f"{name:<24} {times[name] * 1000:9.1f} ms  {ratios[name]:5.2f}x sdpa (median of pairs)", flush=True)
    hybrid = hybrid_times(args.plan, args.length, args.n_layer, args.repeats, args.device, dtype)
    print(f"plan {args.plan}: whole {hybrid['whole_s']:.2f} s, layers alone {hybrid['layers_alone_s']:.2f} s, "
          f"{hybrid['ratio']:.3f}x")  # fmt: skip
    record = {
        "length": args.length,
        "device": str(args.device),
        "dtype": args.dtype,
        "backward": args.backward,
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
