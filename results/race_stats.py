"""A race's endpoints (threshold step, censored at steps + 1 when never reached; the metric's mean over a step
range), their paired comparisons (results.paired), and per run whether DARA up-weighted the sparse channel and
which channels collapsed."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from results.loaders import require_columns
from results.paired import paired_summary
from results.thresholds import threshold_steps

# A - B, paired by seed: DARA against the baseline it refines, and GDPO against GRPO
COMPARISONS = (("dara_asym", "gdpo"), ("dara_sym", "gdpo"), ("gdpo", "grpo"))
ACTIVE_WEIGHT = 1.05
COLLAPSE_STEPS = 5

Endpoint = dict[str, dict[int, float]]  # method -> seed -> value


def threshold_endpoint(frame: pd.DataFrame, metric: str, threshold: float, steps: int, rule: str = "median",
                       window: int = 10, hold: int = 20) -> Endpoint:
    """method -> seed -> the run's step under ``rule`` within 1..steps (never: steps + 1)."""
    per_run = threshold_steps(frame[frame["step"] <= steps], metric, threshold, rule=rule, per_seed=True,
                              window=window, hold=hold)
    out: Endpoint = {}
    for method, seed, step in per_run[["method", "seed", "step"]].itertuples(index=False):
        out.setdefault(str(method), {})[int(seed)] = float(steps + 1 if pd.isna(step) else step)
    return out


def mean_endpoint(frame: pd.DataFrame, metric: str, first: int, last: int) -> Endpoint:
    """method -> seed -> mean of metric over steps first..last (every one of them logged)."""
    require_columns(frame, ["method", "seed", "step", metric], "mean endpoint")
    out: Endpoint = {}
    window = frame[frame["step"].between(first, last)]
    for (method, seed), run in window.groupby(["method", "seed"], sort=False):
        values = run[metric].dropna()
        if len(values) != last - first + 1:
            raise ValueError(f"{method} seed {seed}: {len(values)} of steps {first}-{last} log {metric}")
        out.setdefault(str(method), {})[int(seed)] = float(values.mean())
    return out


def comparisons_table(endpoints: dict[str, Endpoint],
                      comparisons: Sequence[tuple[str, str]] = COMPARISONS) -> pd.DataFrame:
    rows = []
    for name, endpoint in endpoints.items():
        for a, b in comparisons:
            if a in endpoint and b in endpoint:
                common = sorted(set(endpoint[a]) & set(endpoint[b]))
                summary = paired_summary({s: endpoint[a][s] for s in common}, {s: endpoint[b][s] for s in common})
                rows.append({"endpoint": name, "comparison": f"{a} - {b}", **summary})
    table = pd.DataFrame(rows)
    return table.round({"mean": 4, "sign_p": 4, "ci_low": 4, "ci_high": 4}) if rows else table


def dara_active_steps(frame: pd.DataFrame, threshold_steps: Endpoint, channel: str,
                      bar: float = ACTIVE_WEIGHT) -> dict[tuple[str, int], int | None]:
    """(method, seed) -> steps before its threshold step with weight/<channel> > bar (None: no weight logged)."""
    column = f"dara/weight/{channel}"
    out = {}
    for (method, seed), run in frame.groupby(["method", "seed"], sort=False):
        logged = run.dropna(subset=[column]) if column in run.columns else run.iloc[0:0]
        before = logged[logged["step"] < threshold_steps[str(method)][int(seed)]]
        out[(str(method), int(seed))] = None if logged.empty else int((before[column] > bar).sum())
    return out


def collapsed_channels(run: pd.DataFrame, channels: Sequence[str], steps_in_a_row: int = COLLAPSE_STEPS) -> list[str]:
    """The channels whose dara/density/<channel> is 0 at ``steps_in_a_row`` consecutive steps or more."""
    zero = run.sort_values("step")[[f"dara/density/{c}" for c in channels]].eq(0).astype(int)
    in_a_row = zero.rolling(steps_in_a_row).min().eq(1).any()  # some window of that many steps all at 0
    return [c for c in channels if in_a_row[f"dara/density/{c}"]]
