"""95% intervals for perplexity by a seeded percentile bootstrap over documents (Efron and Tibshirani 1993,
ch. 13): each resample draws documents with replacement and recomputes exp(sum NLL / sum tokens); a ratio of two
perplexities on the same documents resamples both with the same draw."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

#: resamples per interval: the 2.5% and 97.5% percentiles then move by well under 1% of the interval's width
RESAMPLES = 2000
#: the bootstrap's seed: intervals are reproducible from the saved per-document sums
SEED = 0


def _draws(documents: int) -> np.ndarray:
    """(RESAMPLES, documents) indices drawn with replacement, the same for every cell with that many documents."""
    return np.random.default_rng(SEED).integers(0, documents, size=(RESAMPLES, documents))


def _resampled_nll(nll: Sequence[float], tokens: Sequence[int], draws: np.ndarray) -> np.ndarray:
    """Mean NLL per token of each resample."""
    n, t = np.asarray(nll, dtype=np.float64), np.asarray(tokens, dtype=np.float64)
    return n[draws].sum(axis=1) / np.maximum(t[draws].sum(axis=1), 1.0)


def ppl_interval(nll: Sequence[float], tokens: Sequence[int]) -> tuple[float, float] | None:
    """The 95% percentile-bootstrap interval of exp(sum nll / sum tokens) over documents (per-document NLL sums
    and token counts); None with fewer than two documents, where the spread over documents is unknown."""
    if len(nll) != len(tokens):
        raise ValueError(f"{len(nll)} NLL sums but {len(tokens)} token counts")
    if len(nll) < 2:
        return None
    mean = _resampled_nll(nll, tokens, _draws(len(nll)))
    low, high = np.percentile(mean, [2.5, 97.5])
    return math.exp(float(low)), math.exp(float(high))


def ratio_interval(
    numerator: tuple[Sequence[float], Sequence[int]], denominator: tuple[Sequence[float], Sequence[int]]
) -> tuple[float, float] | None:
    """The 95% interval of ppl(numerator) / ppl(denominator), two cells measured on the same documents (in the same
    order), resampled together; None with fewer than two documents."""
    if len(numerator[0]) != len(denominator[0]):
        raise ValueError("a paired ratio needs the same documents in both cells")
    if len(numerator[0]) < 2:
        return None
    draws = _draws(len(numerator[0]))
    log_ratio = _resampled_nll(*numerator, draws) - _resampled_nll(*denominator, draws)
    low, high = np.percentile(log_ratio, [2.5, 97.5])
    return math.exp(float(low)), math.exp(float(high))
