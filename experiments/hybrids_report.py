"""The tables of docs/hybrids.md from a finished (or partly finished) `lextra study experiments/hybrids.toml` folder.

Reads the study's cells (`cells/perplexity`, `cells/retrieval`): perplexity per model at every length under the
`chunks` protocol, and passkey greedy exact match per seed and length with the mean over the seeds that have
finished and its 95% t-interval, whether every seed learned the task at L_tr, and the rate at which the gold key
is ranked first among the candidates. A model enters the verdict (ppl(16x) / ppl(1x) <= 1.05 and >= 90% exact at 16x)
only where every seed retrieves >= 90% at L_tr. Then it measures the attention weight on the first token per layer
(`lextra.analysis.first_token_mass`, the sink measure of Qiu et al. 2025, arXiv 2505.06708) for the models named by
`--sinks` on held-out windows of L_tr and 8 L_tr tokens.

Usage
    PYTHONPATH=src .venv/bin/python experiments/hybrids_report.py runs/hybrids --sinks rope,rope-gate,rope-sinks,nope
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from lextra.analysis import first_token_mass
from lextra.data import prepare_data
from lextra.methods import calibration_windows
from lextra.pipelines.loading import load_lextra
from lextra.pipelines.study import load_study
from lextra.reporting.intervals import Interval


def cell(folder: Path, section: str, name: str) -> dict[str, Any] | None:
    """A study cell's result, or None when it has not been computed yet."""
    path = folder / "cells" / section / f"{name.replace(':', '-').replace('+', '_')}.json"
    return json.loads(path.read_text())["result"] if path.exists() else None


def seed_cells(folder: Path, section: str, name: str, seeds: list[int]) -> list[dict[str, Any]]:
    """The finished cells of every seed (a one-seed study names its retrieval cells without the seed); a retrieval
    cell of the study's `until_learned` rounds replaces the budget's."""
    names = [name] if section == "retrieval" and len(seeds) == 1 else [
        f"{name}{'-causal' if section == 'perplexity' else ''}-seed{seed}" for seed in seeds
    ]  # fmt: skip
    found = [cell(folder, section, f"{n}-until-learned") or cell(folder, section, n) for n in names]
    return [c for c in found if c is not None]


def pooled(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
    """The mean over seeds with its 95% t-interval and the number of seeds; '-' for none."""
    if not values:
        return "-"
    spread = Interval.of(values)
    return spread.text(scale, digits) + ("" if len(values) == 1 else f" (n={len(values)})")


def perplexity_table(folder: Path, labels: list[str], lengths: list[int], train_len: int, seeds: list[int]) -> str:
    """Rows: models; columns: chunks-protocol perplexity at each length (x L_tr) and ppl(16x) / ppl(1x)."""
    head = "| model | " + " | ".join(f"{n // train_len}x ({n})" for n in lengths) + " | last / 1x |"
    lines = [head, "|" + "---|" * (len(lengths) + 2)]
    for label in labels:
        results = seed_cells(folder, "perplexity", label, seeds)
        ppl = [[r["results"]["chunks"][str(n)]["ppl"] for r in results] for n in lengths]
        ratios = [r["results"]["chunks"][str(lengths[-1])]["ppl"] / r["results"]["chunks"][str(lengths[0])]["ppl"]
                  for r in results]  # fmt: skip
        lines.append(f"| {label} | " + " | ".join(pooled(v) for v in ppl) + f" | {pooled(ratios)} |")
    return "\n".join(lines)


def passkey_rates(result: dict[str, Any], metric: str) -> dict[int, tuple[int, int]]:
    """Length -> (prompts scored right by `metric`, prompts) of one retrieval cell."""
    rates = {}
    for n in result["lengths"]:
        depths = result["cells"][str(n)].values()
        prompts = sum(c["samples"] for c in depths)
        rates[n] = (round(sum(c[metric] * c["samples"] for c in depths)), prompts)
    return rates


RATE = (0.0, 1.0)  # a share of prompts: intervals are clipped to it


def passkey_table(folder: Path, labels: list[str], train_len: int, seeds: list[int]) -> str:
    """Rows: models; columns: whether every seed learned the task at L_tr (>= 90% exact), greedy exact match per
    seed at each length, the mean over seeds at each length past L_tr with its 95% t-interval (clipped to 0-100%),
    and the gold key ranked first among the candidates by log-likelihood (mean over seeds)."""
    rows, lengths = [], None
    for label in labels:
        results = seed_cells(folder, "retrieval", label, seeds)
        if not results:
            continue
        lengths = results[0]["lengths"]
        exact = [{n: hits / prompts for n, (hits, prompts) in passkey_rates(r, "exact").items()} for r in results]
        first = [{n: hits / prompts for n, (hits, prompts) in passkey_rates(r, "rank1").items()} for r in results]
        inside = [e[lengths[0]] for e in exact]
        if min(inside) >= 0.9:
            learned = "yes, every seed" if len(results) == len(seeds) else "yes, every seed so far"
        else:
            learned = f"**no** (learned on {sum(x >= 0.9 for x in inside)} of {len(results)} seeds)"
        if len(results) < len(seeds):
            learned += f" ({len(results)} of {len(seeds)} seeds finished)"
        rounds = {seed: cell(folder, "retrieval", f"{label}-seed{seed}-until-learned") for seed in seeds}
        extra = [f"seed {seed} +{r['extra_steps']:,} steps" for seed, r in rounds.items() if r is not None]
        if extra:
            learned += f" ({'; '.join(extra)}: `until_learned`)"
        per_seed = " / ".join(", ".join(f"{e[n]:.2f}" for e in exact) for n in lengths)
        means = "; ".join(Interval.of([e[n] for e in exact]).text(100.0, 0, RATE) + "%" for n in lengths[1:])
        ranked = " / ".join(f"{100 * sum(f[n] for f in first) / len(first):.0f}" for n in lengths[1:]) + "%"
        rows.append(f"| {label} | {learned} | {per_seed} | {means} | {ranked} |")
    if lengths is None:
        return "(no passkey cell yet)"
    multiples = [f"{n // train_len}x" for n in lengths]
    head = (f"| model | learned at L_tr? | exact {' / '.join(multiples)}, per seed ({', '.join(map(str, seeds))}) | "
            f"mean exact at {'; at '.join(multiples[1:])} (95% interval) | ranked first {' / '.join(multiples[1:])} "
            f"(mean) |")  # fmt: skip
    return "\n".join([head, "|---|---|---|---|---|", *rows])


def verdict(folder: Path, labels: list[str], config: Any) -> str:
    """Which models keep ppl(16x) / ppl(1x) <= 1.05 and retrieve >= 90% exact at 16x (means over seeds), counted
    only where every seed retrieves >= 90% exact at L_tr; the interval says whether the bar is decided."""
    seeds, lines = config.seeds, []
    for label in labels:
        ppl, keys = seed_cells(folder, "perplexity", label, seeds), seed_cells(folder, "retrieval", label, seeds)
        if len(ppl) < len(seeds) or len(keys) < len(seeds):
            lines.append(f"- {label}: {len(keys)} of {len(seeds)} seeds finished; no verdict yet")
            continue
        first, last = config.lengths[0], config.lengths[-1]
        ratio = Interval.of([r["results"]["chunks"][str(last)]["ppl"] / r["results"]["chunks"][str(first)]["ppl"]
                             for r in ppl])  # fmt: skip
        rates = [passkey_rates(r, "exact") for r in keys]
        inside = [hits / prompts for hits, prompts in (r[min(r)] for r in rates)]
        far = Interval.of([hits / prompts for hits, prompts in (r[max(r)] for r in rates)])
        if min(inside) < 0.9:
            lines.append(f"- {label}: not learned at L_tr (exact per seed {', '.join(f'{x:.2f}' for x in inside)})")
            continue
        keeps = ratio.mean <= 1.05 and far.mean >= 0.9
        decided = ratio.high <= 1.05 and far.low >= 0.9 if keeps else ratio.low > 1.05 or far.high < 0.9
        how = "decided by the intervals" if decided else "on the means; an interval spans the bar"
        lines.append(f"- {label}: ppl ratio {ratio.text(digits=2)}, exact at 16x {far.text(100.0, 0, RATE)}% -> "
                     f"{'keeps both' if keeps else 'does not keep both'} ({how})")  # fmt: skip
    return "\n".join(lines)


@torch.no_grad()
def sinks_table(folder: Path, labels: list[str], config: Any, documents: int) -> str:
    """Rows: model x length; columns: the mean attention weight on the first token in each layer."""
    data = prepare_data(config.train.corpus, config.train.tokenizer, config.train.limit_chars)
    L = config.train_len
    lines: list[str] = []
    for n in (L, 8 * L):
        texts = calibration_windows(data, n, documents, "test")
        for label in labels:
            model = load_lextra(folder / "models" / label / "seed0" / "model").model.eval()
            mass = first_token_mass(model, texts)
            if not lines:
                layers = len(mass.per_layer)
                lines = ["| model | length | " + " | ".join(f"layer {i}" for i in range(layers)) + " | uniform |"]
                lines.append("|" + "---|" * (layers + 3))
            cells = " | ".join(f"{100 * m:.1f}%" for m in mass.per_layer)
            lines.append(f"| {label} | {n} | {cells} | {100 * mass.uniform[0]:.1f}% |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--config", default="experiments/hybrids.toml")
    parser.add_argument("--sinks", default="rope,rope-gate,rope-sinks", help="models whose first-token mass to measure")
    parser.add_argument("--documents", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = load_study(args.config)
    labels = [m.label for m in config.models]
    print("### Perplexity (chunks protocol)\n")
    print(perplexity_table(args.folder, labels, config.lengths, config.train_len, config.seeds))
    print("\n### Passkey after fine-tuning at L_tr\n")
    print(passkey_table(args.folder, labels, config.train_len, config.seeds))
    print("\n### Perplexity within 1.05x and >= 90% exact at 16x\n")
    print(verdict(args.folder, labels, config))
    if args.sinks:
        print("\n### Attention weight on the first token, per layer\n")
        print(sinks_table(args.folder, [s for s in args.sinks.split(",") if s], config, args.documents))


if __name__ == "__main__":
    main()
