"""The evaluation phase of the main job (`make run`), one model per scheme, timed in source trees and precisions.

What it measures
    For each scheme, `evaluate_model` with `lextra compare`'s default settings (lengths L_tr x 1..16, the three
    protocols, 8 documents unless `--documents`) on the main job's model (width 128, 4 layers; seed 0 initial
    weights, or the trained weights `--models` names: the time does not depend on training, the precision's NLL
    difference does) and the built-in corpus. Each (round, tree, thread count) runs in a fresh subprocess with
    that tree's `src` on `PYTHONPATH`; inside it every scheme is evaluated once per `--precisions` entry, the
    precisions one after the other (their order reversed every other round), so the runs compared share the
    machine's load.
    Reported per scheme and thread count: median seconds per (tree, precision) over the rounds, scored tokens/s,
    the speed-up over the first (tree, precision), and the largest relative difference of any cell's NLL from it.

Usage
    .venv/bin/python benchmarks/evaluation.py --trees /path/to/old/checkout,. --schemes rope,alibi,t5 --rounds 2
    .venv/bin/python benchmarks/evaluation.py --precisions fp32,bf16 --threads 1,2 --rounds 3 --schemes rope,t5
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
    """Evaluate each scheme's model at each precision; {scheme: {precision: seconds, cells' NLL and tokens}}."""
    import copy

    import torch

    from lextra.evaluate import EvalConfig, evaluate_model
    from lextra.model import GPT, load_model
    from lextra.train import TrainConfig, open_training_data

    torch.set_num_threads(int(spec["threads"]))
    config = TrainConfig()
    data = open_training_data(copy.deepcopy(config), False)[0]
    out: dict[str, Any] = {}
    for scheme in spec["schemes"]:
        folder = spec["models"].get(scheme)
        if folder is None:
            config.model.layer_plan = scheme
            torch.manual_seed(0)
            model = GPT(config.model)
        else:
            model = load_model(folder, map_location="cpu")
        out[scheme] = {}
        for precision in spec["precisions"]:
            if precision != "fp32" and "precision" not in EvalConfig.__dataclass_fields__:
                continue  # a tree from before evaluation precisions: fp32 only
            start = time.perf_counter()
            # fp32 named only when asked for otherwise: trees from before `precision` existed evaluate in fp32
            chosen = {} if precision == "fp32" else {"precision": precision}
            settings = EvalConfig(documents=int(spec["documents"]), **chosen)
            evaluation = evaluate_model(model, data, settings, progress=False)
            seconds = time.perf_counter() - start
            cells = {f"{p}@{n}": [pt.nll, pt.tokens] for p, row in evaluation.results.items() for n, pt in row.items()}
            used = getattr(evaluation, "precision", "fp32")
            out[scheme][precision] = {"seconds": seconds, "cells": cells, "used": used}
    return out


def parse_models(text: str) -> dict[str, str]:
    """`rope=runs/rope/model,alibi=...` -> {scheme: folder} (empty: every scheme from seed 0 initial weights)."""
    models = {}
    for item in csv_list(text):
        scheme, sep, folder = item.partition("=")
        if not sep:
            raise SystemExit(f"--models takes SCHEME=FOLDER items, got {item!r}")
        models[scheme] = folder
    return models


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=HelpFormatter)
    parser.add_argument("--trees", default=".", help="comma list of source trees (repository roots); first: before")
    parser.add_argument("--schemes", default="rope,alibi,t5", help="comma list of schemes")
    parser.add_argument("--models", default="", help="trained weights to time instead: SCHEME=FOLDER,...")
    parser.add_argument("--precisions", default="fp32", help="comma list of evaluation precisions (fp32,bf16,auto)")
    parser.add_argument("--documents", type=int, default=8, help="documents per evaluation (compare's: 8)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds; every tree runs once per round")
    parser.add_argument("--threads", default="2", help="comma list of torch thread counts")
    harness.add_out_worker(parser, "benchmarks/results/evaluation.json")
    args = parser.parse_args(argv)
    if args.worker is not None:
        return harness.worker_main(run_cell, args.worker)
    trees = [str(Path(t).resolve()) for t in csv_list(args.trees)]
    schemes, precisions, threads = csv_list(args.schemes), csv_list(args.precisions), csv_list(args.threads)
    models = parse_models(args.models)
    runs: dict[str, list[dict[str, Any]]] = {f"{tree}|{n}": [] for tree in trees for n in threads}
    for round_index in range(args.rounds):
        order = precisions if round_index % 2 == 0 else precisions[::-1]
        for n in threads:
            for tree in trees:
                spec = {"schemes": schemes, "threads": n, "precisions": order, "models": models,
                        "documents": args.documents}  # fmt: skip
                env = {**os.environ, "PYTHONPATH": f"{tree}/src", "OMP_NUM_THREADS": n}
                done = subprocess.run(
                    [sys.executable, __file__, "--worker", json.dumps(spec)], env=env, capture_output=True, text=True
                )
                result = json.loads(done.stdout.strip().splitlines()[-1])
                if "error" in result:
                    raise SystemExit(f"{tree}: {result['error']}")
                runs[f"{tree}|{n}"].append(result)
                ran = [(s, p) for s in schemes for p in order if p in result[s]]
                took = ", ".join(f"{s} {p} {result[s][p]['seconds']:.1f} s" for s, p in ran)
                print(f"round {round_index + 1}/{args.rounds} {tree}, {n} thread(s): {took}", file=sys.stderr)
    rows = [row for n in threads for scheme in schemes for row in table_rows(runs, trees, n, scheme, precisions)]
    header = ["scheme", "threads", "tree", "precision", "seconds (median)", "rounds", "scored tokens/s",
              "speed vs first", "max rel. NLL diff", "same token counts"]  # fmt: skip
    report = (
        f"Evaluation of one model, `lextra compare`'s defaults, medians of {args.rounds} rounds, trees and "
        "precisions alternating\n\n" + md_table(header, rows)
    )
    data = {"trees": trees, "schemes": schemes, "precisions": precisions, "threads": threads, "runs": runs}
    harness.write_report(Path(args.out), data, report)
    return 0


def table_rows(
    runs: dict[str, list[dict[str, Any]]], trees: list[str], threads: str, scheme: str, precisions: list[str]
) -> list[list[str]]:
    """One row per (tree, precision) of a scheme at a thread count, against the first tree's first precision."""
    first = runs[f"{trees[0]}|{threads}"]
    base_seconds = statistics.median(r[scheme][precisions[0]]["seconds"] for r in first)
    old = first[0][scheme][precisions[0]]["cells"]
    tokens = sum(count for _, count in old.values())
    rows = []
    for tree in trees:
        for precision in precisions:
            mine = [r[scheme][precision] for r in runs[f"{tree}|{threads}"] if precision in r[scheme]]
            if not mine:
                continue
            seconds = statistics.median(m["seconds"] for m in mine)
            new = mine[0]["cells"]
            diff = max(abs(new[c][0] - old[c][0]) / abs(old[c][0]) for c in old)
            rows.append([
                scheme, threads, tree, mine[0]["used"], f"{seconds:.1f}",
                ", ".join(f"{m['seconds']:.1f}" for m in mine), f"{tokens / seconds:,.0f}",
                f"{base_seconds / seconds:.2f}x", f"{diff:.1e}", str(all(new[c][1] == old[c][1] for c in old)),
            ])  # fmt: skip
    return rows


if __name__ == "__main__":
    sys.exit(main())
