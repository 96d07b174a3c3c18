"""bf16 evaluation against fp32 on trained models, set against the seed-to-seed difference (issue 36).

What it measures
    For each scheme and seed, the model `lextra train --out ROOT/<scheme>-<seed>` saved is evaluated with `lextra
    compare`'s defaults (L_tr x 1..16, three protocols, 8 documents unless `--documents`) in fp32 and in bf16
    (`EvalConfig.precision`). Per scheme: the largest relative difference bf16 vs fp32 of any cell's NLL and
    perplexity (over the seeds), the seed-to-seed relative difference of the fp32 cells (median and smallest over
    cells; with two or more seeds), the smallest per-cell ratio seed difference / precision difference, and whether
    every bf16 value is finite.

Usage
    lextra train --out runs/prec/rope-0 --scheme rope --seed 0   # and rope-1, alibi-0, ... (the main job's shape)
    .venv/bin/python benchmarks/eval_precision.py --root runs/prec --schemes rope,alibi,fire --seeds 0,1
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path
from typing import Any

import harness
from harness import HelpFormatter, csv_list, md_table


def evaluate(folder: Path, threads: int, documents: int) -> dict[str, dict[str, tuple[float, float]]]:
    """{precision: {cell: (nll, ppl)}} of one trained model, fp32 and bf16."""
    import torch

    from lextra.data import prepare_for_model
    from lextra.data.shards import shards_for_model
    from lextra.evaluate import EvalConfig, evaluate_model
    from lextra.model import load_model, read_model_meta

    torch.set_num_threads(threads)
    meta = read_model_meta(folder)
    data = shards_for_model(meta, None) or prepare_for_model(meta)
    model = load_model(folder, map_location="cpu")
    out = {}
    for precision in ("fp32", "bf16"):
        evaluation = evaluate_model(model, data, EvalConfig(precision=precision, documents=documents), progress=False)
        out[precision] = {
            f"{p}@{n}": (pt.nll, pt.ppl) for p, row in evaluation.results.items() for n, pt in row.items()
        }
    return out


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def scheme_row(scheme: str, by_seed: dict[int, dict[str, dict[str, tuple[float, float]]]]) -> list[str]:
    """The table row of one scheme (see the module docstring)."""
    cells = list(next(iter(by_seed.values()))["fp32"])
    finite = all(math.isfinite(v) for r in by_seed.values() for pair in r["bf16"].values() for v in pair)
    prec_nll = {c: max(rel(r["bf16"][c][0], r["fp32"][c][0]) for r in by_seed.values()) for c in cells}
    prec_ppl = max(rel(r["bf16"][c][1], r["fp32"][c][1]) for r in by_seed.values() for c in cells)
    row = [scheme, str(len(by_seed)), f"{max(prec_nll.values()):.1e}", f"{prec_ppl:.1e}"]
    seeds = sorted(by_seed)
    if len(seeds) < 2:
        return [*row, "-", "-", "-", str(finite)]
    a, b = by_seed[seeds[0]]["fp32"], by_seed[seeds[1]]["fp32"]
    seed_nll = {c: rel(b[c][0], a[c][0]) for c in cells}
    worst = min(seed_nll[c] / max(prec_nll[c], 1e-12) for c in cells)
    return [
        *row,
        f"{statistics.median(seed_nll.values()):.1e}",
        f"{min(seed_nll.values()):.1e}",
        f"{worst:,.0f}x",
        str(finite),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=HelpFormatter)
    parser.add_argument("--root", required=True, help="folder of training runs named <scheme>-<seed>")
    parser.add_argument("--schemes", default="rope,alibi,fire", help="comma list of schemes")
    parser.add_argument("--seeds", default="0,1", help="comma list of seeds (the first two are compared)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--documents", type=int, default=8, help="documents per evaluation (compare's: 8)")
    parser.add_argument("--out", default="benchmarks/results/eval_precision.json", help="results JSON (+ .md)")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    rows = []
    for scheme in csv_list(args.schemes):
        by_seed = {}
        for seed in (int(s) for s in csv_list(args.seeds)):
            folder = Path(args.root) / f"{scheme}-{seed}" / "model"
            if folder.exists():
                by_seed[seed] = evaluate(folder, args.threads, args.documents)
                print(f"{scheme} seed {seed} done", file=sys.stderr)
        if by_seed:
            results[scheme] = by_seed
            rows.append(scheme_row(scheme, by_seed))
    header = ["scheme", "seeds", "max rel. NLL diff bf16 vs fp32", "max rel. ppl diff bf16 vs fp32",
              "seed-to-seed rel. NLL diff (median)", "seed-to-seed (smallest cell)",
              "smallest per-cell ratio seed / precision", "bf16 all finite"]  # fmt: skip
    report = "bf16 against fp32 evaluation, `lextra compare`'s defaults\n\n" + md_table(header, rows)
    data = {"results": {s: {str(k): v for k, v in r.items()} for s, r in results.items()}}
    harness.write_report(Path(args.out), data, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
