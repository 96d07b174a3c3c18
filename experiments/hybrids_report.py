"""The tables of docs/hybrids.md from a finished (or partly finished) `lextra study experiments/hybrids.toml` folder.

Reads the study's cells (`cells/perplexity`, `cells/retrieval`): perplexity per model at every length under the
`chunks` protocol, passkey exact match and rank-1 rate per length with their Wilson 95% intervals (Wilson 1927)
over the prompts, then measures the attention weight on the first token per layer
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
from lextra.tasks.ruler import wilson_interval


def cell(folder: Path, section: str, name: str) -> dict[str, Any] | None:
    """A study cell's result, or None when it has not been computed yet."""
    path = folder / "cells" / section / f"{name.replace(':', '-').replace('+', '_')}.json"
    return json.loads(path.read_text())["result"] if path.exists() else None


def perplexity_table(folder: Path, labels: list[str], lengths: list[int], train_len: int) -> str:
    """Rows: models; columns: chunks-protocol perplexity at each length (x L_tr)."""
    head = "| model | " + " | ".join(f"{n // train_len}x ({n})" for n in lengths) + " |"
    lines = [head, "|" + "---|" * (len(lengths) + 1)]
    for label in labels:
        result = cell(folder, "perplexity", f"{label}-causal-seed0")
        row = (
            ["-"] * len(lengths)
            if result is None
            else [f"{result['results']['chunks'][str(n)]['ppl']:.2f}" for n in lengths]
        )
        lines.append(f"| {label} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def passkey_table(folder: Path, labels: list[str], train_len: int, metric: str = "exact") -> str:
    """Rows: models; columns: the prompts scored right by `metric` per prompt length (`exact`: greedy exact match;
    `rank1`: the gold key ranked first among the candidates by log-likelihood) with the Wilson 95% interval."""
    rows, lengths = {}, None
    for label in labels:
        result = cell(folder, "retrieval", label)
        if result is None:
            continue
        lengths = result["lengths"]
        row = []
        for n in lengths:
            depths = result["cells"][str(n)].values()
            prompts = sum(c["samples"] for c in depths)
            hits = round(sum(c[metric] * c["samples"] for c in depths))
            low, high = wilson_interval(100.0 * hits / prompts, prompts)
            row.append(f"{hits}/{prompts} ({low:.0f}-{high:.0f}%)")
        rows[label] = row
    if lengths is None:
        return "(no passkey cell yet)"
    head = "| model | " + " | ".join(f"{n // train_len}x ({n})" for n in lengths) + " |"
    lines = [head, "|" + "---|" * (len(lengths) + 1)]
    lines += [f"| {label} | " + " | ".join(row) + " |" for label, row in rows.items()]
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
    print(perplexity_table(args.folder, labels, config.lengths, config.train_len))
    print("\n### Passkey exact match after fine-tuning at L_tr\n")
    print(passkey_table(args.folder, labels, config.train_len))
    print("\n### Passkey: gold key ranked first among the candidates\n")
    print(passkey_table(args.folder, labels, config.train_len, "rank1"))
    if args.sinks:
        print("\n### Attention weight on the first token, per layer\n")
        print(sinks_table(args.folder, [s for s in args.sinks.split(",") if s], config, args.documents))


if __name__ == "__main__":
    main()
