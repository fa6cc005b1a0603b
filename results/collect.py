"""Evaluation summaries (``summary.json``) as one row each: the run's identity and its scores under the authors'
per-run column names (docs/results.md, "Collect")."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from results.loaders import RunLogError, scalars

SUMMARY_FILE = "summary.json"


def flatten_summary(summary: dict) -> dict:
    from results.evaluation.benches import benches  # imports sympy: only when collecting
    if (bench := benches().get(summary.get("bench"))) is None:
        raise RunLogError(f"unknown evaluation summary (bench={summary.get('bench')!r})")
    return bench.flatten(summary)


def summary_row(path: str | Path) -> dict:
    summary = json.loads(Path(path).read_text())
    run = summary.get("run") or {}
    if "method" not in run:
        raise RunLogError(f"{path}: the evaluation names no run; pass --run-dir or --run-method when evaluating")
    return {"evaluation": str(Path(path).parent), "bench": summary.get("bench"), **scalars(run),
            "missing_cases": summary.get("missing_cases", 0), **flatten_summary(summary)}


def collect(folders: Sequence[str | Path]) -> pd.DataFrame:
    paths = sorted({p for f in folders for p in ([Path(f)] if Path(f).is_file() else Path(f).rglob(SUMMARY_FILE))})
    if not paths:
        raise RunLogError(f"no {SUMMARY_FILE} under {list(map(str, folders))}")
    return pd.DataFrame([summary_row(path) for path in paths])
