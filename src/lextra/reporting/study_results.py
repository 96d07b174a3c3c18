"""The results of a study, typed: what `study.json` and the analysis and window cells hold and the report reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lextra.analysis import Dispersion
from lextra.evaluate import Evaluation
from lextra.evaluate.retrieval import RetrievalResult
from lextra.serialize import Serializable, options


@dataclass(frozen=True)
class DispersionMeans(Serializable):
    """Mean attention entropy and max probability over layers and heads, and the entropy of uniform rows."""

    entropy: float
    max_prob: float
    uniform_entropy: float

    @classmethod
    def of(cls, result: Dispersion) -> DispersionMeans:
        return cls(result.entropy_mean, result.max_prob_mean, result.uniform.entropy)


@dataclass(frozen=True)
class ReceptiveFieldSummary(Serializable):
    """The ERF on segments of `length` tokens and the gradient share of the last L_tr tokens."""

    length: int
    erf: int
    share_last_L_tr: float  # noqa: N815 (the JSON's name)


@dataclass
class ModelAnalysis(Serializable):
    """One model's analysis cell: empirical R per mask and length, dispersion means per length, receptive field."""

    #: mask -> length -> R
    resolution: dict[str, dict[int, float]]
    dispersion: dict[int, DispersionMeans]
    receptive_field: ReceptiveFieldSummary


@dataclass
class WindowSweep(Serializable):
    """One model's sliding-protocol perplexity at the longest length under each window width, and its ERF."""

    #: window width -> perplexity, written inline (the widths are keys beside "erf")
    ppl: dict[int, float] = field(metadata=options(inline=True))
    erf: int | None
    #: window width -> [low, high] of the perplexity's 95% interval over documents (absent in older studies)
    intervals: dict[int, list[float]] | None = field(default=None, metadata=options(omit_none=True))


@dataclass
class StudyResults(Serializable):
    """Every section a study computed (absent sections are None) and where its cells came from (`study.json`)."""

    #: the study's config (`StudyConfig.to_dict()`)
    config: dict[str, Any]
    #: mask -> model label -> seed -> evaluation
    perplexity: dict[str, dict[str, dict[int, Evaluation]]]
    analysis: dict[str, ModelAnalysis] | None = field(default=None, metadata=options(omit_none=True))
    window_sweep: dict[str, WindowSweep] | None = field(default=None, metadata=options(omit_none=True))
    #: variant -> passkey results after fine-tuning, of the study's first seed
    retrieval: dict[str, RetrievalResult] | None = field(default=None, metadata=options(omit_none=True))
    #: seed -> variant -> passkey results, of the study's other seeds (None: a one-seed study)
    retrieval_other_seeds: dict[int, dict[str, RetrievalResult]] | None = field(
        default=None, metadata=options(omit_none=True)
    )
    #: "model + method" -> length -> sliding-protocol perplexity
    stretch: dict[str, dict[int, float]] | None = field(default=None, metadata=options(omit_none=True))
    #: "model + method" -> length -> [low, high] of that perplexity's 95% interval over documents
    stretch_intervals: dict[str, dict[int, list[float]]] | None = field(default=None, metadata=options(omit_none=True))
    compute_minutes: float = 0.0
    cell_commits: list[str] = field(default_factory=list)

    def retrieval_by_seed(self) -> dict[str, dict[int, RetrievalResult]]:
        """Variant -> seed -> passkey results, every seed's (the first keyed by the config's first seed)."""
        first = (self.config.get("seeds") or [0])[0]
        by_seed = {variant: {first: result} for variant, result in (self.retrieval or {}).items()}
        for seed, results in (self.retrieval_other_seeds or {}).items():
            for variant, result in results.items():
                by_seed.setdefault(variant, {})[seed] = result
        return by_seed
