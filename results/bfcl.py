"""BFCL v4 groups from per-category scores (docs/results.md, "BFCL groups"): Live = case-weighted micro mean of
the four live categories; Non-Live = mean(Simple, Multiple, Parallel, Parallel Multiple), Simple the mean of the
three languages; Multi-Turn = mean of its four categories; Average = mean of the three.
"""

from __future__ import annotations

from collections.abc import Mapping

SIMPLE_LANGUAGES = ("simple_python", "simple_java", "simple_javascript")
NON_LIVE_PARTS = ("simple", "multiple", "parallel", "parallel_multiple")
LIVE_CATEGORIES = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")
MULTI_TURN_CATEGORIES = (
    "multi_turn_base",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
    "multi_turn_long_context",
)
# Official case counts of BFCL v4 (the paper's 3,301 cases).
CASE_COUNTS = {
    "simple_python": 400,
    "simple_java": 100,
    "simple_javascript": 50,
    "multiple": 200,
    "parallel": 200,
    "parallel_multiple": 200,
    "live_simple": 258,
    "live_multiple": 1053,
    "live_parallel": 16,
    "live_parallel_multiple": 24,
    "multi_turn_base": 200,
    "multi_turn_miss_func": 200,
    "multi_turn_miss_param": 200,
    "multi_turn_long_context": 200,
}
CATEGORIES = tuple(CASE_COUNTS)
GROUPS = ("live", "non_live", "multi_turn")


def _need(scores: Mapping[str, float], names) -> None:
    missing = [n for n in names if n not in scores]
    if missing:
        raise KeyError(f"BFCL aggregation needs scores for {missing}; got {sorted(scores)}")


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def non_live_score(scores: Mapping[str, float]) -> float:
    """Unweighted mean of Simple, Multiple, Parallel, Parallel Multiple; Simple is given directly
    (key ``simple``) or as the unweighted mean of the three languages."""
    if "simple" in scores:
        simple = scores["simple"]
    else:
        _need(scores, SIMPLE_LANGUAGES)
        simple = _mean(scores[c] for c in SIMPLE_LANGUAGES)
    _need(scores, NON_LIVE_PARTS[1:])
    return _mean([simple, *(scores[c] for c in NON_LIVE_PARTS[1:])])


def live_score(scores: Mapping[str, float], counts: Mapping[str, int] = CASE_COUNTS) -> float:
    """Micro mean: case-count-weighted mean of the four live categories."""
    _need(scores, LIVE_CATEGORIES)
    total = sum(counts[c] for c in LIVE_CATEGORIES)
    return sum(scores[c] * counts[c] for c in LIVE_CATEGORIES) / total


def multi_turn_score(scores: Mapping[str, float]) -> float:
    """Unweighted mean of the four multi-turn categories."""
    _need(scores, MULTI_TURN_CATEGORIES)
    return _mean(scores[c] for c in MULTI_TURN_CATEGORIES)


def aggregate(scores: Mapping[str, float], counts: Mapping[str, int] = CASE_COUNTS) -> dict[str, float]:
    """Per-category scores -> {"live", "non_live", "multi_turn", "average"}."""
    out = {
        "live": live_score(scores, counts),
        "non_live": non_live_score(scores),
        "multi_turn": multi_turn_score(scores),
    }
    out["average"] = _mean(out[g] for g in GROUPS)
    return out
