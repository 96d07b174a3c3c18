"""Tables and plots from saved results: markdown tables, CSV rows and perplexity-vs-length figures."""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lextra.io import atomic_write, atomic_write_text

Curves = Mapping[str, Mapping[str, Mapping[str, float]]]  # protocol -> row label -> length -> value


def format_value(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if value >= 1e5:
        return f"{value:.2e}"
    return f"{value:.2f}" if value < 1000 else f"{value:.0f}"


def markdown_table(
    rows: Mapping[str, Mapping[str, Any]],
    lengths: Sequence[int | str],
    corner: str = "",
    cell: Callable[[Any], str] = format_value,
) -> str:
    """Rows x columns (lengths, or any column keys) as a markdown table, each value written by `cell`."""
    header = f"| {corner} | " + " | ".join(str(n) for n in lengths) + " |"
    rule = "|---|" + "---:|" * len(lengths)
    body = [
        f"| {label} | " + " | ".join(cell(values.get(str(n))) for n in lengths) + " |" for label, values in rows.items()
    ]
    return "\n".join([header, rule, *body])


def write_csv(path: str | Path, records: Sequence[Mapping[str, Any]]) -> None:
    """Write dict records as CSV (columns from the first record), atomically."""
    if not records:
        return
    columns = list(records[0])

    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            writer.writerows(records)

    atomic_write(path, write)


def plot_curves(
    curves: Curves, train_len: int, path: str | Path, *, ylabel: str = "perplexity", title: str = ""
) -> Path:
    """One panel per protocol, one line per row label (a colour per scheme, dotted with a mask); log-x lengths,
    log-y values, L_tr marked; the legend right of the panels."""
    from lextra.analysis.plots import _legend, _pyplot, _save, _styles

    plt = _pyplot()
    protocols = list(curves)
    styles = _styles(list(dict.fromkeys(label for rows in curves.values() for label in rows)))
    fig, axes = plt.subplots(1, len(protocols), figsize=(5.2 * len(protocols), 4.2), squeeze=False)
    for ax, protocol in zip(axes[0], protocols, strict=True):
        for label, values in curves[protocol].items():
            xs = sorted(int(n) for n in values)
            ys = [values[str(n)] for n in xs]
            ax.plot(xs, ys, marker="o", markersize=3, label=label, **styles[label])
        ax.axvline(train_len, color="black", linestyle="--", linewidth=0.8)
        ax.text(train_len, 0.98, " L_tr", transform=ax.get_xaxis_transform(), va="top", fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("evaluation length (tokens)")
        ax.set_ylabel(ylabel)
        ax.set_title(protocol)
        ax.grid(True, which="both", alpha=0.3)
    _legend(fig, axes[0][-1])
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path)


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
