"""The files of a RULER run: JSON, CSV, a markdown table and the task x length heatmap."""

from __future__ import annotations

from pathlib import Path

from lextra.evaluate.ruler import RulerResult
from lextra.io import atomic_write_json, atomic_write_text
from lextra.reporting.plots import pyplot, save_figure
from lextra.reporting.tables import markdown_table, write_csv


def effective_text(result: RulerResult) -> str:
    """The effective length as a sentence fragment."""
    length = result.effective_length
    shortest = min(result.lengths)
    return f"{length}" if length is not None else f"none (below {shortest})"


def ruler_table(result: RulerResult) -> str:
    """Markdown: score and 95% interval per task (rows) and length (columns), the average, the effective length."""
    rows = {
        task: {str(n): f"{c.score:.1f} [{c.low:.0f}, {c.high:.0f}]" for n, c in result.cells[task].items()}
        for task in result.tasks
    }
    rows["average"] = {str(n): f"{v:.1f}" for n, v in result.averages.items()}
    table = markdown_table(rows, result.lengths, "task", cell=lambda value: value or "-")
    return (
        f"### RULER: {result.label} ({result.samples} samples per cell, score [Wilson 95%])\n\n{table}\n\n"
        f"effective length (average >= {result.threshold:g} at it and every shorter length): {effective_text(result)}"
    )


def plot_ruler_heatmap(result: RulerResult, path: str | Path) -> Path:
    """Score per (task, length), the average as the last row; green = solved; the title names the effective
    length."""
    plt = pyplot()
    labels = [*result.tasks, "average"]
    averages = result.averages
    grid = [[result.cell(t, n).score for n in result.lengths] for t in result.tasks]
    grid.append([averages[n] for n in result.lengths])
    fig, ax = plt.subplots(figsize=(1.0 * len(result.lengths) + 3.0, 0.38 * len(labels) + 1.6))
    image = ax.imshow(grid, cmap="RdYlGn", vmin=0.0, vmax=100.0, aspect="auto")
    ax.set_xticks(range(len(result.lengths)), [str(n) for n in result.lengths])
    ax.set_yticks(range(len(labels)), labels)
    for i, row in enumerate(grid):
        for j, value in enumerate(row):
            ax.text(j, i, f"{value:.0f}", ha="center", va="center", fontsize=7)
    ax.axhline(len(result.tasks) - 0.5, color="black", linewidth=1.0)
    ax.set_xlabel("prompt length (tokens)")
    ax.set_title(f"RULER {result.label}: effective length {effective_text(result)}", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    return save_figure(fig, path)


def save_ruler_outputs(out_dir: str | Path, result: RulerResult) -> dict[str, Path]:
    """results.json, results.csv (a row per cell, then the averages), table.md and heatmap.png in `out_dir`."""
    out_dir = Path(out_dir)
    atomic_write_json(out_dir / "results.json", result.to_dict())
    write_csv(out_dir / "results.csv", result.records())
    atomic_write_text(out_dir / "table.md", ruler_table(result) + "\n")
    heatmap = plot_ruler_heatmap(result, out_dir / "heatmap.png")
    return {"json": out_dir / "results.json", "csv": out_dir / "results.csv", "table": out_dir / "table.md",
            "heatmap": heatmap}  # fmt: skip
