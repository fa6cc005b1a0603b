"""Evaluation summaries (``summary.json`` of ``python -m results.evaluation``) as one row per evaluation: the run's
identity and its scores under the authors' per-run column names (docs/results.md, "Collect").
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from results.loaders import RunLogError

SUMMARY_FILE = "summary.json"


def flatten_summary(summary: dict) -> dict:
    """One evaluation summary -> flat score columns, by its bench."""
    from results.evaluation.benches import benches  # the benches' scorers import sympy: only when collecting

    if (bench := benches().get(summary.get("bench"))) is None:
        raise RunLogError(f"unknown evaluation summary (bench={summary.get('bench')!r})")
    return bench.flatten(summary)


def summary_row(path: str | Path) -> tuple[dict, dict | None]:
    """One summary.json as a row (its folder, bench, the run's identity, missing cases, scores) and the
    configuration its run recorded."""
    summary = json.loads(Path(path).read_text())
    run = summary.get("run") or {}
    if "method" not in run:
        raise RunLogError(f"{path}: the evaluation names no run; pass --run-dir or --run-method when evaluating")
    identity = {k: v for k, v in run.items() if isinstance(v, str | int | float | bool) or v is None}
    return {"evaluation": str(Path(path).parent), "bench": summary.get("bench"), **identity,
            "missing_cases": summary.get("missing_cases", 0), **flatten_summary(summary)}, run.get("config")


def collect(folders: Sequence[str | Path]) -> pd.DataFrame:
    """Every summary.json at or below the folders -> one row each, identity columns first."""
    paths = sorted({p for f in folders for p in ([Path(f)] if Path(f).is_file() else Path(f).rglob(SUMMARY_FILE))})
    if not paths:
        raise RunLogError(f"no {SUMMARY_FILE} under {list(map(str, folders))}")
    return pd.DataFrame([summary_row(path)[0] for path in paths])
