"""Percentile bootstrap over evaluation cases: the one resampling rule of the math and ToolRL summaries."""

from __future__ import annotations

import numpy as np


def resample_indices(rng: np.random.Generator, n_items: int, n_boot: int) -> np.ndarray:
    """[n_boot, n_items] indices drawn with replacement (one row per bootstrap resample)."""
    return rng.integers(0, n_items, size=(n_boot, n_items))


def bootstrap_means(values: np.ndarray, resamples: np.ndarray) -> np.ndarray:
    """Mean of ``values`` under each row of resample indices [B, Q] -> [B]."""
    return values[resamples].mean(axis=1)


def percentile_interval(boot: np.ndarray, ci: float) -> tuple[float, float]:
    """The central ``ci`` percentile interval of bootstrap statistics."""
    lo, hi = np.percentile(boot, [100 * (1 - ci) / 2, 100 * (1 + ci) / 2])
    return float(lo), float(hi)


def bootstrap_ci(values: np.ndarray, rng: np.random.Generator, n_boot: int, ci: float) -> tuple[float, float]:
    """Percentile CI of the mean from ``n_boot`` resamples of the cases."""
    return percentile_interval(bootstrap_means(values, resample_indices(rng, len(values), n_boot)), ci)
