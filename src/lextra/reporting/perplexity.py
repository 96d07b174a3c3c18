"""The files of one perplexity evaluation: results.csv, table.md (one table per protocol) and perplexity.png."""

from __future__ import annotations

from pathlib import Path

from lextra.errors import ConfigError
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


def side_by_side(
    evaluations: dict[str, Evaluation], out_dir: str | Path, *, summary_multiple: int | None = None
) -> dict[str, Path]:
    """Several evaluations (label -> evaluation) in one table per protocol and one plot, over the lengths they all
    have, with a summary column: ppl at k x L_tr over ppl at L_tr (k the largest multiple they share, or
    `summary_multiple`), rows ranked by it. Evaluations at other training lengths are compared by multiple."""
    out_dir = Path(out_dir)
    protocols = [
        p for p in next(iter(evaluations.values())).protocols if all(p in e.results for e in evaluations.values())
    ]
    multiples = _shared_multiples(evaluations)
    k = max(multiples) if summary_multiple is None else summary_multiple
    if not protocols or 1 not in multiples or k not in multiples:
        raise ConfigError(
            "the evaluations share no protocol, or not the lengths L_tr and k x L_tr the summary needs; evaluate them "
            "with the same --protocols and --lengths (as multiples of each model's L_tr)"
        )
    tables, records, curves = [], [], {}
    column = f"{k}x / 1x"
    for protocol in protocols:
        rows = {}
        for label, evaluation in evaluations.items():
            ppl = {m: evaluation.ppl(protocol, m * evaluation.train_len) for m in multiples}
            rows[label] = {**{f"{m}x": ppl[m] for m in multiples}, column: ppl[k] / ppl[1]}
            records += [{"model": label, "protocol": protocol, "multiple": m, "ppl": ppl[m]} for m in multiples]
        ranked = dict(sorted(rows.items(), key=lambda item: item[1][column]))
        header = [f"{m}x" for m in multiples] + [column]
        tables.append(f"### {protocol} (ppl at multiples of L_tr; ranked by {column})\n\n"
                      + markdown_table(ranked, header, "model"))  # fmt: skip
        curves[protocol] = {label: {str(m): v for m, v in zip(multiples, list(r.values()), strict=False)}
                            for label, r in rows.items()}  # fmt: skip
    note = (
        "No interval: the perplexity protocols keep one number per cell, not per document, so these differences are "
        "not yet tested against the spread over documents or seeds."
    )
    atomic_write_text(out_dir / "table.md", "\n\n".join([*tables, note]) + "\n")
    write_csv(out_dir / "results.csv", records)
    plot = plot_curves(curves, 1, out_dir / "perplexity.png", title="perplexity by multiple of L_tr")
    return {"table": out_dir / "table.md", "csv": out_dir / "results.csv", "plot": plot}


def _shared_multiples(evaluations: dict[str, Evaluation]) -> list[int]:
    """The multiples of L_tr (whole ones) at which every evaluation has a length."""
    sets = [{n // e.train_len for n in e.lengths if n % e.train_len == 0} for e in evaluations.values()]
    return sorted(set.intersection(*sets))
