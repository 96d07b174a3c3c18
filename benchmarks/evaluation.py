"""The evaluation phase of the main job (`make run`), one model per scheme, timed in two source trees alternately.

What it measures
    For each scheme, `evaluate_model` with `lextra compare`'s default settings (lengths L_tr x 1..16, the three
    protocols, 8 documents) on the main job's model (width 128, 4 layers, seed 0 weights: the time does not depend
    on training) and the built-in corpus. Each (round, tree) runs in a fresh subprocess with that tree's `src` on
    `PYTHONPATH`, the trees alternating round after round, so a before/after pair shares the machine's load.
    Reported: median seconds per tree and scheme, the ratio to the first tree, and the largest relative difference
    of any cell's NLL from the first tree's (exactness).

Usage
    .venv/bin/python benchmarks/evaluation.py --trees /path/to/old/checkout,. --schemes rope,alibi,t5 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import harness
from harness import HelpFormatter, csv_list, md_table


def run_cell(spec: dict[str, Any]) -> dict[str, Any]:
    """Evaluate each scheme's seed-0 model; seconds and every cell's NLL and token count per scheme."""
    import copy

    import torch

    from lextra.evaluate import EvalConfig, evaluate_model
    from lextra.model import GPT
    from lextra.train import TrainConfig, open_training_data

    torch.set_num_threads(int(spec["threads"]))
    config = TrainConfig()
    data = open_training_data(copy.deepcopy(config), False)[0]
    out = {}
    for scheme in spec["schemes"]:
        config.model.scheme = scheme
        torch.manual_seed(0)
        model = GPT(config.model)
        start = time.perf_counter()
        evaluation = evaluate_model(model, data, EvalConfig(), progress=False)
        seconds = time.perf_counter() - start
        cells = {f"{p}@{n}": [pt.nll, pt.tokens] for p, row in evaluation.results.items() for n, pt in row.items()}
        out[scheme] = {"seconds": seconds, "cells": cells}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=HelpFormatter)
    parser.add_argument("--trees", default=".", help="comma list of source trees (repository roots); first: before")
    parser.add_argument("--schemes", default="rope,alibi,t5", help="comma list of schemes")
    parser.add_argument("--rounds", type=int, default=2, help="rounds; every tree runs once per round")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    harness.add_out_worker(parser, "benchmarks/results/evaluation.json")
    args = parser.parse_args(argv)
    if args.worker is not None:
        return harness.worker_main(run_cell, args.worker)
    trees = [str(Path(t).resolve()) for t in csv_list(args.trees)]
    schemes = csv_list(args.schemes)
    runs: dict[str, list[dict[str, Any]]] = {tree: [] for tree in trees}
    for round_index in range(args.rounds):
        for tree in trees:
            spec = {"schemes": schemes, "threads": args.threads}
            env = {**os.environ, "PYTHONPATH": f"{tree}/src", "OMP_NUM_THREADS": str(args.threads)}
            done = subprocess.run(
                [sys.executable, __file__, "--worker", json.dumps(spec)], env=env, capture_output=True, text=True
            )
            result = json.loads(done.stdout.strip().splitlines()[-1])
            if "error" in result:
                raise SystemExit(f"{tree}: {result['error']}")
            runs[tree].append(result)
            took = ", ".join(f"{s} {result[s]['seconds']:.1f} s" for s in schemes)
            print(f"round {round_index + 1}/{args.rounds} {tree}: {took}", file=sys.stderr)
    first = trees[0]
    rows = []
    for scheme in schemes:
        base = statistics.median(r[scheme]["seconds"] for r in runs[first])
        for tree in trees:
            seconds = statistics.median(r[scheme]["seconds"] for r in runs[tree])
            old, new = runs[first][0][scheme]["cells"], runs[tree][0][scheme]["cells"]
            diff = max(abs(new[c][0] - old[c][0]) / abs(old[c][0]) for c in old)
            same_tokens = all(new[c][1] == old[c][1] for c in old)
            rows.append([scheme, tree, f"{seconds:.1f}", f"{base / seconds:.2f}x", f"{diff:.1e}", str(same_tokens)])
    header = ["scheme", "tree", "seconds (median)", "speed vs first tree", "max rel. NLL diff", "same token counts"]
    report = (
        f"Evaluation of one model, `lextra compare`'s defaults, {args.threads} thread(s), medians of "
        f"{args.rounds} rounds, trees alternating\n\n" + md_table(header, rows)
    )
    harness.write_report(Path(args.out), {"trees": trees, "schemes": schemes, "runs": runs}, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
