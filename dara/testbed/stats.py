"""Summary statistics over seeds: means with 95% t-intervals (steps-to-threshold: results.thresholds)."""

from __future__ import annotations

import math
from collections.abc import Sequence

# Two-sided 95% quantiles t_{0.975, df} of Student's t for df = 1..30 (standard table values);
# beyond 30 degrees of freedom the normal quantile 1.96 is within 2%.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_quantile_975(df: int) -> float:
    """t_{0.975, df}, the half-width multiplier of a two-sided 95% interval."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return _T975[df - 1] if df <= len(_T975) else 1.96


def mean_ci(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high): mean +- t_{0.975, n-1} * sd / sqrt(n) over finite values (sd with ddof=1); one value
    gives a zero-width interval at that value; no finite value raises."""
    finite = [float(v) for v in values if math.isfinite(v)]
    if not finite:
        raise ValueError("no finite value to summarise")
    n = len(finite)
    mean = sum(finite) / n
    if n == 1:
        return mean, mean, mean
    sd = math.sqrt(sum((v - mean) ** 2 for v in finite) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half
