"""The files of retrieval and code-completion evaluations: JSON, CSV, markdown tables and the depth x length
heatmap."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from lextra.evaluate.retrieval import CompletionResult, RetrievalResult
from lextra.io import atomic_write_json, atomic_write_text
from lextra.reporting.plots import pyplot, save_figure
from lextra.reporting.tables import markdown_table, string_keys, write_csv


def save_retrieval_outputs(out_dir: str | Path, result: RetrievalResult) -> dict[str, Path]:
    """results.json, results.csv (one row per cell), table.md (per length and the depth grid), heatmap.png."""
    out_dir = Path(out_dir)
    atomic_write_json(out_dir / "results.json", result.to_dict())
    records = [
        {
            "model": result.label,
            "task": result.task,
            "length": n,
            "depth": d,
            **cell.scores.to_dict(),
            "samples": cell.samples,
        }
        for n, row in result.cells.items()
        for d, cell in row.items()
    ]
    write_csv(out_dir / "results.csv", records)
    atomic_write_text(out_dir / "table.md", retrieval_tables({result.label or "model": result}) + "\n")
    heatmap = plot_heatmap(result, out_dir / "heatmap.png")
    return {"json": out_dir / "results.json", "csv": out_dir / "results.csv", "table": out_dir / "table.md",
            "heatmap": heatmap}  # fmt: skip


def retrieval_tables(results: Mapping[str, RetrievalResult]) -> str:
    """Markdown: exact-match and rank-1 accuracy per model (rows) and length (columns), then per depth for each."""
    first = next(iter(results.values()))
    lengths = first.lengths
    parts = []
    for metric, what in (("exact", "greedy exact match"), ("rank1", "gold answer ranked first")):
        rows = {
            label: {str(n): getattr(scores, metric) for n, scores in r.by_length.items()}
            for label, r in results.items()
        }
        parts.append(f"### {first.task}: {what} (rows: model, columns: length)\n\n" + markdown_table(rows, lengths))
    for label, r in results.items():
        rows = {f"depth {d}": string_keys({n: row[d].exact for n, row in r.cells.items()}) for d in r.depths}
        parts.append(f"### {label}: exact match by depth and length\n\n" + markdown_table(rows, lengths, "depth"))
    return "\n\n".join(parts)


def plot_heatmap(result: RetrievalResult, path: str | Path) -> Path:
    """The needle-in-a-haystack plot: exact-match accuracy per (depth, length) cell, green = retrieved."""
    plt = pyplot()
    lengths, depths = result.lengths, result.depths
    grid = [[result.cell(n, d).exact for n in lengths] for d in depths]
    fig, ax = plt.subplots(figsize=(1.1 * len(lengths) + 2.2, 0.55 * len(depths) + 1.6))
    image = ax.imshow(grid, cmap="RdYlGn", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(lengths)), [str(n) for n in lengths])
    ax.set_yticks(range(len(depths)), [f"{d:.0%}" for d in depths])
    for i, row in enumerate(grid):
        for j, value in enumerate(row):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7)
    ax.set_xlabel("prompt length (tokens)")
    ax.set_ylabel("needle depth")
    ax.set_title(f"{result.label} {result.task}: exact", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    return save_figure(fig, path, tight=False)


def completion_table(results: Mapping[str, CompletionResult]) -> str:
    """Markdown: exact match and edit similarity per model (full context, then the truncation baseline)."""
    first = next(iter(results.values()))
    lengths = first.lengths
    parts = []
    for metric in ("exact", "edit_sim"):
        rows: dict[str, dict[str, float]] = {}
        for label, r in results.items():
            rows[label] = {str(n): getattr(b.full, metric) for n, b in r.buckets.items()}
            rows[f"{label} (last L_tr only)"] = {str(n): getattr(b.truncated, metric) for n, b in r.buckets.items()}
        parts.append(f"### next-line {metric} by context length\n\n" + markdown_table(rows, lengths, "model"))
    return "\n\n".join(parts)
