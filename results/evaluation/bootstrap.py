"""Percentile bootstrap over evaluation cases: the one resampling rule of the math and ToolRL summaries."""

from __future__ import annotations

import numpy as np


def percentile_interval(boot: np.ndarray, ci: float) -> tuple[float, float]:
    """The central ``ci`` percentile interval of bootstrap statistics."""
    lo, hi = np.percentile(boot, [100 * (1 - ci) / 2, 100 * (1 + ci) / 2])
    return float(lo), float(hi)


def bootstrap_ci(values: np.ndarray, rng: np.random.Generator, n_boot: int, ci: float) -> tuple[float, float]:
    """Percentile CI of the mean from ``n_boot`` resamples (with replacement) of the cases."""
    return percentile_interval(values[rng.integers(0, len(values), size=(n_boot, len(values)))].mean(axis=1), ci)
