"""The table of docs/extend-by-training.md's mixed-window section from `experiments/mixed_window.sh`'s folder:
perplexity (chunks) at 128..1024 and passkey exact match at 1024 per row, the mean over the seeds with its 95%
t-interval, and which differences between the two fine-tunings exceed both intervals.

Usage
    PYTHONPATH=src .venv/bin/python experiments/mixed_window_report.py runs/mixed-window
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lextra.evaluate import Evaluation
from lextra.evaluate.retrieval import RetrievalResult
from lextra.reporting.intervals import Interval

LENGTHS = (128, 256, 512, 1024)
ROWS = {
    "base": "rope L_tr 128 (no fine-tuning)",
    "yarn": "yarn:8, 60 steps at 1024",
    "mixed": "yarn:8 + --mixed-window 128:1024, 60 steps",
    "packed": "yarn:8 + --pack documents, 60 steps",
}


def measures(folder: Path, name: str) -> dict[str, float] | None:
    """Perplexity per length and passkey exact match at 1024 of one model (None until both are written)."""
    ppl, passkey = folder / f"eval-{name}" / "results.json", folder / f"passkey-{name}" / "results.json"
    if not (ppl.exists() and passkey.exists()):
        return None
    evaluation = Evaluation.from_dict(json.loads(ppl.read_text()))
    retrieval = RetrievalResult.from_dict(json.loads(passkey.read_text()))
    return {**{str(n): evaluation.ppl("chunks", n) for n in LENGTHS}, "passkey": retrieval.by_length[1024].exact}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    folder = parser.parse_args().folder
    rows: dict[str, dict[str, Interval]] = {}
    for row in ROWS:
        names = ["base"] if row == "base" else [f"{row}-s{seed}" for seed in range(3)]
        found = [m for m in (measures(folder, name) for name in names) if m is not None]
        if found:
            rows[row] = {key: Interval.of([m[key] for m in found]) for key in found[0]}
    header = " | ".join(f"ppl {n}" for n in LENGTHS)
    print(f"| model | seeds | {header} | passkey 1024 exact |")
    print("|---|---:|" + "---:|" * (len(LENGTHS) + 1))
    for row, values in rows.items():
        cells = " | ".join(f"{values[str(n)].mean:.2f} ± {values[str(n)].half:.2f}" for n in LENGTHS)
        seeds = values["passkey"].n
        print(f"| {ROWS[row]} | {seeds} | {cells} | {values['passkey'].mean:.2f} ± {values['passkey'].half:.2f} |")
    for other in ("mixed", "packed"):
        if "yarn" in rows and other in rows:
            decided = [key for key in rows["yarn"] if rows["yarn"][key].separated(rows[other][key])]
            print(f"\nintervals separated ({other} vs yarn): {', '.join(decided) or 'none'}")


if __name__ == "__main__":
    main()
