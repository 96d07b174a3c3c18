"""Means over seeds with 95% intervals (Student's t), and whether two intervals leave a difference decided."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: t_{0.975, df} for df = 1..30; beyond, the normal 1.960 (within 0.04 at df 30)
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_quantile(df: int) -> float:
    """The two-sided 95% quantile of Student's t with `df` degrees of freedom."""
    if df < 1:
        raise ValueError(f"t_quantile needs df >= 1, got {df}")
    return _T975[df - 1] if df <= len(_T975) else 1.960


@dataclass(frozen=True)
class Interval:
    """A mean over n values with the half-width of its 95% interval (nan with one value: no interval)."""

    mean: float
    half: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Interval:
        n = len(values)
        if n == 0:
            raise ValueError("an interval needs at least one value")
        mean = math.fsum(values) / n
        if n == 1:
            return cls(mean, float("nan"), 1)
        variance = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
        return cls(mean, t_quantile(n - 1) * math.sqrt(variance / n), n)

    @property
    def low(self) -> float:
        return self.mean - self.half

    @property
    def high(self) -> float:
        return self.mean + self.half

    def separated(self, other: Interval) -> bool:
        """Whether the two intervals do not overlap (a difference larger than both intervals; conservative)."""
        if math.isnan(self.half) or math.isnan(other.half):
            return False
        return self.low > other.high or other.low > self.high

    def text(self, scale: float = 1.0, digits: int = 1, within: tuple[float, float] | None = None) -> str:
        """`mean ± half` (scaled, e.g. x100 for percent); the mean alone with one value. `within`: the range the
        values can take (a score's 0..1): an interval reaching past it is written clipped, `mean (low-high)`."""
        mean = f"{self.mean * scale:.{digits}f}"
        if math.isnan(self.half):
            return mean
        if within is not None and (self.low < within[0] or self.high > within[1]):
            low, high = max(self.low, within[0]) * scale, min(self.high, within[1]) * scale
            return f"{mean} ({low:.{digits}f}-{high:.{digits}f})"
        return f"{mean} ± {self.half * scale:.{digits}f}"

    def to_dict(self) -> dict[str, float | int | None]:
        return {"mean": self.mean, "ci95": None if math.isnan(self.half) else self.half, "n": self.n}
