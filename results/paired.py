"""Paired statistics over seeds (A - B, run for run with the same seed): exact two-sided sign test and percentile
bootstrap interval of the mean difference; the percentile bootstrap of the evaluation summaries too."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0   # fixed: the committed interval is reproducible
CONFIDENCE = 0.95


def percentile_interval(boot: np.ndarray, ci: float) -> tuple[float, float]:
    lo, hi = np.percentile(boot, [100 * (1 - ci) / 2, 100 * (1 + ci) / 2])
    return float(lo), float(hi)


def bootstrap_ci(values: np.ndarray, rng: np.random.Generator, n_boot: int, ci: float) -> tuple[float, float]:
    """Percentile CI of the mean from ``n_boot`` resamples (with replacement) of the values."""
    return percentile_interval(values[rng.integers(0, len(values), size=(n_boot, len(values)))].mean(axis=1), ci)


def sign_test(differences: Sequence[float]) -> float:
    """Two-sided exact sign test (zeros dropped): min(1, twice the binomial(n, 1/2) tail at the rarer sign)."""
    positive = sum(1 for value in differences if value > 0)
    negative = sum(1 for value in differences if value < 0)
    n = positive + negative  # none: p = 1
    tail = sum(math.comb(n, k) for k in range(min(positive, negative) + 1)) / 2**n
    return min(1.0, 2.0 * tail)


def bootstrap_interval(differences: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES,
                       seed: int = BOOTSTRAP_SEED, confidence: float = CONFIDENCE) -> tuple[float, float]:
    values = np.asarray(differences, dtype=float)
    if values.size == 0 or not np.isfinite(values).all():
        raise ValueError(f"paired differences must be finite and non-empty, got {list(differences)}")
    return bootstrap_ci(values, np.random.default_rng(seed), resamples, confidence)


def paired_summary(a: dict[int, float], b: dict[int, float]) -> dict:
    """A - B by seed: n, mean, lower, higher, tied, sign-test p, bootstrap interval; unpaired seeds are an error."""
    if unpaired := sorted(set(a) ^ set(b)):
        raise ValueError(f"seeds {unpaired} are not in both methods' runs: a paired comparison needs both")
    differences = [float(a[seed]) - float(b[seed]) for seed in sorted(a)]
    low, high = bootstrap_interval(differences)
    return {"n": len(differences), "mean": float(np.mean(differences)),
            "lower": sum(d < 0 for d in differences), "higher": sum(d > 0 for d in differences),
            "tied": sum(d == 0 for d in differences), "sign_p": sign_test(differences),
            "ci_low": low, "ci_high": high}
