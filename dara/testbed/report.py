"""Outputs of a testbed run: per-step CSVs, run logs, per-run outcomes, summary.csv with 95% CIs, curves, a
table; every file is written to a temporary name and moved into place, so a crash never leaves half a file."""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from pathlib import Path

import pandas as pd

from dara.io import METRICS_FILE, atomic_path, atomic_write_json, atomic_write_jsonl
from dara.run_folder import RUN_INFO
from dara.testbed.experiments import ALL_ESTIMATORS, THRESHOLDS, RunResult, Study
from dara.testbed.stats import mean_ci
from tasks.registry import load_ref

PLOT_CURVES = "results.plots:plot_curves"  # by import path: dara sits below results and never imports it
SUMMARY_COLUMNS = ("estimator", "group_size", "metric", "mean", "ci_low", "ci_high", "study", "n_seeds")
STEP_KEYS = ("reward/{c}/mean", "density/{c}", "weight/{c}", "energy_vs_ideal/{c}", "weighted_energy_vs_ideal/{c}",
             "energy_ratio/{c}", "weighted_energy_share/{c}")
STEP_EXTRA = ("response_length/mean", "actor/clip_frac", "actor/entropy")
TABLE_METRICS = ("steps_to_0.8", "steps_to_0.99", "reached_0.99", "format_auc", "final_correctness", "density/format",
                 "weight/format", "energy_vs_ideal/format", "weighted_energy_vs_ideal/format",
                 "weighted_energy_share/format")


def _fmt(value: float) -> str:
    """Five significant digits; an undefined value (no active group that step) is an empty cell."""
    return "" if not math.isfinite(value) else f"{value:.5g}"


def _write_csv(path: Path, header, rows) -> None:
    with atomic_path(path) as tmp, tmp.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)


def write_run_logs(root: Path, results: list[RunResult]) -> None:
    """A run folder per run (metrics.jsonl + run_info.json, as dara.train writes them), so that
    `python -m results thresholds/plot/table <root>` reads the testbed like any training sweep."""
    for res in results:
        c = res.config
        folder = root / res.study / f"{c.estimator}_G{c.group_size}_seed{c.seed}"
        atomic_write_json(folder / RUN_INFO, {"run_name": folder.name, "method": c.estimator, "seed": c.seed,
                                              "group_size": c.group_size, "study": res.study, "task": "testbed"})
        finite = [{k: v for k, v in rec.items() if not isinstance(v, float) or math.isfinite(v)} for rec in res.records]
        atomic_write_jsonl(folder / METRICS_FILE, [{**rec, "step": int(rec["step"])} for rec in finite])


def write_steps(path: Path, study: Study, results: list[RunResult]) -> None:
    """One row per (estimator, G, seed, step) of a study."""
    keys = [k.format(c=c) for c in study.task.channel_names for k in STEP_KEYS] + list(STEP_EXTRA)
    rows = [[r.config.estimator, r.config.group_size, r.config.seed, int(rec["step"]),
             *(_fmt(rec.get(k, math.nan)) for k in keys)] for r in results for rec in r.records]
    _write_csv(path, ["estimator", "group_size", "seed", "step", *keys], rows)


def write_runs(path: Path, results: list[RunResult]) -> None:
    """One row per run with its scalar outcomes (summarize_run)."""
    keys = sorted({k for res in results for k in res.outcome})
    rows = [[r.study, r.config.estimator, r.config.group_size, r.config.seed,
             *(_fmt(r.outcome.get(k, math.nan)) for k in keys)] for r in results]
    _write_csv(path, ["study", "estimator", "group_size", "seed", *keys], rows)


def summary_rows(results: list[RunResult]) -> list[dict[str, object]]:
    """Mean and 95% t-interval over seeds of every outcome, per (study, estimator, G)."""
    cells: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for res in results:
        for key, value in res.outcome.items():
            cells[(res.study, res.config.estimator, res.config.group_size)][key].append(value)
    rows = []
    for (study, estimator, g), metrics in cells.items():
        for metric in sorted(metrics):
            values = [v for v in metrics[metric] if math.isfinite(v)]
            if values:
                mean, low, high = mean_ci(values)
                rows.append({"estimator": estimator, "group_size": g, "metric": metric, "mean": mean,
                             "ci_low": low, "ci_high": high, "study": study, "n_seeds": len(values)})
    return rows


def write_summary(path: Path, rows: list[dict[str, object]]) -> None:
    _write_csv(path, SUMMARY_COLUMNS, ([_fmt(v) if isinstance(v := r[c], float) else v for c in SUMMARY_COLUMNS]
                                       for r in rows))


def format_table(rows: list[dict[str, object]], study: str, metrics=TABLE_METRICS) -> str:
    """A Markdown table of one study: `mean [ci_low, ci_high]` per estimator and group size."""
    index = {(r["estimator"], r["group_size"], r["metric"]): r for r in rows if r["study"] == study}
    order = {name: i for i, name in enumerate(ALL_ESTIMATORS)}  # a custom estimator last
    keys = sorted({(e, g) for e, g, _ in index}, key=lambda k: (k[1], order.get(k[0], len(order))))
    lines = ["| estimator | G | " + " | ".join(metrics) + " |", "|---|---|" + "---|" * len(metrics)]
    for estimator, g in keys:
        cells = []
        for metric in metrics:
            r, d = index.get((estimator, g, metric)), 0 if metric.startswith("steps_to") else 2
            cells.append("-" if r is None else f"{r['mean']:.{d}f} [{r['ci_low']:.{d}f}, {r['ci_high']:.{d}f}]")
        lines.append(f"| {estimator} | {g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_curves(path: Path, study: Study, results: list[RunResult], group_size: int) -> list[Path]:
    """Training curves per estimator with results.plots (median over seeds, min-max band; PNG + PDF):
    every channel's training mean, then the sparse channel's density and weight."""
    sparse = study.task.sparse_channel
    metrics = [f"reward/{c}/mean" for c in study.task.channel_names] + [f"density/{sparse}", f"weight/{sparse}"]
    frame = pd.DataFrame([{**rec, "method": r.config.estimator, "seed": r.config.seed, "group_size": group_size}
                          for r in results if r.config.group_size == group_size for rec in r.records])
    return load_ref(PLOT_CURVES)(frame, metrics, Path(path).with_suffix(""),
                                 thresholds=[f"reward/{sparse}/mean={t}" for t in THRESHOLDS],
                                 title=f"testbed study '{study.name}', G={group_size}, B={study.budget // group_size}, "
                                       f"{study.seeds} seeds (median over seeds, band = min-max)")
