"""The files of one perplexity evaluation: results.csv, table.md (one table per protocol) and perplexity.png."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lextra.io import atomic_write_text
from lextra.reporting.plots import plot_curves
from lextra.reporting.tables import markdown_table, write_csv


def save_eval_outputs(out_dir: str | Path, label: str, evaluation: Mapping[str, Any]) -> dict[str, Path]:
    """results.csv, table.md and perplexity.png for one evaluated model."""
    out_dir = Path(out_dir)
    lengths = evaluation["lengths"]
    records = [
        {"model": label, "protocol": protocol, "length": int(n), **values}
        for protocol, by_length in evaluation["results"].items()
        for n, values in by_length.items()
    ]
    write_csv(out_dir / "results.csv", records)
    tables = [
        f"### {protocol}\n\n" + markdown_table({label: {n: v["ppl"] for n, v in by_length.items()}}, lengths, "ppl")
        for protocol, by_length in evaluation["results"].items()
    ]
    atomic_write_text(out_dir / "table.md", "\n\n".join(tables) + "\n")
    curves = {
        protocol: {label: {n: v["ppl"] for n, v in by_length.items()}}
        for protocol, by_length in evaluation["results"].items()
    }
    plot = plot_curves(curves, evaluation["train_len"], out_dir / "perplexity.png", title=label)
    return {"csv": out_dir / "results.csv", "table": out_dir / "table.md", "plot": plot}
