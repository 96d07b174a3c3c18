"""The files of a RULER run (JSON, CSV, a markdown table, the task x length heatmap) and of several runs side by
side (a table per length, the averages plotted against length)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lextra.errors import ConfigError
from lextra.evaluate.ruler import RulerResult, sorted_lengths
from lextra.io import atomic_write_json, atomic_write_text
from lextra.reporting.plots import pyplot, save_figure
from lextra.reporting.tables import markdown_table, write_csv


def effective_text(result: RulerResult) -> str:
    """The effective length as a sentence fragment."""
    length = result.effective_length
    return f"{length}" if length is not None else f"none (below {min(result.lengths)})"


def ruler_table(result: RulerResult) -> str:
    """Markdown: score and 95% interval per task (rows) and length (columns), the average, the effective length."""
    rows = {
        task: {str(n): f"{c.score:.1f} [{c.low:.0f}, {c.high:.0f}]" for n, c in result.cells[task].items()}
        for task in result.tasks
    }
    rows["average"] = {str(n): f"{v:.1f}" for n, v in result.averages.items()}
    table = markdown_table(rows, result.lengths, "task", cell=lambda value: value or "-")
    prefill = result.prefill_seconds
    cost = f" ({result.seconds / prefill:.2f}x their prefills)" if prefill else ""
    return (
        f"### {result.suite_name}: {result.label} ({result.samples} sample{'s' if result.samples != 1 else ''} per "
        "cell, "
        f"score [Wilson 95%])\n\n{table}\n\n"
        f"effective length (average >= {result.threshold:g} at it and every shorter length): {effective_text(result)}"
        f"\n\ncompute: {result.seconds:.0f} s{cost}"
    )


def plot_ruler_heatmap(result: RulerResult, path: str | Path) -> Path:
    """Score per (task, length), the average as the last row; green = solved; the title names the effective
    length."""
    plt = pyplot()
    labels = [*result.tasks, "average"]
    grid = [[result.cell(t, n).score for n in result.lengths] for t in result.tasks]
    grid.append([result.averages[n] for n in result.lengths])
    fig, ax = plt.subplots(figsize=(1.0 * len(result.lengths) + 3.0, 0.38 * len(labels) + 1.6))
    image = ax.imshow(grid, cmap="RdYlGn", vmin=0.0, vmax=100.0, aspect="auto")
    ax.set_xticks(range(len(result.lengths)), [str(n) for n in result.lengths])
    ax.set_yticks(range(len(labels)), labels)
    for i, row in enumerate(grid):
        for j, value in enumerate(row):
            ax.text(j, i, f"{value:.0f}", ha="center", va="center", fontsize=7)
    ax.axhline(len(result.tasks) - 0.5, color="black", linewidth=1.0)
    ax.set_xlabel("prompt length (tokens)")
    ax.set_title(f"{result.suite_name} {result.label}: effective length {effective_text(result)}", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    return save_figure(fig, path)


def save_ruler_outputs(out_dir: str | Path, result: RulerResult) -> None:
    """results.json, results.csv (a row per cell, then the averages), table.md and heatmap.png in `out_dir`."""
    out_dir = Path(out_dir)
    atomic_write_json(out_dir / "results.json", result.to_dict())
    write_csv(out_dir / "results.csv", result.records())
    atomic_write_text(out_dir / "table.md", ruler_table(result) + "\n")
    plot_ruler_heatmap(result, out_dir / "heatmap.png")


def ruler_comparison(results: Sequence[RulerResult]) -> str:
    """Markdown, several runs side by side: each run's average per length, effective length and samples per cell,
    then per length each task's score [Wilson 95%] under each run. Runs need distinct labels."""
    labels = [r.label for r in results]
    if not results or len(set(labels)) != len(labels):
        raise ConfigError(f"a RULER comparison needs runs with distinct labels, got {labels}")
    lengths = sorted_lengths([n for r in results for n in r.lengths])
    columns = [*map(str, lengths), "effective length", "tasks", "samples"]
    summary = {
        r.label: {
            **{str(n): f"{v:.1f}" for n, v in r.averages.items()},
            "effective length": effective_text(r),
            "tasks": str(len(r.tasks)),
            "samples": str(r.samples),
        }
        for r in results
    }
    thresholds = ", ".join(sorted({f"{r.threshold:g}" for r in results}))
    suite = suite_of(results)
    parts = [
        f"### {suite} average score per length (effective length at threshold {thresholds}; - = not run)",
        markdown_table(summary, columns, "run", cell=lambda value: value or "-"),
    ]
    tasks = list(dict.fromkeys(t for r in results for t in r.tasks))
    for n in lengths:
        rows = {
            task: {
                r.label: f"{c.score:.0f} [{c.low:.0f}, {c.high:.0f}]"
                for r in results
                if (c := r.cells.get(task, {}).get(int(n)))
            }
            for task in tasks
        }
        rows["average"] = {r.label: f"{r.averages[n]:.1f}" for r in results if n in r.lengths}
        parts += [f"### {n} tokens: score [Wilson 95%]", markdown_table(rows, labels, "task", cell=lambda v: v or "-")]
    return "\n\n".join(parts)


def suite_of(results: Sequence[RulerResult]) -> str:
    """The suite the runs are from ("RULER", "BABILong"; several joined by '+')."""
    return "+".join(dict.fromkeys(r.suite_name for r in results))


def plot_ruler_averages(results: Sequence[RulerResult], path: str | Path) -> Path:
    """Average score against prompt length (log2 axis), a line per run, the threshold dashed."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for r in results:
        averages = r.averages
        ax.plot(list(averages), list(averages.values()), marker="o", label=f"{r.label} ({effective_text(r)})")
    for threshold in sorted({r.threshold for r in results}):
        ax.axhline(threshold, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted_lengths([n for r in results for n in r.lengths]))
    ax.get_xaxis().set_major_formatter(lambda value, _: f"{value:g}")
    ax.set_ylim(-2, 102)
    ax.set_xlabel("prompt length (tokens)")
    ax.set_ylabel(f"{suite_of(results)} average score")
    ax.set_title(f"{suite_of(results)}: average over the tasks (legend: effective length)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path)


def save_ruler_comparison(out_dir: str | Path, results: Sequence[RulerResult]) -> dict[str, Path]:
    """comparison.md, comparison.csv (every run's cells and averages) and averages.png in `out_dir`."""
    out_dir = Path(out_dir)
    atomic_write_text(out_dir / "comparison.md", ruler_comparison(results) + "\n")
    write_csv(out_dir / "comparison.csv", [row for r in results for row in r.records()])
    plot = plot_ruler_averages(results, out_dir / "averages.png")
    return {"table": out_dir / "comparison.md", "csv": out_dir / "comparison.csv", "plot": plot}
