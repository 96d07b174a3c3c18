"""The files of a `lextra harness` run: results.json (model, label, arguments, lm-eval's metrics), results.csv (a
row per task and metric), table.md, and samples.jsonl when asked."""

from __future__ import annotations

import json
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


def save_harness_outputs(
    out_dir: str | Path, summary: dict[str, Any], samples: dict[str, list[dict[str, Any]]] | None = None
) -> dict[str, Path]:
    """results.json, results.csv and table.md in `out_dir`; with lm-eval's `samples`, samples.jsonl (a line per
    task and document: its prompt arguments, responses and metrics)."""
    out_dir = Path(out_dir)
    paths = {"json": out_dir / "results.json", "csv": out_dir / "results.csv", "table": out_dir / "table.md"}
    if samples:
        lines = [json.dumps({"task": task, **row}, default=str) for task, rows in samples.items() for row in rows]
        atomic_write_text(out_dir / "samples.jsonl", "".join(line + "\n" for line in lines))
        paths["samples"] = out_dir / "samples.jsonl"
    atomic_write_json(out_dir / "results.json", summary)
    records = [{"label": summary["label"], **row} for row in summary["metrics"]]
    write_csv(out_dir / "results.csv", records)
    atomic_write_text(out_dir / "table.md", harness_table(summary) + "\n")
    return paths
