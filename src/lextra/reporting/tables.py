"""Markdown tables and CSV rows from results."""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lextra.io import atomic_write


def string_keys(values: Mapping[Any, Any]) -> dict[str, Any]:
    """`values` keyed by the string of each key: tables and plots look columns (lengths) up by name."""
    return {str(key): value for key, value in values.items()}


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
