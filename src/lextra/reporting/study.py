"""The study's report: tables and plots, each next to the numbers its paper reports (cited by author, year and
arXiv id) and a sentence, computed from the numbers, on what agrees in direction and what does not."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lextra.evaluate import Evaluation
from lextra.evaluate.retrieval import RetrievalResult
from lextra.io import atomic_write_text
from lextra.reporting.html import markdown_to_html
from lextra.reporting.perplexity import Estimate, perplexity_report, ppl_estimate
from lextra.reporting.plots import plot_curves
from lextra.reporting.study_results import ModelAnalysis, StudyResults, WindowSweep
from lextra.reporting.tables import format_value, markdown_table, string_keys

# The numbers the papers report, each string naming its paper.
PAPER_PERPLEXITY = (
    "Sun et al. 2022 (xPos, arXiv 2212.10554; trained at 1024; ppl at 256 / 512 / 1024 / 2048 / 4096): absolute "
    "46.34 / 36.39 / 29.94 / 132.63 / 1283.79; ALiBi 37.66 / 29.92 / 24.99 / 23.14 / 24.26; RoPE 38.09 / 30.38 / "
    "25.52 / 73.60 / 294.45; xPos + BCA 34.30 / 27.55 / 23.31 / 21.60 / 20.73; RoPE + BCA 25.57 / 25.65 at 2048 / "
    "4096. Zhu et al. 2023 (CoCA, arXiv 2309.08646; trained at 512, sliding window): CoCA + dynamic NTK 20.11 / "
    "20.81 / 25.88 / 34.16 / 55.75 at 512 / 1k / 2k / 4k / 8k against RoPE 19.66 / 411.5 / 3276 / 3026 / 3028."
)
#: ppl at 4 x L_tr over ppl at L_tr in the papers (absolute = sinusoidal)
PAPER_GROWTH = {
    "sinusoidal": 1283.79 / 29.94,
    "alibi": 24.26 / 24.99,
    "rope": 294.45 / 25.52,
    "rope+bca": 25.65 / 25.52,
    "xpos+bca": 20.73 / 23.31,
    "coca+dynamic": 25.88 / 20.11,
}
PAPER_RESOLUTION = (
    "Sun et al. 2022 (arXiv 2212.10554; 24 layers, trained at 1024), R at 1024 / 2048: absolute 0.87 / 0.28, ALiBi "
    "0.81 / 0.88, RoPE 0.91 / 0.08, xPos + BCA 0.98 / 1.08, xPos 0.98 / 0.54."
)
PAPER_R_RATIO = {"sinusoidal": 0.28 / 0.87, "alibi": 0.88 / 0.81, "rope": 0.08 / 0.91, "xpos+bca": 1.08 / 0.98,
                 "xpos": 0.54 / 0.98}  # fmt: skip
PAPER_PASSKEY = (
    "Zhu et al. 2023 (CoCA, arXiv 2309.08646; trained at 512): CoCA + dynamic NTK passkey accuracy 1.00 / 1.00 / 0.96 "
    "/ 0.89 / 0.50 at 512 / 1k / 2k / 4k / 8k (1x..16x); RoPE fails beyond its training length (its perplexity is 411 "
    "at 2x)."
)
#: CoCA + dynamic NTK passkey accuracy at 2x, 4x, 8x, 16x L_tr in the CoCA paper (Zhu et al. 2023)
PAPER_PASSKEY_BEYOND = (1.00, 0.96, 0.89, 0.50)
PAPER_TEMPERATURE = (
    "Chi, Fan, Rudnicky 2023 (arXiv 2311.00684) report P_max alignment as the most reliable of the temperature "
    "methods; this report quotes no numbers of theirs for it."
)
PAPER_WINDOW = (
    "This report quotes no paper's numbers for windowed attention; Chi et al. 2023 (receptive field, arXiv "
    "2212.10356) relate extrapolation to the empirical receptive field: a window at least as wide as the ERF "
    "should lose little."
)


def _number(value: Any) -> str:
    return value if isinstance(value, str) else str(value) if isinstance(value, int) else format_value(value)


def _with_interval(value: float, interval: Sequence[float] | None) -> str:
    """`20.83 ± 0.41` as the perplexity report writes it, or the value alone where no interval was saved."""
    low, high = interval if interval else (None, None)
    return Estimate(value, low, high, "documents" if interval else "").text()


def _trend(ratio: float) -> str:
    return "flat" if ratio < 1.15 else ("rises mildly" if ratio < 2.0 else "rises steeply")


def _r_trend(ratio: float) -> str:
    return "holds" if ratio >= 0.8 else ("falls" if ratio >= 0.4 else "collapses")


def _agreement(ours: Mapping[str, float], paper: Mapping[str, float], trend: Callable[[float], str], what: str) -> str:
    agree: list[str] = []
    differ: list[str] = []
    for label, ratio in ours.items():
        if label not in paper:
            continue
        text = f"{label} ({trend(ratio)}: x{ratio:.2f}; paper {trend(paper[label])}: x{paper[label]:.2f})"
        (agree if trend(ratio) == trend(paper[label]) else differ).append(text)
    parts = []
    if agree:
        parts.append(f"**Agrees** in direction ({what}): " + "; ".join(agree) + ".")
    if differ:
        parts.append("**Differs**: " + "; ".join(differ) + ".")
    return " ".join(parts) or "No model here has a counterpart in the paper's table."


def perplexity_section(
    results: Mapping[str, Mapping[str, Mapping[int, Evaluation]]],
    lengths: list[int],
    train_len: int,
    plots: Path,
    protocols: list[str],
) -> list[str]:
    """The perplexity tables and plot through the one perplexity report (`perplexity_report`, written beside the
    plots in `perplexity/`: seeds pooled with their t-interval, ranked by ppl(k L_tr) / ppl(L_tr)), then how the
    growth compares with the paper's."""
    lines = ["## Perplexity beyond the training length", ""]
    rows = {
        (label if mask == "causal" else f"{label}+{mask}"): list(by_seed.values())
        for mask, by_label in results.items()
        for label, by_seed in by_label.items()
    }
    folder = plots.parent / "perplexity"
    paths = perplexity_report(rows, folder, title=f"trained at L_tr = {train_len}")
    lines += [paths["table"].read_text().strip(), ""]
    reference = "sliding" if "sliding" in protocols else protocols[0]
    far = 4 * train_len if 4 * train_len in lengths else lengths[-1]
    growth = {
        row: ppl_estimate(evs, reference, far).value / ppl_estimate(evs, reference, train_len).value
        for row, evs in rows.items()
    }
    lines += [f"![perplexity]({folder.name}/{paths['plot'].name})", "", f"**Paper**: {PAPER_PERPLEXITY}", ""]
    lines += [_agreement(growth, PAPER_GROWTH, _trend, f"{reference} ppl at {far} over ppl at L_tr"), ""]
    return lines


def analysis_section(
    analysis: Mapping[str, ModelAnalysis], lengths: list[int], train_len: int, plots: Path, layers: int
) -> list[str]:
    lines = ["## Why: attention resolution, receptive field, dispersion", ""]
    rows: dict[str, dict[str, Any]] = {}
    ratios: dict[str, float] = {}
    for label, result in analysis.items():
        for mask, by_length in result.resolution.items():
            row = label if mask == "causal" else f"{label}+{mask}"
            first, second = (by_length[n] for n in lengths[:2])
            rows[row] = {**string_keys(by_length), "ratio": second / first if first else float("nan")}
            ratios[row] = rows[row]["ratio"]
    columns = [str(n) for n in lengths[:2]] + ["ratio"]
    lines += ["### Empirical attention resolution R at L_tr and 2 L_tr", ""]
    lines += [markdown_table(rows, columns, "model", cell=lambda v: f"{v:.3g}"), ""]
    lines += [f"**Paper**: {PAPER_RESOLUTION}", ""]
    lines += [_agreement(ratios, PAPER_R_RATIO, _r_trend, "R at 2 L_tr over R at L_tr"), ""]
    lines += [
        f"Absolute values are not comparable: our {layers}-layer models' averaged logits fall only a few units with "
        "distance, while the paper's models have 24 layers.",
        "",
    ]
    erf = {
        label: {
            "segment": r.receptive_field.length,
            "ERF (99%)": r.receptive_field.erf,
            "share in last L_tr": r.receptive_field.share_last_L_tr,
        }
        for label, r in analysis.items()
    }
    lines += ["### Empirical receptive field (last-token gradient, 99%)", ""]
    lines += [markdown_table(erf, ["segment", "ERF (99%)", "share in last L_tr"], "model", cell=_number), ""]
    entropy = {label: {str(n): d.entropy for n, d in r.dispersion.items()} for label, r in analysis.items()}
    uniform = next(iter(analysis.values())).dispersion
    entropy["uniform attention"] = {str(n): d.uniform_entropy for n, d in uniform.items()}
    lines += ["### Attention dispersion: mean row entropy (nats) by input length", ""]
    lines += [markdown_table(entropy, lengths, "model"), ""]
    plot = plot_curves({"entropy": entropy}, train_len, plots / "dispersion.png", ylabel="mean attention entropy")
    lines += [f"![dispersion]({plot.parent.name}/{plot.name})", ""]
    return lines


def window_section(sweep: Mapping[str, WindowSweep], length: int, causal: Mapping[str, float | None]) -> list[str]:
    widths = [str(w) for w in next(iter(sweep.values())).ppl]
    rows = {
        label: {
            **{str(w): _with_interval(v, (row.intervals or {}).get(w)) for w, v in row.ppl.items()},
            "no window": causal.get(label),
            "ERF": row.erf,
        }
        for label, row in sweep.items()
    }
    lines = [f"## Windowed attention: sliding-protocol ppl at {length} under window:w, against the ERF", ""]
    lines += [markdown_table(rows, [*widths, "no window", "ERF"], "model (w ->)", cell=_number), ""]
    lines += [f"**Paper**: {PAPER_WINDOW}", ""]
    notes, narrower = [], []
    for label, row in sweep.items():
        best = min(row.ppl, key=lambda w: row.ppl[w])
        full = causal.get(label)
        note = f"{label}: best w = {best} ({row.ppl[best]:.2f}"
        note += f" against {full:.2f} without a window" if full is not None else ""
        note += f"; ERF {row.erf})" if row.erf is not None else ")"
        notes.append(note)
        if row.erf is not None and best < row.erf:
            narrower.append(label)
    lines += ["What the sweep shows: " + "; ".join(notes) + ".", ""]
    if narrower and len(narrower) == len(sweep):
        lines += [
            "In every model the best window is far narrower than its 99% ERF: the ERF measures where gradient "
            "reaches, not how much context the model needs, so a window as wide as the ERF is not necessary here.",
            "",
        ]
    return lines


def retrieval_section(
    retrieval: Mapping[str, Mapping[int, RetrievalResult]], lengths: list[int], train_len: int, plots: Path
) -> list[str]:
    """The passkey tables (greedy exact match, gold ranked first: per variant and length, the mean over seeds with
    its 95% t-interval where there are several), each variant's heatmap (its first seed) and the comparison with
    the paper."""
    from lextra.reporting.retrieval import plot_heatmap

    first = {v: next(iter(by_seed.values())) for v, by_seed in retrieval.items()}
    # the prompts' own lengths (a study's [retrieval] multiples may differ from its perplexity lengths)
    lengths = list(next(iter(first.values())).lengths) if first else lengths

    def estimates(metric: str) -> dict[str, dict[str, Estimate]]:
        return {
            v: {
                str(n): Estimate.of_seeds(
                    [getattr(r.by_length[n], metric) for r in by_seed.values()], [None] * len(by_seed)
                )
                for n in lengths
            }
            for v, by_seed in retrieval.items()
        }

    exact_estimates, rank_estimates = estimates("exact"), estimates("rank1")
    exact = {v: {n: e.value for n, e in row.items()} for v, row in exact_estimates.items()}
    seeds = max((len(by_seed) for by_seed in retrieval.values()), default=1)
    over = f", mean ± 95% interval over {seeds} seeds" if seeds > 1 else ""
    lines = ["## Passkey retrieval after fine-tuning at L_tr", ""]
    if any(result.answer_inside for result in first.values()):
        lines += ["Each length counts prompt + answer, as a training row does.", ""]
    for title, table in (("greedy exact match", exact_estimates), ("gold key ranked first of 5", rank_estimates)):
        cell = lambda e: "-" if e is None else e.text()  # noqa: E731
        lines += [f"### {title}{over}", "", markdown_table(table, lengths, "model", cell), ""]
    lines += extra_rounds_lines(retrieval)
    for variant, result in first.items():
        path = plot_heatmap(result, plots / f"passkey-{variant.replace('+', '_').replace(':', '-')}.png")
        lines += [f"![{variant}]({path.parent.name}/{path.name})"]
    lines += ["", f"**Paper**: {PAPER_PASSKEY}", ""]
    return lines + passkey_past_train_len(retrieval, exact, lengths, train_len)


def passkey_past_train_len(
    retrieval: Mapping[str, Mapping[int, RetrievalResult]],
    exact: Mapping[str, Mapping[str, float]],
    lengths: list[int],
    train_len: int,
) -> list[str]:
    """The models not learned at L_tr, named with their scores; the mean exact match past L_tr of the others; and
    the paper's claim (CoCA + dynamic NTK over RoPE) judged where both learned the task."""
    unlearned = not_learned(retrieval, train_len)
    beyond = {
        v: statistics.mean([row[str(n)] for n in lengths if n > train_len] or [0.0])
        for v, row in exact.items()
        if v not in unlearned
    }
    lines = []
    if unlearned:
        lines += [
            f"Not learned at L_tr (under {LEARNED:.0%} exact on some seed), so left out of the comparison past it: "
            + "; ".join(f"{v} ({', '.join(f'{x:.2f}' for x in scores)} per seed)" for v, scores in unlearned.items())
            + ".",
            "",
        ]
    sentence = "Exact match averaged over the lengths past L_tr: " + (
        ", ".join(f"{v} {a:.2f}" for v, a in beyond.items()) or "no model learned the task at L_tr"
    )
    if "coca+dynamic" in beyond and "rope" in beyond:
        ours, rope = beyond["coca+dynamic"], beyond["rope"]
        paper = statistics.mean(PAPER_PASSKEY_BEYOND)
        if ours - rope >= 0.1:
            sentence += ". **Agrees** in direction: CoCA + dynamic NTK retrieves past L_tr better than RoPE"
        else:
            sentence += ". **Differs**: CoCA + dynamic NTK does not retrieve past L_tr clearly better than RoPE"
        sentence += f" ({ours:.2f} against {rope:.2f}; the paper's CoCA + dynamic NTK averages {paper:.2f})"
    elif "coca+dynamic" in exact and "rope" in exact:
        which = " and ".join(v for v in ("coca+dynamic", "rope") if v in unlearned)
        sentence += f". CoCA + dynamic NTK against RoPE: **not decided**, {which} did not learn the task at L_tr"
    return [*lines, sentence + ".", ""]


#: the exact match at L_tr every seed must reach for a variant to enter the comparison past L_tr
LEARNED = 0.9


def not_learned(retrieval: Mapping[str, Mapping[int, RetrievalResult]], train_len: int) -> dict[str, list[float]]:
    """The variants some seed of which retrieves under `LEARNED` exact at L_tr, with each seed's score there (none
    where L_tr was not scored)."""
    found = {}
    for variant, by_seed in retrieval.items():
        scores = [r.by_length[train_len].exact for r in by_seed.values() if train_len in r.by_length]
        if scores and min(scores) < LEARNED:
            found[variant] = scores
    return found


def extra_rounds_lines(retrieval: Mapping[str, Mapping[int, RetrievalResult]]) -> list[str]:
    """One line per model and seed fine-tuned past the budget by the study's `until_learned` rule."""
    lines = [
        f"- {variant}, seed {seed}: fine-tuned {r.extra_steps:,} steps past the budget (`until_learned`); exact at "
        f"L_tr on held-out prompts after each round: {', '.join(f'{x:.2f}' for x in r.held_out_exact or [])}"
        for variant, by_seed in retrieval.items()
        for seed, r in by_seed.items()
        if r.extra_steps is not None
    ]
    return ["Models that had not learned the task at L_tr within the budget:", "", *lines, ""] if lines else []


def stretch_section(
    stretch: Mapping[str, Mapping[int, float]],
    lengths: list[int],
    train_len: int,
    intervals: Mapping[str, Mapping[int, Sequence[float]]] | None = None,
) -> list[str]:
    lines = ["## Inference-time methods (sliding-protocol ppl ± 95% interval over documents, no retraining)", ""]
    table = {
        row: {str(n): _with_interval(v, (intervals or {}).get(row, {}).get(n)) for n, v in values.items()}
        for row, values in stretch.items()
    }
    lines += [markdown_table(table, lengths, "model + method", cell=str), "", f"**Paper**: {PAPER_TEMPERATURE}", ""]
    far = lengths[-1]
    best: dict[str, tuple[str, float]] = {}
    for row, values in stretch.items():
        model, _, method = row.partition(" + ")
        if model not in best or values[far] < best[model][1]:
            best[model] = (method, values[far])
    lines += ["Best method at the longest length: " + "; ".join(f"{m}: {b[0]} ({b[1]:.2f})" for m, b in best.items())]
    temps = {
        model: {
            m: stretch[f"{model} + {m}"][far] for m in ("pmax", "entropy", "log-length") if f"{model} + {m}" in stretch
        }
        for model in best
    }
    ranked = [model for model, t in temps.items() if t and min(t, key=t.__getitem__) == "pmax"]
    if any(temps.values()):
        lines += [
            "",
            f"P_max is the best temperature method for {', '.join(ranked) or 'none of the models'} "
            f"(of {', '.join(m for m, t in temps.items() if t)}).",
        ]
    return [*lines, ""]


def write_report(results: StudyResults, out: Path, header: list[str]) -> tuple[Path, Path]:
    """report.md and report.html (plots embedded) in `out`."""
    config = results.config
    train_len = config["train"]["model"]["train_len"]
    lengths = [train_len * m for m in config["multiples"]]
    plots = out / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    lines = list(header)
    lines += perplexity_section(results.perplexity, lengths, train_len, plots, config["protocols"])
    if results.analysis is not None:
        lines += analysis_section(results.analysis, lengths, train_len, plots, config["train"]["model"]["n_layer"])
    if results.window_sweep:
        seed = config["seeds"][0]
        causal = {
            label: by_seed[seed].ppl("sliding", lengths[-1]) if "sliding" in by_seed[seed].results else None
            for label, by_seed in results.perplexity.get("causal", {}).items()
        }
        lines += window_section(results.window_sweep, lengths[-1], causal)
    if results.retrieval:
        lines += retrieval_section(results.retrieval_by_seed(), lengths, train_len, plots)
    if results.stretch:
        lines += stretch_section(results.stretch, lengths, train_len, results.stretch_intervals)
    text = "\n".join(lines) + "\n"
    atomic_write_text(out / "report.md", text)
    atomic_write_text(out / "report.html", markdown_to_html(text, out, config.get("name", "study")))
    return out / "report.md", out / "report.html"
