"""The files of a `lextra harness` run: results.json (model, label, arguments, lm-eval's metrics), results.csv (a
row per task and metric) and table.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lextra.io import atomic_write_json, atomic_write_text
from lextra.reporting.tables import write_csv


def harness_table(summary: dict[str, Any]) -> str:
    """A markdown table of every task's metrics (value and standard error)."""
    lines = [f"### lm-eval: {summary['label']} (lm_eval {summary['lm_eval']})", "",
             "| task | metric | filter | value | stderr |", "|---|---|---|---:|---:|"]  # fmt: skip
    for row in summary["metrics"]:
        stderr = "-" if row["stderr"] is None else f"{row['stderr']:.4g}"
        lines.append(f"| {row['task']} | {row['metric']} | {row['filter']} | {row['value']:.6g} | {stderr} |")
    return "\n".join(lines)


def save_harness_outputs(out_dir: str | Path, summary: dict[str, Any]) -> dict[str, Path]:
    """results.json, results.csv and table.md in `out_dir`."""
    out_dir = Path(out_dir)
    atomic_write_json(out_dir / "results.json", summary)
    records = [{"label": summary["label"], **row} for row in summary["metrics"]]
    write_csv(out_dir / "results.csv", records)
    atomic_write_text(out_dir / "table.md", harness_table(summary) + "\n")
    return {"json": out_dir / "results.json", "csv": out_dir / "results.csv", "table": out_dir / "table.md"}
