"""Run each analysis over checkpoints and lengths and write JSON, CSV, a markdown table and PNG plots."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from lextra.analysis.dispersion import Dispersion, dispersion
from lextra.analysis.receptive_field import THRESHOLD, ReceptiveField, receptive_field
from lextra.analysis.resolution import (
    ResolutionSummary,
    empirical_scores,
    model_theoretical,
    resolution,
    scheme_resolution,
)
from lextra.attention import build_mask
from lextra.attention.masks import Mask
from lextra.io import atomic_write_json, atomic_write_text
from lextra.pipelines.checkpoints import Checkpoint, TextSource
from lextra.pipelines.log import log
from lextra.positions import PositionScheme
from lextra.reporting.plots import plot_by_length, plot_dispersion, plot_logits
from lextra.reporting.tables import markdown_table, string_keys, write_csv
from lextra.serialize import Serializable

RESOLUTION_CONVENTION = (
    "R(s) = sum_{i<N} e^{s_i} (e^{s_i} - e^{s_{i+1}}) / (sum_{i<N} e^{s_i})^2 with e^{s_N} = 0, over the N distances "
    "visible at that length (under BCA: 0..L_tr-1); s = logits averaged over texts, layers and heads"
)


@dataclass
class ResolutionRow(Serializable):
    """One row of the resolution report: empirical or theory, its scheme, mask and checkpoint, R by length."""

    kind: str
    scheme: str
    mask: str
    checkpoint: str | None
    by_length: dict[int, ResolutionSummary]


@dataclass
class ReceptiveFieldRow(Serializable):
    """One row of the receptive-field report: a checkpoint under a mask, its L_tr, the ERF by segment length."""

    scheme: str
    mask: str
    checkpoint: str
    train_len: int
    by_length: dict[int, ReceptiveField]


@dataclass
class DispersionRow(Serializable):
    """One row of the dispersion report: a checkpoint under a mask, its layer count, dispersion by input length."""

    scheme: str
    mask: str
    checkpoint: str
    layers: int
    by_length: dict[int, Dispersion]


def markdown(rows: Mapping[str, Mapping[str, Any]], columns: Sequence[str], corner: str, digits: int = 3) -> str:
    """A rows x columns markdown table; floats with `digits` decimals (small ones in e-notation), missing as '-'."""

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if not isinstance(value, float):
            return str(value)
        return f"{value:.2e}" if 0 < abs(value) < 10 ** (1 - digits) else f"{value:.{digits}f}"

    return markdown_table(rows, columns, corner, cell)


def layer_kinds(model: Any) -> dict[str, list[int]]:
    """A hybrid's layers by kind (`local`: a plan's window or chunk layers, `global`: the others), so analyses
    report them apart; {} for a model whose layers are all of one kind (or that has no layer plan)."""
    variants = getattr(model, "variants", None) or []
    kinds = {
        "local": [i for i, v in enumerate(variants) if v.local],
        "global": [i for i, v in enumerate(variants) if not v.local],
    }
    return kinds if all(kinds.values()) else {}


def mask_suffix(mask: str) -> str:
    """Row-label suffix of an inference mask: none for causal, else `+mask` (as `lextra compare` names variants)."""
    return "" if mask == "causal" else f"+{mask}"


_log = partial(log, "analyze")


def _variants(
    checkpoints: list[Checkpoint], masks: list[str], source: TextSource, length: int, documents: int, what: str
) -> Iterator[tuple[Checkpoint, str, torch.Tensor, Mask, str]]:
    """Each (checkpoint, mask) an analysis reports, with its held-out texts of `length` tokens, mask and row label."""
    for ckpt in checkpoints:
        texts = source.texts(ckpt, length, documents)
        for mask in masks:
            spec = build_mask(mask, ckpt.train_len)
            label = ckpt.label + mask_suffix(mask)
            _log(f"{what} of {label}")
            yield ckpt, mask, texts, spec, label


def _write(out: Path, name: str, data: dict[str, Any], records: list[dict[str, Any]], table: str) -> None:
    """NAME.json, NAME.csv and NAME.md in `out`, each written atomically."""
    atomic_write_json(out / f"{name}.json", data)
    write_csv(out / f"{name}.csv", records)
    atomic_write_text(out / f"{name}.md", table + "\n")


def resolution_report(
    checkpoints: list[Checkpoint],
    schemes: list[tuple[str, PositionScheme]],
    lengths: list[int],
    masks: list[str],
    source: TextSource,
    out: str | Path,
    *,
    documents: int = 8,
    theory: bool = False,
    train_len: int,
) -> dict[str, Any]:
    """R at every length: empirical rows per checkpoint and mask, theory rows per scheme (and per checkpoint)."""
    out = Path(out)
    rows, kinds = _resolution_rows(checkpoints, schemes, lengths, masks, source, documents, theory)
    table_rows = {label: {str(n): row.by_length[n].r for n in lengths} for label, row in rows.items()}
    head_rows = {label: {str(n): row.by_length[n].r_head_mean for n in lengths} for label, row in rows.items()}
    kind_rows = {
        f"{label} {kind} layers": {
            str(n): resolution(torch.tensor(rows[label].by_length[n].s_per_layer)[layers].mean(0)) for n in lengths
        }
        for label, by_kind in kinds.items()
        for kind, layers in by_kind.items()
    }
    columns = [str(n) for n in lengths]
    table = (
        f"### attention resolution R of s averaged over layers and heads (rows: scheme, columns: input length; "
        f"L_tr = {train_len})\n\n" + markdown(table_rows, columns, "R", digits=4) + "\n\n"
        "### R of each layer and head, averaged over layers and heads\n\n"
        + markdown(head_rows, columns, "mean R", digits=4)
    )
    if kind_rows:
        table += "\n\n### R of s averaged over a hybrid's local and global layers apart\n\n" + markdown(
            kind_rows, columns, "R", digits=4
        )
    data = {
        "analysis": "resolution",
        "convention": RESOLUTION_CONVENTION,
        "lengths": lengths,
        "train_len": train_len,
        "masks": masks,
        "documents": documents,
        "split": source.split,
        "table": table_rows,
        "table_head_mean": head_rows,
        "table_by_layer_kind": kind_rows,
        "rows": {label: row.to_dict() for label, row in rows.items()},
    }
    records = [
        {"row": label, "kind": row.kind, "length": n, "layer": layer, "distance": d, "s": value}
        for label, row in rows.items()
        for n, result in row.by_length.items()
        for layer, curve in [("mean", result.s), *enumerate(result.s_per_layer)]
        for d, value in enumerate(curve)
    ]
    _write(out, "resolution", data, records, table)
    curves = {label: string_keys({n: r.s for n, r in row.by_length.items()}) for label, row in rows.items()}
    plot_by_length(curves, lengths, train_len, out / "resolution.png")
    return data


def _resolution_rows(
    checkpoints: list[Checkpoint],
    schemes: list[tuple[str, PositionScheme]],
    lengths: list[int],
    masks: list[str],
    source: TextSource,
    documents: int,
    theory: bool,
) -> tuple[dict[str, ResolutionRow], dict[str, dict[str, list[int]]]]:
    """The resolution rows by label (empirical and theory) and each empirical row's layers by kind."""
    rows: dict[str, ResolutionRow] = {}
    kinds: dict[str, dict[str, list[int]]] = {}
    for ckpt, mask, texts, spec, label in _variants(checkpoints, masks, source, max(lengths), documents, "resolution"):
        kinds[label] = layer_kinds(ckpt.model)
        scheme, folder = ckpt.model.variants[0].scheme, ckpt.name
        empirical = {n: empirical_scores(ckpt.model, texts[:, :n], spec).summary() for n in lengths}
        rows[label] = ResolutionRow("empirical", scheme, mask, folder, empirical)
        if theory:
            trained = {n: model_theoretical(ckpt.model, n, spec).summary() for n in lengths}
            rows[f"{label} [theory, trained]"] = ResolutionRow("theory", scheme, mask, folder, trained)
    for name, position in schemes:
        for mask in masks:
            spec = build_mask(mask, position.dims.train_len)
            by_length = {n: scheme_resolution(position, n, spec).summary() for n in lengths}
            rows[f"{name}{mask_suffix(mask)} [theory]"] = ResolutionRow("theory", name, mask, None, by_length)
    return rows, kinds


def receptive_field_report(
    checkpoints: list[Checkpoint],
    lengths: list[int],
    masks: list[str],
    source: TextSource,
    out: str | Path,
    *,
    documents: int = 16,
    threshold: float = THRESHOLD,
    batch_size: int = 8,
) -> dict[str, Any]:
    """ERF of every checkpoint and mask at every segment length: the last L + 1 tokens of the same texts, so only
    the last token's visible context grows (the last-token setup of Chi et al. 2023, arXiv 2212.10356)."""
    out = Path(out)
    rows: dict[str, ReceptiveFieldRow] = {}
    variants = _variants(checkpoints, masks, source, max(lengths) + 1, documents, "receptive field")
    for ckpt, mask, segments, spec, label in variants:
        by_length = {
            n: receptive_field(ckpt.model, segments[:, -(n + 1) :], spec, threshold=threshold, batch_size=batch_size)
            for n in lengths
        }
        rows[label] = ReceptiveFieldRow(ckpt.model.variants[0].scheme, mask, ckpt.name, ckpt.train_len, by_length)
    columns = [str(n) for n in lengths]
    table_rows = {
        label: {"L_tr": row.train_len, **{str(n): row.by_length[n].erf for n in lengths}} for label, row in rows.items()
    }
    share_rows = {
        label: {str(n): row.by_length[n].share_within(row.train_len) for n in lengths} for label, row in rows.items()
    }
    table = (
        f"### empirical receptive field: recent tokens holding {threshold:.0%} of the last token's gradient "
        "(rows: scheme, columns: segment length)\n\n" + markdown(table_rows, ["L_tr", *columns], "ERF") + "\n\n"
        "### share of the last token's gradient held by its L_tr most recent tokens\n\n"
        + markdown(share_rows, columns, "share")
    )
    data = {
        "analysis": "receptive-field",
        "threshold": threshold,
        "lengths": lengths,
        "masks": masks,
        "documents": documents,
        "split": source.split,
        "table": table_rows,
        "table_share_within_train_len": share_rows,
        "rows": {label: row.to_dict() for label, row in rows.items()},
    }
    records = [
        {"row": label, "length": n, "recent_tokens": k + 1, "cumulative_share": value}
        for label, row in rows.items()
        for n, result in row.by_length.items()
        for k, value in enumerate(result.curve)
    ]
    _write(out, "receptive_field", data, records, table)
    curves = {label: string_keys({n: r.curve for n, r in row.by_length.items()}) for label, row in rows.items()}
    plot_by_length(curves, lengths, checkpoints[0].train_len, out / "receptive_field.png", cumulative=True)
    return data


def dispersion_report(
    checkpoints: list[Checkpoint],
    lengths: list[int],
    masks: list[str],
    source: TextSource,
    out: str | Path,
    *,
    documents: int = 8,
    batch_size: int = 4,
) -> dict[str, Any]:
    """Mean row entropy and max probability per layer against length, and the first layer's logit distribution:
    dispersion.json, .csv, .md, dispersion.png and first_layer_logits.png."""
    out = Path(out)
    rows: dict[str, DispersionRow] = {}
    kinds: dict[str, dict[str, list[int]]] = {}
    for ckpt, mask, texts, spec, label in _variants(checkpoints, masks, source, max(lengths), documents, "dispersion"):
        kinds[label] = layer_kinds(ckpt.model)
        with torch.no_grad():
            by_length = {n: dispersion(ckpt.model, texts[:, :n], spec, batch_size=batch_size) for n in lengths}
        config = ckpt.model.config
        rows[label] = DispersionRow(ckpt.model.variants[0].scheme, mask, ckpt.name, config.n_layer, by_length)
    table = _dispersion_tables(rows, kinds, masks, lengths)
    data = {
        "analysis": "dispersion",
        "lengths": lengths,
        "masks": masks,
        "documents": documents,
        "split": source.split,
        "rows": {label: row.to_dict() for label, row in rows.items()},
    }
    records = [
        {
            "row": label,
            "length": n,
            "layer": layer,
            "entropy": result.entropy[layer],
            "max_prob": result.max_prob[layer],
            "uniform_entropy": result.uniform.entropy,
            "uniform_max_prob": result.uniform.max_prob,
        }
        for label, row in rows.items()
        for n, result in row.by_length.items()
        for layer in range(row.layers)
    ]
    _write(out, "dispersion", data, records, table)
    by_label = {label: row.by_length for label, row in rows.items()}
    plot_dispersion(by_label, lengths, max(row.layers for row in rows.values()), out / "dispersion.png")
    first_layers = {label: {n: r.first_layer for n, r in row.by_length.items()} for label, row in rows.items()}
    plot_logits(first_layers, lengths, out / "first_layer_logits.png")
    return data


def _dispersion_tables(
    rows: Mapping[str, DispersionRow], kinds: Mapping[str, dict[str, list[int]]], masks: list[str], lengths: list[int]
) -> str:
    """The dispersion report's markdown: entropy and max probability per layer (and per kind of layer of a
    hybrid, and for uniform rows), then the first layer's top logit spread."""
    columns = [str(n) for n in lengths]
    tables = []
    for key, title in (
        ("entropy", "mean attention entropy (nats)"),
        ("max_prob", "mean maximum attention probability"),
    ):
        table_rows: dict[str, dict[str, Any]] = {}
        for label, row in rows.items():
            for layer in range(row.layers):
                table_rows[f"{label} L{layer}"] = {str(n): row.by_length[n].per_layer(key)[layer] for n in lengths}
            table_rows[f"{label} mean"] = {str(n): getattr(row.by_length[n].mean, key) for n in lengths}
            for kind, layers in kinds[label].items():
                table_rows[f"{label} {kind} layers"] = {
                    str(n): sum(row.by_length[n].per_layer(key)[i] for i in layers) / len(layers) for n in lengths
                }
        for mask in masks:
            first = next(row for row in rows.values() if row.mask == mask)
            table_rows[f"uniform rows ({mask})"] = {str(n): getattr(first.by_length[n].uniform, key) for n in lengths}
        tables.append(
            f"### {title} per layer (rows: scheme and layer, columns: input length)\n\n"
            + markdown(table_rows, columns, key)
        )
    spread = {label: {str(n): row.by_length[n].first_layer.top_z for n in lengths} for label, row in rows.items()}
    tables.append(
        "### first layer, last query row: top logit in standard deviations above the row mean\n\n"
        + markdown(spread, columns, "top z", digits=2)
    )
    return "\n\n".join(tables)
