"""Our figures against the paper's: one row per (key, metric) with both values and the difference.

Both inputs are tables keyed by the same columns (e.g. model_size, method): summary
tables (``<metric>_mean``/``_sd`` columns, as ``table --format csv`` and the
authors' method-results files write them) or plain tables such as threshold steps
(a ``step`` column).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from results.loaders import RunLogError


def _value_column(table: pd.DataFrame, metric: str) -> str | None:
    for name in (f"{metric}_mean", metric):
        if name in table.columns:
            return name
    return None


def _shared_metrics(ours: pd.DataFrame, paper: pd.DataFrame, keys: Sequence[str]) -> list[str]:
    def names(table):
        out = []
        for col in table.columns:
            if col in keys or col in ("n", "seeds") or not pd.api.types.is_numeric_dtype(table[col]):
                continue
            if col.endswith("_sd") or col.endswith("_std"):
                continue
            out.append(col[: -len("_mean")] if col.endswith("_mean") else col)
        return out

    theirs = set(names(paper))
    return [m for m in names(ours) if m in theirs]


def compare_tables(
    ours: pd.DataFrame,
    paper: pd.DataFrame,
    keys: Sequence[str],
    metrics: Sequence[str] | None = None,
    rename: dict[str, str] | None = None,
) -> pd.DataFrame:
    """Join on ``keys``; for each metric: ours, paper, diff = ours - paper, and both sds when given.

    ``rename`` maps paper metric names to ours (e.g. v4_live -> live_accuracy). Rows present in only
    one table are kept with the other side empty, so a missing method is visible, not dropped."""
    paper = paper.rename(columns={c: c[: -len("_std")] + "_sd" for c in paper.columns if c.endswith("_std")})
    for theirs_name, our_name in (rename or {}).items():
        paper = paper.rename(columns={f"{theirs_name}{s}": f"{our_name}{s}" for s in ("", "_mean", "_sd")})
    for side, table in (("ours", ours), ("paper", paper)):
        missing = [k for k in keys if k not in table.columns]
        if missing:
            raise RunLogError(f"compare: the {side} table lacks key column(s) {missing}")
    metrics = list(metrics) if metrics else _shared_metrics(ours, paper, keys)
    if not metrics:
        raise RunLogError("compare: the two tables share no metric; name them with --metrics or --rename")
    merged = ours.merge(paper, on=list(keys), how="outer", suffixes=("@ours", "@paper"))
    rows = []
    for metric in metrics:
        our_col, their_col = _value_column(ours, metric), _value_column(paper, metric)
        if our_col is None or their_col is None:
            raise RunLogError(f"compare: metric {metric!r} missing from the {'ours' if our_col is None else 'paper'} table")

        def pick(col, side):
            return merged[f"{col}@{side}"] if f"{col}@{side}" in merged.columns else merged.get(col)

        mine, theirs = pick(our_col, "ours"), pick(their_col, "paper")
        part = merged[list(keys)].copy()
        part["metric"] = metric
        part["ours"] = mine.astype(float).to_numpy()
        part["paper"] = theirs.astype(float).to_numpy()
        part["diff"] = part["ours"] - part["paper"]
        for side, table in (("ours", ours), ("paper", paper)):
            sd = pick(f"{metric}_sd", side) if f"{metric}_sd" in table.columns else None
            part[f"{side}_sd"] = sd.astype(float).to_numpy() if sd is not None else np.nan
        rows.append(part)
    return pd.concat(rows, ignore_index=True)
