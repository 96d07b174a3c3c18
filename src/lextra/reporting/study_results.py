"""The results of a study, typed: what `study.json` and the analysis and window cells hold and the report reads.

Each `to_dict` writes the JSON form (lengths, widths and seeds as string keys) and each `from_dict` reads it, so
study folders written before these types existed still load.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lextra.analysis import Dispersion
from lextra.evaluate import Evaluation
from lextra.evaluate.retrieval import RetrievalResult


@dataclass(frozen=True)
class DispersionMeans:
    """Mean attention entropy and max probability over layers and heads, and the entropy of uniform rows."""

    entropy: float
    max_prob: float
    uniform_entropy: float

    @classmethod
    def of(cls, result: Dispersion) -> DispersionMeans:
        return cls(result.entropy_mean, result.max_prob_mean, result.uniform.entropy)

    def to_dict(self) -> dict[str, Any]:
        return {"entropy": self.entropy, "max_prob": self.max_prob, "uniform_entropy": self.uniform_entropy}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DispersionMeans:
        return cls(entropy=data["entropy"], max_prob=data["max_prob"], uniform_entropy=data["uniform_entropy"])


@dataclass(frozen=True)
class ReceptiveFieldSummary:
    """The ERF on segments of `length` tokens and the gradient share of the last L_tr tokens."""

    length: int
    erf: int
    share_last_L_tr: float  # noqa: N815 (the JSON's name)

    def to_dict(self) -> dict[str, Any]:
        return {"length": self.length, "erf": self.erf, "share_last_L_tr": self.share_last_L_tr}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReceptiveFieldSummary:
        return cls(length=data["length"], erf=data["erf"], share_last_L_tr=data["share_last_L_tr"])


@dataclass
class ModelAnalysis:
    """One model's analysis cell: empirical R per mask and length, dispersion means per length, receptive field."""

    #: mask -> length -> R
    resolution: dict[str, dict[int, float]]
    dispersion: dict[int, DispersionMeans]
    receptive_field: ReceptiveFieldSummary

    def to_dict(self) -> dict[str, Any]:
        return {
            "resolution": {
                mask: {str(n): r for n, r in by_length.items()} for mask, by_length in self.resolution.items()
            },
            "dispersion": {str(n): d.to_dict() for n, d in self.dispersion.items()},
            "receptive_field": self.receptive_field.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelAnalysis:
        return cls(
            resolution={
                mask: {int(n): r for n, r in by_length.items()} for mask, by_length in data["resolution"].items()
            },
            dispersion={int(n): DispersionMeans.from_dict(d) for n, d in data["dispersion"].items()},
            receptive_field=ReceptiveFieldSummary.from_dict(data["receptive_field"]),
        )


@dataclass
class WindowSweep:
    """One model's sliding-protocol perplexity at the longest length under each window width, and its ERF."""

    #: window width -> perplexity
    ppl: dict[int, float]
    erf: int | None

    def to_dict(self) -> dict[str, Any]:
        return {**{str(w): p for w, p in self.ppl.items()}, "erf": self.erf}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WindowSweep:
        return cls(ppl={int(w): p for w, p in data.items() if w != "erf"}, erf=data["erf"])


def _curves_to_dict(curves: Mapping[str, Mapping[int, float]]) -> dict[str, dict[str, float]]:
    return {label: {str(n): v for n, v in curve.items()} for label, curve in curves.items()}


def _curves_from_dict(data: Mapping[str, Mapping[str, float]]) -> dict[str, dict[int, float]]:
    return {label: {int(n): v for n, v in curve.items()} for label, curve in data.items()}


@dataclass
class StudyResults:
    """Every section a study computed (absent sections are None) and where its cells came from (`study.json`)."""

    #: the study's config (`StudyConfig.to_dict()`)
    config: dict[str, Any]
    #: mask -> model label -> seed -> evaluation
    perplexity: dict[str, dict[str, dict[int, Evaluation]]]
    analysis: dict[str, ModelAnalysis] | None = None
    window_sweep: dict[str, WindowSweep] | None = None
    retrieval: dict[str, RetrievalResult] | None = None
    #: "model + method" -> length -> sliding-protocol perplexity
    stretch: dict[str, dict[int, float]] | None = None
    compute_minutes: float = 0.0
    cell_commits: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "config": self.config,
            "perplexity": {
                mask: {
                    label: {str(seed): ev.to_dict() for seed, ev in by_seed.items()}
                    for label, by_seed in by_label.items()
                }
                for mask, by_label in self.perplexity.items()
            },
        }
        if self.analysis is not None:
            data["analysis"] = {label: a.to_dict() for label, a in self.analysis.items()}
        if self.window_sweep is not None:
            data["window_sweep"] = {label: row.to_dict() for label, row in self.window_sweep.items()}
        if self.retrieval is not None:
            data["retrieval"] = {variant: r.to_dict() for variant, r in self.retrieval.items()}
        if self.stretch is not None:
            data["stretch"] = _curves_to_dict(self.stretch)
        data["compute_minutes"] = self.compute_minutes
        data["cell_commits"] = list(self.cell_commits)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StudyResults:
        def section(name: str, read: Any) -> Any:
            return None if name not in data else {label: read(v) for label, v in data[name].items()}

        return cls(
            config=data["config"],
            perplexity={
                mask: {
                    label: {int(seed): Evaluation.from_dict(ev) for seed, ev in by_seed.items()}
                    for label, by_seed in by_label.items()
                }
                for mask, by_label in data["perplexity"].items()
            },
            analysis=section("analysis", ModelAnalysis.from_dict),
            window_sweep=section("window_sweep", WindowSweep.from_dict),
            retrieval=section("retrieval", RetrievalResult.from_dict),
            stretch=_curves_from_dict(data["stretch"]) if "stretch" in data else None,
            compute_minutes=data["compute_minutes"],
            cell_commits=list(data["cell_commits"]),
        )
