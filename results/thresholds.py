"""Threshold steps (docs/results.md, "Threshold steps"): ``median``, the first step at which the seed-median curve
reaches X; ``sustained``, the first step whose trailing ``window``-step mean reaches X and stays there for the next
``hold`` steps. Only steps that carry the metric count; ``per_seed`` gives one step per run."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from results.loaders import require_columns
from results.variants import check_one_configuration

RULES = ("median", "sustained")


def trailing_mean(values: Sequence[float], window: int) -> np.ndarray:
    """Mean of the last ``window`` values at each position; NaN until a full window."""
    if window <= 0:
        raise ValueError(f"window must be positive, got {window}")
    values = np.asarray(values, dtype=float)
    out = np.full(values.shape, np.nan)
    if values.size >= window:
        sums = np.cumsum(np.concatenate([[0.0], values]))
        out[window - 1:] = (sums[window:] - sums[:-window]) / window
    return out


def first_sustained_step(steps: Sequence[int], values: Sequence[float], threshold: float, *, window: int = 10,
                         hold: int = 20) -> int | None:
    """First step whose trailing ``window``-mean is >= threshold at it and the next ``hold`` logged steps (a step
    too close to the end cannot be confirmed)."""
    ok = trailing_mean(values, window) >= threshold  # NaN (partial window) compares False
    hit = next((i for i in range(ok.size - hold) if ok[i: i + hold + 1].all()), None)
    return None if hit is None else int(np.asarray(steps)[hit])


def threshold_steps(frame: pd.DataFrame, metric: str, threshold: float, *, rule: str = "median",
                    group_by: Sequence[str] = (), per_seed: bool = False, window: int = 10,
                    hold: int = 20) -> pd.DataFrame:
    """One row per (group..., method[, seed]): the step the rule is first met (<NA>: never), in data order."""
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; choose one of {RULES}")
    group_cols = [*group_by, "method"]
    require_columns(frame, [*group_cols, "step", metric], "thresholds")
    check_one_configuration(frame, group_cols, "thresholds")
    if per_seed:
        require_columns(frame, ["seed"], "thresholds --per-seed")
        group_cols.append("seed")
        curves = frame.dropna(subset=[metric]).sort_values([*group_cols, "step"], kind="stable")
    else:
        if "seed" not in frame.columns and frame.duplicated([*group_cols, "step"]).any():
            raise ValueError("several rows per step and no 'seed' column to tell runs apart")
        keys = [*group_cols, "step"]
        curves = (frame.dropna(subset=[metric]).groupby(keys, sort=False, dropna=False)[metric].median()
                  .reset_index().sort_values(keys, kind="stable"))
    rows = []
    for key, part in curves.groupby(group_cols, sort=False, dropna=False):
        steps, values = part["step"].to_numpy(), part[metric].to_numpy(dtype=float)
        if rule == "median":  # the first step at or above the threshold
            hits = np.flatnonzero(values >= threshold)
            step = int(steps[hits[0]]) if hits.size else None
        else:
            step = first_sustained_step(steps, values, threshold, window=window, hold=hold)
        rows.append((*key, step))
    found = pd.DataFrame(rows, columns=[*group_cols, "step"])
    out = frame[group_cols].drop_duplicates().merge(found, on=group_cols, how="left")
    return out.astype({"step": "Int64"}).reset_index(drop=True)


def seed_summary(per_run: pd.DataFrame, group_cols: Sequence[str] = ("method",)) -> pd.DataFrame:
    """Per group (the paper's math T_0.95 / T_0.99): runs, runs that reached it, and their mean/median/min/max step."""
    group_cols = list(group_cols)
    require_columns(per_run, [*group_cols, "step"], "thresholds summary")
    rows = []
    for key, part in per_run.groupby(group_cols, sort=False, dropna=False):
        reached = part["step"].dropna().astype(float)
        stats = {"mean": reached.mean(), "median": reached.median(), "min": reached.min(), "max": reached.max()}
        rows.append({**dict(zip(group_cols, key, strict=True)), "runs": len(part), "reached": len(reached),
                     **{f"step_{name}": (float(v) if len(reached) else np.nan) for name, v in stats.items()}})
    return pd.DataFrame(rows)
