"""The files of one perplexity evaluation: results.csv, table.md (one table per protocol) and perplexity.png."""

from __future__ import annotations

from pathlib import Path

from lextra.evaluate import Evaluation
from lextra.io import atomic_write_text
from lextra.reporting.plots import plot_curves
from lextra.reporting.tables import markdown_table, string_keys, write_csv


def save_eval_outputs(out_dir: str | Path, label: str, evaluation: Evaluation) -> dict[str, Path]:
    """results.csv, table.md and perplexity.png for one evaluated model."""
    out_dir = Path(out_dir)
    records = [
        {"model": label, "protocol": protocol, "length": n, **point.to_dict(), "precision": evaluation.precision}
        for protocol, by_length in evaluation.results.items()
        for n, point in by_length.items()
    ]
    write_csv(out_dir / "results.csv", records)
    curves = {protocol: {label: string_keys(evaluation.curve(protocol))} for protocol in evaluation.protocols}
    tables = [
        f"### {protocol}\n\n" + markdown_table(rows, evaluation.lengths, "ppl") for protocol, rows in curves.items()
    ]
    atomic_write_text(out_dir / "table.md", "\n\n".join(tables) + "\n")
    plot = plot_curves(curves, evaluation.train_len, out_dir / "perplexity.png", title=label)
    return {"csv": out_dir / "results.csv", "table": out_dir / "table.md", "plot": plot}
