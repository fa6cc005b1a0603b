"""BFCL v4 groups from per-category scores (docs/results.md, "BFCL groups"): Live = case-weighted micro mean of
the four live categories; Non-Live = mean(Simple, Multiple, Parallel, Parallel Multiple), Simple the mean of the
three languages; Multi-Turn = mean of its four categories; Average = mean of the three."""

from __future__ import annotations

from collections.abc import Mapping
from statistics import fmean

SIMPLE_LANGUAGES = ("simple_python", "simple_java", "simple_javascript")
LIVE_CATEGORIES = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")
MULTI_TURN_CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
# Official case counts of BFCL v4 (the paper's 3,301 cases).
CASE_COUNTS = dict(zip((*SIMPLE_LANGUAGES, "multiple", "parallel", "parallel_multiple", *LIVE_CATEGORIES,
                        *MULTI_TURN_CATEGORIES), (400, 100, 50, 200, 200, 200, 258, 1053, 16, 24, 200, 200, 200, 200),
                       strict=True))
CATEGORIES = tuple(CASE_COUNTS)
GROUPS = ("live", "non_live", "multi_turn")


def _need(scores: Mapping[str, float], names) -> list[float]:
    if missing := [n for n in names if n not in scores]:
        raise KeyError(f"BFCL aggregation needs scores for {missing}; got {sorted(scores)}")
    return [scores[n] for n in names]


def non_live_score(scores: Mapping[str, float]) -> float:
    """Mean of Simple (key ``simple``, else the mean of the three languages), Multiple, Parallel, Parallel Multiple."""
    simple = scores["simple"] if "simple" in scores else fmean(_need(scores, SIMPLE_LANGUAGES))
    return fmean([simple, *_need(scores, ("multiple", "parallel", "parallel_multiple"))])


def live_score(scores: Mapping[str, float], counts: Mapping[str, int] = CASE_COUNTS) -> float:
    """Micro mean: case-count-weighted mean of the four live categories."""
    values = _need(scores, LIVE_CATEGORIES)
    weights = [counts[c] for c in LIVE_CATEGORIES]
    return sum(v * w for v, w in zip(values, weights, strict=True)) / sum(weights)


def aggregate(scores: Mapping[str, float], counts: Mapping[str, int] = CASE_COUNTS) -> dict[str, float]:
    """Per-category scores -> {"live", "non_live", "multi_turn", "average"}."""
    out = {"live": live_score(scores, counts), "non_live": non_live_score(scores),
           "multi_turn": fmean(_need(scores, MULTI_TURN_CATEGORIES))}
    return {**out, "average": fmean(out.values())}
