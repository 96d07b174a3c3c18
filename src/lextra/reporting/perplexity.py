"""Perplexity tables, CSVs and plots with 95% intervals (`perplexity_report`, which `lextra report`, `compare` and
`study` all write through). A row evaluated once has the bootstrap interval over its documents; a row of several
seeds, the t-interval of their values (`Interval`); the summary column ppl(k L_tr) / ppl(L_tr) likewise."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lextra.errors import ConfigError
from lextra.evaluate import Evaluation
from lextra.evaluate.bootstrap import ratio_interval
from lextra.io import atomic_write_text
from lextra.reporting.intervals import Interval
from lextra.reporting.plots import plot_curves
from lextra.reporting.tables import format_value, markdown_table, write_csv


@dataclass(frozen=True)
class Estimate:
    """A value with its 95% interval (None: no interval) and what the interval is over."""

    value: float
    low: float | None
    high: float | None
    #: "documents" (bootstrap), "seeds" (t-interval over n seeds) or "" (no interval)
    over: str
    seeds: int = 1

    @classmethod
    def of_seeds(cls, values: Sequence[float], intervals: Sequence[tuple[float, float] | None]) -> Estimate:
        """One seed's value with its own interval (`intervals[0]`), or the mean of several with their t-interval."""
        if len(values) == 1:
            low, high = intervals[0] or (None, None)
            return cls(values[0], low, high, "documents" if intervals[0] else "")
        spread = Interval.of(values)
        return cls(spread.mean, spread.low, spread.high, "seeds", len(values))

    def text(self, digits: int = 2) -> str:
        """`20.83 ± 0.41` (half the interval's width), or the value alone without an interval."""
        if self.low is None or self.high is None:
            return format_value(self.value)
        digits = 0 if self.value >= 1000 else digits  # 41230 ± 5120, as `format_value` writes large values
        return f"{self.value:.{digits}f} ± {(self.high - self.low) / 2:.{digits}f}"

    def below(self, other: Estimate) -> bool:
        """Whether this interval lies wholly below the other's (a difference the intervals decide)."""
        return self.high is not None and other.low is not None and self.high < other.low


def ppl_estimate(evaluations: Sequence[Evaluation], protocol: str, length: int) -> Estimate:
    """A row's perplexity at one length: one evaluation's with its document interval, or the seeds' mean."""
    points = [ev.point(protocol, length) for ev in evaluations]
    bounds = [(p.low, p.high) if p.low is not None and p.high is not None else None for p in points]
    return Estimate.of_seeds([p.ppl for p in points], bounds)


def ratio_estimate(evaluations: Sequence[Evaluation], protocol: str, far: int, near: int) -> Estimate:
    """A row's ppl(far) / ppl(near): one evaluation's with the paired bootstrap over its documents, or the mean of
    the seeds' ratios with their t-interval."""
    values, bounds = [], []
    for ev in evaluations:
        top, bottom = ev.point(protocol, far), ev.point(protocol, near)
        values.append(top.ppl / bottom.ppl)
        if top.nll_by_document and bottom.nll_by_document and top.tokens_by_document and bottom.tokens_by_document:
            pairs = (top.nll_by_document, top.tokens_by_document), (bottom.nll_by_document, bottom.tokens_by_document)
            bounds.append(ratio_interval(*pairs))
        else:  # a results file written before per-document sums
            bounds.append(None)
    return Estimate.of_seeds(values, bounds)


@dataclass(frozen=True)
class _Layout:
    """A report's columns (lengths, or multiples of each row's L_tr with `by_multiple`) and its summary's k."""

    columns: list[int]
    by_multiple: bool
    summary: int | None

    def length(self, column: int, train_len: int) -> int:
        return column * train_len if self.by_multiple else column

    def name(self, column: int) -> str:
        return f"{column}x" if self.by_multiple else str(column)

    @property
    def ratio_name(self) -> str:
        return f"{self.summary}x / 1x" if self.summary else ""


def perplexity_report(
    rows: Mapping[str, Sequence[Evaluation]],
    out_dir: str | Path,
    *,
    by_multiple: bool = False,
    summary_multiple: int | None = None,
    summary_required: bool = False,
    title: str = "",
) -> dict[str, Path]:
    """table.md (per protocol, each row's perplexity ± interval by length, ranked by ppl(k L_tr)/ppl(L_tr) where
    the rows have both), results.csv and perplexity.png for `rows` (label -> one evaluation per seed); columns by
    multiple of each row's L_tr with `by_multiple`; `summary_required` refuses rows without the summary."""
    out_dir = Path(out_dir)
    evaluations = [ev for evs in rows.values() for ev in evs]
    if not evaluations:
        raise ConfigError("nothing to report: give at least one evaluation")
    protocols = [p for p in evaluations[0].protocols if all(p in ev.results for ev in evaluations)]
    columns = _columns(evaluations, by_multiple)
    if not protocols or not columns:
        raise ConfigError(
            "the evaluations share no protocol or length; evaluate them with the same --protocols and --lengths"
            + (" (as multiples of each model's L_tr)" if by_multiple else "")
        )
    layout = _Layout(columns, by_multiple, _summary_multiple(evaluations, columns, by_multiple, summary_multiple))
    if summary_required and layout.summary is None:
        raise ConfigError(
            "the evaluations do not all have the lengths L_tr and k x L_tr the summary needs; evaluate them with the "
            "same --lengths as multiples of each model's L_tr"
        )
    tables: list[str] = []
    records: list[dict[str, object]] = []
    curves: dict[str, dict[str, dict[str, float]]] = {}
    bands: dict[str, dict[str, dict[str, tuple[float, float]]]] = {}
    for protocol in protocols:
        table, found = _protocol_table(rows, protocol, layout)
        tables.append(table)
        records += found
        for label in rows:
            by_column = [r for r in found if r["model"] == label]
            curves.setdefault(protocol, {})[label] = {str(r["column"]): float(r["ppl"]) for r in by_column}
            bands.setdefault(protocol, {})[label] = {
                str(r["column"]): (float(r["low"]), float(r["high"])) for r in by_column if r["low"] is not None
            }
    notes = [interval_note(rows)]
    if layout.summary and len(rows) > 1:
        notes.append(
            f"`below next`: whether the row's {layout.ratio_name} interval lies wholly below the next row's (a "
            "difference the intervals decide); `no`: the ranking between the two is not established."
        )
    atomic_write_text(out_dir / "table.md", "\n\n".join([*tables, *notes]) + "\n")
    write_csv(out_dir / "results.csv", [{k: v for k, v in r.items() if k != "column"} for r in records])
    train_len = 1 if by_multiple else evaluations[0].train_len
    xlabel = "evaluation length (multiples of L_tr)" if by_multiple else "evaluation length (tokens)"
    plot = plot_curves(curves, train_len, out_dir / "perplexity.png", title=title, bands=bands, xlabel=xlabel)
    return {"table": out_dir / "table.md", "csv": out_dir / "results.csv", "plot": plot}


def _protocol_table(
    rows: Mapping[str, Sequence[Evaluation]], protocol: str, layout: _Layout
) -> tuple[str, list[dict[str, Any]]]:
    """One protocol's markdown table (ranked by the summary column where there is one) and its CSV records."""
    cells: dict[str, dict[str, str]] = {}
    ratios: dict[str, Estimate] = {}
    records: list[dict[str, Any]] = []
    for label, evs in rows.items():
        L = evs[0].train_len
        estimates = {c: ppl_estimate(evs, protocol, layout.length(c, L)) for c in layout.columns}
        cells[label] = {layout.name(c): e.text() for c, e in estimates.items()}
        if layout.summary:
            ratios[label] = ratio_estimate(evs, protocol, layout.summary * L, L)
            cells[label][layout.ratio_name] = ratios[label].text(3)
        precision = "/".join(sorted({ev.precision for ev in evs}))
        records += [{"model": label, "protocol": protocol, "length": layout.length(c, L),
                     "multiple": c if layout.by_multiple else c / L, "ppl": e.value, "low": e.low, "high": e.high,
                     "interval_over": e.over, "seeds": e.seeds, "precision": precision, "column": c}
                    for c, e in estimates.items()]  # fmt: skip
    header = [layout.name(c) for c in layout.columns]
    if layout.summary:
        order = sorted(ratios, key=lambda label: ratios[label].value)
        header.append(layout.ratio_name)
        if len(order) > 1:  # a ranking: which neighbours the intervals separate
            for here, after in zip(order, [*order[1:], None], strict=True):
                below = "-" if after is None else ("yes" if ratios[here].below(ratios[after]) else "no")
                cells[here]["below next"] = below
            header.append("below next")
        cells = {label: cells[label] for label in order}
    caption = f"### {protocol} (ppl ± 95% interval by {'multiple of L_tr' if layout.by_multiple else 'length'}"
    caption += f"; ranked by {layout.ratio_name})" if layout.summary else ")"
    return caption + "\n\n" + markdown_table(cells, header, "model", cell=str), records


def save_eval_outputs(out_dir: str | Path, label: str, evaluation: Evaluation) -> dict[str, Path]:
    """results.csv, table.md and perplexity.png (with intervals) for one evaluated model."""
    return perplexity_report({label: [evaluation]}, out_dir, title=label)


def side_by_side(
    evaluations: Mapping[str, Sequence[Evaluation]], out_dir: str | Path, *, summary_multiple: int | None = None
) -> dict[str, Path]:
    """Several rows (label -> one evaluation per seed) by multiple of L_tr in one table per protocol and one plot,
    ranked by ppl(k L_tr)/ppl(L_tr) (k the largest multiple they share, or `summary_multiple`)."""
    return perplexity_report(
        evaluations, out_dir, by_multiple=True, summary_multiple=summary_multiple, summary_required=True,
        title="perplexity by multiple of L_tr",
    )  # fmt: skip


def _columns(evaluations: Sequence[Evaluation], by_multiple: bool) -> list[int]:
    """The lengths every evaluation has, or the whole multiples of L_tr they all have."""
    if by_multiple:
        sets = [{n // e.train_len for n in e.lengths if n % e.train_len == 0} for e in evaluations]
    else:
        sets = [set(e.lengths) for e in evaluations]
    return sorted(set.intersection(*sets))


def _summary_multiple(
    evaluations: Sequence[Evaluation], columns: Sequence[int], by_multiple: bool, wanted: int | None
) -> int | None:
    """k of the summary column: `wanted`, else the largest multiple every row has beside 1; None where the rows
    lack L_tr or k L_tr (a single-length evaluation has no summary)."""
    if by_multiple:
        multiples = set(columns)
    else:
        train = {e.train_len for e in evaluations}
        if len(train) != 1:
            return None
        L = train.pop()
        multiples = {n // L for n in columns if n % L == 0}
    if wanted is not None:
        if wanted not in multiples or 1 not in multiples:
            raise ConfigError(
                f"--multiple {wanted}: the evaluations do not all have L_tr and {wanted} x L_tr; choose one of "
                f"{sorted(m for m in multiples if m > 1)} or evaluate at those lengths"
            )
        return wanted
    beyond = [m for m in multiples if m > 1]
    return max(beyond) if 1 in multiples and beyond else None


def interval_note(rows: Mapping[str, Sequence[Evaluation]]) -> str:
    """What the ± means in this table."""
    seeds = sorted({len(evs) for evs in rows.values()})
    documents = sorted({ev.documents for evs in rows.values() for ev in evs})
    parts = []
    if any(n > 1 for n in seeds):
        counts = ", ".join(str(n) for n in seeds if n > 1)
        parts.append(
            f"rows over several seeds: the mean over seeds ± the half-width of its 95% t-interval ({counts} seeds)"
        )
    if 1 in seeds:
        parts.append(
            "rows of one evaluation: ± half the width of the 95% percentile-bootstrap interval over documents "
            f"({'/'.join(map(str, documents))} documents, the same at every length); the ratio's interval resamples "
            "both lengths with the same draw"
        )
    return (
        "± : "
        + "; ".join(parts)
        + ". A value without ± has no interval (one document, or a results file from before intervals)."
    )
