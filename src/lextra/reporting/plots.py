"""Figures (matplotlib, Agg): perplexity-vs-length curves, score curves, cumulative gradient shares, dispersion,
logits."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from lextra.analysis import Dispersion, FirstLayerLogits
from lextra.io import atomic_write

Curves = Mapping[str, Mapping[str, Mapping[str, float]]]  # protocol -> row label -> length -> value
#: protocol -> row label -> length -> (low, high) of the value's 95% interval
Bands = Mapping[str, Mapping[str, Mapping[str, tuple[float, float]]]]


def pyplot() -> ModuleType:
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: str | Path, *, tight: bool = True) -> Path:
    """Write the figure as PNG atomically (cropped to what it draws unless not `tight`) and close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    crop = {"bbox_inches": "tight"} if tight else {}
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png", **crop))
    pyplot().close(fig)
    return path


def line_styles(labels: Sequence[str]) -> dict[str, dict[str, Any]]:
    """One colour per scheme (the label up to '+' or ' '), a line style per variant: mask dotted, theory dashed."""
    plt = pyplot()
    group_of = {label: label.split(" ")[0].split("+")[0] for label in labels}
    groups = list(dict.fromkeys(group_of.values()))
    colours = plt.get_cmap("tab10" if len(groups) <= 10 else "tab20")
    styles = {}
    for label in labels:
        theory, masked = "[" in label, "+" in label.split(" ")[0]
        linestyle = {(False, False): "-", (False, True): ":", (True, False): "--", (True, True): "-."}[theory, masked]
        styles[label] = {"color": colours(groups.index(group_of[label]) % colours.N), "linestyle": linestyle}
    return styles


def figure_legend(fig: Any, ax: Any) -> None:
    """One legend for the figure, right of the panels (the rows are many)."""
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7)


def plot_curves(
    curves: Curves,
    train_len: int,
    path: str | Path,
    *,
    ylabel: str = "perplexity",
    title: str = "",
    bands: Bands | None = None,
    xlabel: str = "evaluation length (tokens)",
) -> Path:
    """One panel per protocol, one line per row label (a colour per scheme, dotted with a mask); log-x lengths,
    log-y values, L_tr marked; the legend right of the panels. `bands`: each line's 95% interval, shaded."""
    plt = pyplot()
    protocols = list(curves)
    styles = line_styles(list(dict.fromkeys(label for rows in curves.values() for label in rows)))
    fig, axes = plt.subplots(1, len(protocols), figsize=(5.2 * len(protocols), 4.2), squeeze=False)
    for ax, protocol in zip(axes[0], protocols, strict=True):
        for label, values in curves[protocol].items():
            xs = sorted(int(n) for n in values)
            ys = [values[str(n)] for n in xs]
            ax.plot(xs, ys, marker="o", markersize=3, label=label, **styles[label])
            band = (bands or {}).get(protocol, {}).get(label, {})
            shown = [n for n in xs if str(n) in band]
            if shown:
                low, high = zip(*(band[str(n)] for n in shown), strict=True)
                ax.fill_between(shown, low, high, color=styles[label]["color"], alpha=0.18, linewidth=0)
        ax.axvline(train_len, color="black", linestyle="--", linewidth=0.8)
        ax.text(train_len, 0.98, " L_tr", transform=ax.get_xaxis_transform(), va="top", fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(protocol)
        ax.grid(True, which="both", alpha=0.3)
    figure_legend(fig, axes[0][-1])
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_by_length(
    curves: Mapping[str, Mapping[str, Sequence[float]]],
    lengths: Sequence[int],
    train_len: int,
    path: str | Path,
    *,
    cumulative: bool = False,
) -> Path:
    """One panel per length, one line per row, L_tr dotted: s[n] - s[0] against distance n (theory rows dashed), or
    with `cumulative` the gradient share of the k most recent tokens (0.99 dashed)."""
    plt = pyplot()
    styles = line_styles(list(curves))
    fig, axes = plt.subplots(1, len(lengths), figsize=((5.2 if cumulative else 5.5) * len(lengths), 4.2), squeeze=False)
    for ax, length in zip(axes[0], lengths, strict=True):
        for label, by_length in curves.items():
            s = by_length.get(str(length))
            if s:
                xs, ys = (range(1, len(s) + 1), s) if cumulative else (range(len(s)), [v - s[0] for v in s])
                ax.plot(xs, ys, label=label, linewidth=1, **styles[label])
        ax.axvline(train_len, color="black", linestyle=":", linewidth=0.8)
        if cumulative:
            ax.axhline(0.99, color="grey", linestyle="--", linewidth=0.8)
            ax.set_xscale("log", base=2)
            title = f"segments of {length} tokens (L_tr dotted, 0.99 dashed)"
            ax.set(xlabel="recent tokens k", ylabel="cumulative gradient share", title=title)
        else:
            title = f"expected score by distance, input length {length}"
            ax.set(xlabel="distance n", ylabel="s[n] - s[0]", title=title)
        ax.grid(True, which="both" if cumulative else "major", alpha=0.3)
    fig.tight_layout()
    figure_legend(fig, axes[0][-1])
    return save_figure(fig, path)


def plot_dispersion(
    stats: Mapping[str, Mapping[int, Dispersion]], lengths: Sequence[int], layers: int, path: str | Path
) -> Path:
    """Mean row entropy (top) and max probability (bottom) against input length, one panel per layer + mean."""
    plt = pyplot()
    columns = [*range(layers), "mean"]
    styles = line_styles(list(stats))
    fig, axes = plt.subplots(2, len(columns), figsize=(3.6 * len(columns), 6.4), squeeze=False)
    for row, key in enumerate(("entropy", "max_prob")):
        for col, layer in enumerate(columns):
            ax = axes[row][col]
            for label, by_length in stats.items():
                xs = [n for n in lengths if n in by_length]
                ys = [
                    getattr(by_length[n].mean, key) if layer == "mean" else by_length[n].per_layer(key)[layer]
                    for n in xs
                ]
                ax.plot(xs, ys, marker="o", markersize=3, linewidth=1, label=label, **styles[label])
            first = next(iter(stats.values()))
            xs = [n for n in lengths if n in first]
            ax.plot(xs, [getattr(first[n].uniform, key) for n in xs], color="black", linestyle="--", label="uniform")
            ax.set_xscale("log", base=2)
            ax.set_title(f"{'entropy' if key == 'entropy' else 'max probability'}, layer {layer}")
            ax.set_xlabel("input length")
            ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    figure_legend(fig, axes[0][-1])
    return save_figure(fig, path)


def plot_logits(
    first_layer: Mapping[str, Mapping[int, FirstLayerLogits]], lengths: Sequence[int], path: str | Path
) -> Path:
    """Per checkpoint: the mean sorted first-layer logit row (left) and its QQ plot against a Gaussian (right)."""
    plt = pyplot()
    labels = list(first_layer)
    fig, axes = plt.subplots(len(labels), 2, figsize=(10, 3.2 * len(labels)), squeeze=False)
    for row, label in enumerate(labels):
        left, right = axes[row]
        for n in lengths:
            record = first_layer[label].get(n)
            if record is None:
                continue
            values = record.sorted_logits
            left.plot([i / len(values) for i in range(len(values))], values, linewidth=1, label=str(n))
            right.plot(record.qq.normal, record.qq.sample, marker=".", markersize=2, linewidth=0, label=str(n))
        right.plot([-3, 3], [-3, 3], color="black", linestyle="--", linewidth=0.8)
        left.set_title(f"{label}: layer 0, last row, sorted logits")
        left.set_xlabel("rank / length")
        right.set_title(f"{label}: QQ against N(0, 1)")
        right.set_xlabel("normal quantile")
        right.set_ylabel("standardised logit")
        left.legend(fontsize=6, title="length", title_fontsize=6)
        for ax in (left, right):
            ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path)
