"""The cost of packed documents' attention (`--pack documents`) against causal attention over the whole window.

A packed step attends within each document (`lextra.train.packing`): the window's documents become rows padded to
their length bucket, one `attention` call per bucket, each plain causal. This measures, at windows of 8k-32k
tokens filled with documents of log-uniform lengths (128 tokens to the window), the forward (and with --backward
the backward) time of those calls next to one causal call over the whole window and one call under the window's
`DocumentMask` (the mask path: tiles across documents skipped), on the same backend choice (`auto`), in one
process; and the bookkeeping (finding the documents, building the bucket rows) of a packed batch.

    .venv/bin/python benchmarks/packing.py                       # L = 8192, 16384, 32768; rope and alibi
    .venv/bin/python benchmarks/packing.py --lengths 8192 --schemes rope --repeats 5
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import torch

from lextra.attention import Mask, attention
from lextra.attention.documents import DocumentMask
from lextra.positions import HeadDims, build_scheme
from lextra.train.packing import bucket_rows, buckets, document_units


def document_lengths(window: int, seed: int, shortest: int = 128, longest: int | None = None) -> list[int]:
    """Documents of log-uniform lengths in [shortest, longest] (default: the window) filling `window + 1` tokens
    (the last one cut)."""
    top = min(longest or window, window)
    generator = torch.Generator().manual_seed(seed)
    lengths, left = [], window + 1
    while left > 0:
        u = float(torch.rand((), generator=generator))
        n = int(math.exp(math.log(shortest) + u * (math.log(top) - math.log(shortest))))
        lengths.append(min(n, left))
        left -= lengths[-1]
    return lengths


def packed_batch(lengths: list[int]) -> torch.Tensor:
    """A (1, 2, L + 1) packed batch of these documents (tokens 0)."""
    ids = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])
    return torch.stack((torch.zeros_like(ids), ids))[None]


def timed(call, repeats: int) -> float:
    """The median seconds of `repeats` calls, after one warm-up."""
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cell(scheme_name: str, window: int, args: argparse.Namespace) -> dict:
    """One (scheme, window) measurement: causal over the window against the packed documents' bucket calls and
    the document mask."""
    heads, dim, repeats, backward = args.heads, args.head_dim, args.repeats, args.backward
    scheme = build_scheme(scheme_name, HeadDims(heads, dim, heads * dim, window))
    lengths = document_lengths(window, args.seed, longest=args.longest)
    batch = packed_batch(lengths)
    start = time.perf_counter()
    grouped = buckets(document_units(batch[:, 1]), window)
    for length, units in grouped.items():
        bucket_rows(batch[:, 0], units, length)
    bookkeeping = time.perf_counter() - start
    padded = sum(length * len(units) for length, units in grouped.items())

    def run(shape: tuple[int, int], mask: Mask | str = "causal") -> None:
        q, k, v = (torch.randn(shape[0], heads, shape[1], dim, requires_grad=backward) for _ in range(3))
        context = torch.enable_grad() if backward else torch.no_grad()
        with context:
            out = attention(q, k, v, scheme=scheme, mask=mask)
            if backward:
                out.sum().backward()

    causal = timed(lambda: run((1, window)), repeats)
    packed = timed(lambda: [run((len(units), length)) for length, units in grouped.items()], repeats)
    mask = DocumentMask(batch[0, 1, :-1])
    masked = timed(lambda: run((1, window), mask), repeats)
    return {
        "scheme": scheme_name,
        "window": window,
        "documents": len([n for n in lengths if n >= 2]),
        "buckets": len(grouped),
        "padded_tokens": padded,
        "ideal_work": round(sum(n * n for n in lengths) / window**2, 4),
        "causal_s": round(causal, 4),
        "packed_s": round(packed, 4),
        "ratio": round(packed / causal, 3),
        "mask_s": round(masked, 4),
        "mask_ratio": round(masked / causal, 3),
        "bookkeeping_s": round(bookkeeping, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="8192,16384,32768")
    parser.add_argument("--schemes", default="rope,alibi")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backward", action="store_true", help="time forward and backward")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--longest", type=int, default=None, help="longest document (default: the window)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for window in (int(x) for x in args.lengths.split(",")):
        for name in args.schemes.split(","):
            rows.append(cell(name, window, args))
            print(json.dumps(rows[-1]), flush=True)
    print("| scheme | L | documents | buckets | padded / L | ideal work | causal s | packed s (ratio) "
          "| DocumentMask s (ratio) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['scheme']} | {r['window']} | {r['documents']} | {r['buckets']} | "
              f"{r['padded_tokens'] / r['window']:.3f} | {r['ideal_work']:.3f} | {r['causal_s']:.3f} | "
              f"{r['packed_s']:.3f} ({r['ratio']:.2f}) | {r['mask_s']:.3f} ({r['mask_ratio']:.2f}) |")  # fmt: skip


if __name__ == "__main__":
    main()
