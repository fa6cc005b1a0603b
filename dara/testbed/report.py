"""Outputs of a testbed run: per-step CSVs, run logs, per-run outcomes, summary.csv with 95% CIs, plots, a table.

Every file is written to a temporary name and moved into place, so a crash never leaves half a file.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from dara.io import METRICS_FILE, atomic_path, atomic_write_json, atomic_write_jsonl
from dara.run_folder import RUN_INFO
from dara.testbed.experiments import ALL_ESTIMATORS, THRESHOLDS, RunResult, Study
from dara.testbed.stats import mean_ci
from tasks.registry import load_ref

# The results layer's curve plot, named by import path: dara sits below results and never imports it.
PLOT_CURVES = "results.plots:plot_curves"

SUMMARY_COLUMNS = ("estimator", "group_size", "metric", "mean", "ci_low", "ci_high", "study", "n_seeds")
STEP_KEYS = (
    "reward/{c}/mean",
    "density/{c}",
    "weight/{c}",
    "energy_vs_ideal/{c}",
    "weighted_energy_vs_ideal/{c}",
    "energy_ratio/{c}",
    "weighted_energy_share/{c}",
)
STEP_EXTRA = ("response_length/mean", "actor/clip_frac", "actor/entropy")


def _fmt(value: float) -> str:
    """Five significant digits; an undefined value (no active group that step) is an empty cell."""
    return "" if not math.isfinite(value) else f"{value:.5g}"


def _write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    with atomic_path(path) as tmp, tmp.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)


def run_folder(root: Path, res: RunResult) -> Path:
    return root / res.study / f"{res.config.estimator}_G{res.config.group_size}_seed{res.config.seed}"


def write_run_logs(root: Path, results: list[RunResult]) -> None:
    """A run folder per run (metrics.jsonl + run_info.json, as dara.train writes them), so that
    `python -m results thresholds/plot/table <root>` reads the testbed like any training sweep."""
    for res in results:
        folder = run_folder(root, res)
        info = {"run_name": folder.name, "method": res.config.estimator, "seed": res.config.seed,
                "group_size": res.config.group_size, "study": res.study, "task": "testbed"}
        atomic_write_json(folder / RUN_INFO, info)
        finite = [{k: v for k, v in rec.items() if not isinstance(v, float) or math.isfinite(v)} for rec in res.records]
        atomic_write_jsonl(folder / METRICS_FILE, [{**rec, "step": int(rec["step"])} for rec in finite])


def write_steps(path: Path, study: Study, results: list[RunResult]) -> None:
    """One row per (estimator, G, seed, step) of a study."""
    keys = [k.format(c=c) for c in study.task.channel_names for k in STEP_KEYS] + list(STEP_EXTRA)
    rows = []
    for res in results:
        for rec in res.records:
            cells = [_fmt(rec.get(k, math.nan)) for k in keys]
            rows.append([res.config.estimator, res.config.group_size, res.config.seed, int(rec["step"]), *cells])
    _write_csv(path, ["estimator", "group_size", "seed", "step", *keys], rows)


def write_runs(path: Path, results: list[RunResult]) -> None:
    """One row per run with its scalar outcomes (summarize_run)."""
    keys = sorted({k for res in results for k in res.outcome})
    rows = [
        [res.study, res.config.estimator, res.config.group_size, res.config.seed]
        + [_fmt(res.outcome.get(k, math.nan)) for k in keys]
        for res in results
    ]
    _write_csv(path, ["study", "estimator", "group_size", "seed", *keys], rows)


def summary_rows(results: list[RunResult]) -> list[dict[str, object]]:
    """Mean and 95% t-interval over seeds of every outcome, per (study, estimator, G)."""
    cells: dict[tuple[str, str, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for res in results:
        bucket = cells[(res.study, res.config.estimator, res.config.group_size)]
        for key, value in res.outcome.items():
            bucket[key].append(value)
    rows = []
    for (study, estimator, g), metrics in cells.items():
        for metric in sorted(metrics):
            values = [v for v in metrics[metric] if math.isfinite(v)]
            if not values:
                continue
            mean, low, high = mean_ci(values)
            rows.append(
                {
                    "estimator": estimator,
                    "group_size": g,
                    "metric": metric,
                    "mean": mean,
                    "ci_low": low,
                    "ci_high": high,
                    "study": study,
                    "n_seeds": len(values),
                }
            )
    return rows


def write_summary(path: Path, rows: list[dict[str, object]]) -> None:
    def cell(v: object) -> object:
        return _fmt(v) if isinstance(v, float) else v

    _write_csv(path, SUMMARY_COLUMNS, ([cell(r[c]) for c in SUMMARY_COLUMNS] for r in rows))


TABLE_METRICS = (
    "steps_to_0.8",
    "steps_to_0.99",
    "reached_0.99",
    "format_auc",
    "final_correctness",
    "density/format",
    "weight/format",
    "energy_vs_ideal/format",
    "weighted_energy_vs_ideal/format",
    "weighted_energy_share/format",
)


def format_table(rows: list[dict[str, object]], study: str, metrics: Sequence[str] = TABLE_METRICS) -> str:
    """A Markdown table of one study: `mean [ci_low, ci_high]` per estimator and group size."""
    index = {(r["estimator"], r["group_size"], r["metric"]): r for r in rows if r["study"] == study}
    keys = sorted({(e, g) for e, g, _ in index}, key=lambda k: (k[1], _estimator_order(k[0])))
    lines = ["| estimator | G | " + " | ".join(metrics) + " |", "|---|---|" + "---|" * len(metrics)]
    for estimator, g in keys:
        cells = []
        for metric in metrics:
            r = index.get((estimator, g, metric))
            if r is None:
                cells.append("-")
            else:
                digits = 0 if metric.startswith("steps_to") else 2
                cells.append(f"{r['mean']:.{digits}f} [{r['ci_low']:.{digits}f}, {r['ci_high']:.{digits}f}]")
        lines.append(f"| {estimator} | {g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _estimator_order(name: str) -> int:
    """Position in the library's canonical order (unknown names, e.g. a custom estimator, last)."""
    return ALL_ESTIMATORS.index(name) if name in ALL_ESTIMATORS else len(ALL_ESTIMATORS)


# ---------------------------------------------------------------- plots


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    _pyplot().close(fig)


def curve_frame(results: list[RunResult]) -> pd.DataFrame:
    """The runs' per-step records as the long frame `results.loaders` builds from run logs."""
    rows = [{**rec, "method": r.config.estimator, "seed": r.config.seed, "group_size": r.config.group_size}
            for r in results for rec in r.records]
    return pd.DataFrame(rows)


def plot_curves(path: Path, study: Study, results: list[RunResult], group_size: int) -> list[Path]:
    """Training curves per estimator with results.plots (median over seeds, min-max band; PNG + PDF).

    Panels: every channel's training mean, then the sparse channel's density and weight.
    """
    plot_run_curves = load_ref(PLOT_CURVES)
    sparse = study.task.sparse_channel
    metrics = [f"reward/{c}/mean" for c in study.task.channel_names] + [f"density/{sparse}", f"weight/{sparse}"]
    runs = [r for r in results if r.config.group_size == group_size]
    b = study.budget // group_size
    return plot_run_curves(curve_frame(runs), metrics, Path(path).with_suffix(""),
                           thresholds=[f"reward/{sparse}/mean={t}" for t in THRESHOLDS],
                           title=f"testbed study '{study.name}', G={group_size}, B={b}, {study.seeds} seeds "
                                 "(median over seeds, band = min-max)")


def plot_steps_to(path: Path, rows: list[dict[str, object]], study: str) -> None:
    """steps_to_0.8 and steps_to_0.99 per estimator with 95% intervals."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), sharey=True)
    metrics = [f"steps_to_{t:g}" for t in THRESHOLDS] + ["final_correctness"]
    for ax, metric in zip(axes, metrics, strict=True):
        picked = [r for r in rows if r["study"] == study and r["metric"] == metric]
        picked.sort(key=lambda r: _estimator_order(str(r["estimator"])))
        names = [str(r["estimator"]) for r in picked]
        means = [float(r["mean"]) for r in picked]
        err = [[m - float(r["ci_low"]) for m, r in zip(means, picked, strict=True)],
               [float(r["ci_high"]) - m for m, r in zip(means, picked, strict=True)]]  # fmt: skip
        ax.barh(names, means, xerr=err, color="tab:blue", alpha=0.7, capsize=3)
        ax.set_title(metric + (" (lower is faster; never = budget)" if metric.startswith("steps") else ""))
        ax.invert_yaxis()
    fig.suptitle(f"testbed study '{study}': mean over seeds with 95% intervals")
    _save(fig, path)


def plot_group_size(path: Path, rows: list[dict[str, object]], studies: Sequence[str]) -> None:
    """The fixed-budget group-size study: speed, density and final correctness against G."""
    plt = _pyplot()
    metrics = ["steps_to_0.8", "steps_to_0.99", "density/format", "final_correctness"]
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.2))
    picked = [r for r in rows if r["study"] in studies]
    estimators = sorted({str(r["estimator"]) for r in rows if r["study"] == studies[-1]}, key=_estimator_order)
    colours = plt.get_cmap("tab10")
    for ax, metric in zip(axes, metrics, strict=True):
        for estimator in estimators:
            pts = sorted(
                (int(r["group_size"]), float(r["mean"]), float(r["ci_low"]), float(r["ci_high"]))
                for r in picked
                if r["estimator"] == estimator and r["metric"] == metric
            )
            if not pts:
                continue
            gs = [p[0] for p in pts]
            means = [p[1] for p in pts]
            err = [[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]]
            colour = colours(_estimator_order(estimator) % 10)
            ax.errorbar(gs, means, yerr=err, marker="o", capsize=3, label=estimator, color=colour)
        ax.set_xscale("log", base=2)
        all_gs = sorted({int(r["group_size"]) for r in picked})
        ax.set_xticks(all_gs, [str(g) for g in all_gs])
        ax.set_xlabel("group size G (B = budget / G)")
        ax.set_title(metric)
    axes[0].legend(fontsize=8)
    fig.suptitle("fixed budget of responses per step: larger groups raise density (95% intervals over seeds)")
    _save(fig, path)


def plot_energy(path: Path, rows: list[dict[str, object]], study: str, channels: Sequence[str]) -> None:
    """Energy per channel against B * pi * (G - 1): unweighted (1.0 under GDPO) and after weighting."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=False)
    estimators = sorted({str(r["estimator"]) for r in rows if r["study"] == study}, key=_estimator_order)
    width = 0.8 / len(channels)
    titles = {
        "energy_vs_ideal": "E_k / (B pi_k (G-1)): 1.0 = ideal GDPO normalisation",
        "weighted_energy_share": "weighted energy / largest channel's (1.0 = matched)",
    }
    for ax, key in zip(axes, titles, strict=True):
        for k, channel in enumerate(channels):
            index = {r["estimator"]: r for r in rows if r["study"] == study and r["metric"] == f"{key}/{channel}"}
            xs, means, err_lo, err_hi = [], [], [], []
            for i, estimator in enumerate(estimators):
                r = index.get(estimator)
                if r is None:
                    continue
                xs.append(i + (k - (len(channels) - 1) / 2) * width)
                means.append(float(r["mean"]))
                err_lo.append(float(r["mean"]) - float(r["ci_low"]))
                err_hi.append(float(r["ci_high"]) - float(r["mean"]))
            ax.bar(xs, means, width, yerr=[err_lo, err_hi], capsize=2, label=channel)
        ax.axhline(1.0, color="grey", ls=":", lw=0.8)
        ax.set_xticks(range(len(estimators)))
        ax.set_xticklabels(estimators, rotation=40, ha="right")
        ax.set_title(f"{key}: {titles[key]}", fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle(f"testbed study '{study}': advantage energy per channel (mean over steps, 95% intervals over seeds)")
    _save(fig, path)
