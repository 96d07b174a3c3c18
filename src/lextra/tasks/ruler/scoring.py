"""RULER's scoring (Hsieh et al. 2024, arXiv 2404.06654, scripts/eval/synthetic/constants.py) and the Wilson
interval of a score.

A prediction is post-processed as RULER does (control characters become newlines, ends stripped). `string_match_all`
scores a prediction by the share of its references it contains, case-insensitive; `string_match_part` by whether it
contains any (RULER's QA rule, unused by the eleven synthetic tasks here). Both return RULER's percentage rounded to
two decimals over a list of predictions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

_CONTROL = re.compile(r"[\x00-\x1f]")


def postprocess(prediction: str) -> str:
    """RULER's clean-up: strip, control characters to newlines, strip again."""
    return _CONTROL.sub("\n", prediction.strip()).strip()


def contained(prediction: str, references: Sequence[str]) -> list[bool]:
    """Whether each reference occurs in the prediction, ignoring case."""
    text = prediction.lower()
    return [r.lower() in text for r in references]


def sample_score(prediction: str, references: Sequence[str]) -> float:
    """The share (0..1) of the references the post-processed prediction contains."""
    if not references:
        raise ValueError("a RULER sample needs at least one reference")
    return sum(contained(postprocess(prediction), references)) / len(references)


def string_match_all(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """RULER's score of the retrieval, tracing and aggregation tasks: the mean share of references contained,
    as a percentage rounded to two decimals."""
    pairs = list(zip(predictions, references, strict=True))
    if not pairs:
        raise ValueError("string_match_all needs at least one prediction")
    return round(sum(sample_score(p, r) for p, r in pairs) / len(pairs) * 100, 2)


def string_match_part(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """RULER's score of the QA tasks: the share of predictions containing at least one reference, a percentage."""
    pairs = list(zip(predictions, references, strict=True))
    if not pairs:
        raise ValueError("string_match_part needs at least one prediction")
    return round(sum(any(contained(postprocess(p), r)) for p, r in pairs) / len(pairs) * 100, 2)


def wilson_interval(score: float, samples: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval (95% by default) of a percentage `score` over `samples` samples, as percentages.

    Exact in its assumptions for 0/1 sample scores; for partial credit (several references per sample) it treats the
    mean share as a proportion of `samples` trials, an approximation (a sample's references are not independent).
    """
    if samples < 1:
        raise ValueError("a Wilson interval needs at least one sample")
    p = min(max(score / 100.0, 0.0), 1.0)
    denominator = 1 + z * z / samples
    centre = (p + z * z / (2 * samples)) / denominator
    half = z * math.sqrt(p * (1 - p) / samples + z * z / (4 * samples * samples)) / denominator
    low = 0.0 if p == 0.0 else max(0.0, centre - half)  # the bounds at 0 and 1 are exact, not rounded off
    high = 1.0 if p == 1.0 else min(1.0, centre + half)
    return low * 100, high * 100
