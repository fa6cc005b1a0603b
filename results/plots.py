"""Figures as PNG and PDF (matplotlib Agg): training curves with seed bands, DARA density and weight per channel
(ours ``dara/density/<c>``, ``dara/weight/<c>``; the authors' ``dara/pi_<c>``, ``dara/w_<c>``), checkpoint curves.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from dara.io import atomic_path  # noqa: E402
from results.loaders import require_columns  # noqa: E402
from results.tables import method_label  # noqa: E402
from results.variants import check_one_configuration  # noqa: E402

METHOD_COLOURS = {"grpo": "#7f7f7f", "gdpo": "#1f77b4", "dara": "#d62728", "dara_sym": "#d62728",
                  "dara_asym": "#ff7f0e", "dvao": "#2ca02c", "gd2po_hard": "#9467bd", "gd2po_snr": "#8c564b",
                  "gdpo_saw": "#17becf", "saw": "#17becf", "sa_mrpo": "#e377c2", "static": "#bcbd22",
                  "rvpo": "#8c564b", "base": "#000000"}
_CHANNEL_PATTERN = re.compile(r"^dara/(?:(?P<kind>density|weight)/|(?P<short>pi|w)_)(?P<c>.+)$")


def method_colour(method: str, index: int) -> str:
    return METHOD_COLOURS.get(str(method), f"C{index % 10}")


def save_figure(fig, out_prefix: str | Path) -> list[Path]:
    prefix = Path(out_prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    written = []
    for ext in ("png", "pdf"):
        target = prefix.with_name(prefix.name + f".{ext}")
        with atomic_path(target) as tmp:
            fig.savefig(tmp, format=ext, dpi=150, bbox_inches="tight")
        written.append(target)
    plt.close(fig)
    return written


def _panels(groups: list, n_cols: int):
    return plt.subplots(max(1, len(groups)), n_cols, figsize=(4.2 * n_cols, 3.2 * max(1, len(groups))), squeeze=False)


def _group_items(frame: pd.DataFrame, group_by: Sequence[str]):
    if not group_by:
        return [("", frame)]
    return [(", ".join(f"{c}={v}" for c, v in zip(group_by, key, strict=True)), part)
            for key, part in frame.groupby(list(group_by), sort=False, dropna=False)]


def draw_seed_band(ax, runs: pd.DataFrame, metric: str, colour: str, name: str) -> None:
    stats = runs.groupby("step")[metric].agg(["median", "min", "max"])
    n = int(runs["seed"].nunique()) if "seed" in runs.columns else 1
    ax.plot(stats.index, stats["median"], color=colour, lw=1.5, label=f"{name} (n={n})")
    if n > 1:
        ax.fill_between(stats.index, stats["min"], stats["max"], color=colour, alpha=0.15, lw=0)


def label_panel(ax, title: str, ylabel: str, xlabel: str | None = "step") -> None:
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)


def plot_curves(frame: pd.DataFrame, metrics: Sequence[str], out_prefix: str | Path, *, group_by: Sequence[str] = (),
                thresholds: Sequence[str | float] = (),
                crossings: tuple[str, float, pd.DataFrame] | None = None,
                title: str = "median over seeds, band = min-max") -> list[Path]:
    """Rows = groups, columns = metrics; per method the seed median and min-max band. ``thresholds``: lines ``X`` or
    ``METRIC=X``; ``crossings`` (metric, threshold, its threshold_steps table): each method's crossing marked."""
    lines = parse_threshold_lines(thresholds, metrics)
    require_columns(frame, ["method", "step", *metrics, *group_by], "plot curves")
    check_one_configuration(frame, [*group_by, "method"], "plot curves")
    items = _group_items(frame, group_by)
    fig, axes = _panels(items, len(metrics))
    for row, (label, part) in enumerate(items):
        for col, metric in enumerate(metrics):
            ax = axes[row][col]
            marked = crossings is not None and metric == crossings[0]
            reached = []
            for i, (method, runs) in enumerate(part.dropna(subset=[metric]).groupby("method", sort=False)):
                draw_seed_band(ax, runs, metric, method_colour(method, i), method_label(method))
                step = _crossing_step(crossings[2], part, group_by, method) if marked else None
                if step is not None:
                    ax.axvline(step, color=method_colour(method, i), ls="--", lw=0.8)
                    ax.plot([step], [crossings[1]], marker="o", color=method_colour(method, i), ms=5)
                    reached.append(f"{method} {step}")
            for level in lines.get(metric, []) + ([crossings[1]] if marked else []):
                ax.axhline(level, color="black", ls=":", lw=0.8)
            if marked:
                ax.text(0.98, 0.03, f"reaches {crossings[1]:g} at step:\n" + ("\n".join(reached) or "never"),
                        transform=ax.transAxes, ha="right", va="bottom", fontsize=7,
                        bbox={"facecolor": "white", "alpha": 0.8, "lw": 0})
            label_panel(ax, f"{label}  {metric}".strip(), metric)
        axes[row][-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out_prefix)


def _crossing_step(steps: pd.DataFrame, part: pd.DataFrame, group_by: Sequence[str], method) -> int | None:
    mask = steps["method"] == method
    for column in group_by:
        mask &= steps[column].astype(str) == str(part[column].iloc[0])
    found = pd.to_numeric(steps.loc[mask, "step"], errors="coerce").dropna()
    return int(found.iloc[0]) if len(found) else None


def parse_threshold_lines(specs: Sequence[str | float], metrics: Sequence[str]) -> dict[str, list[float]]:
    lines: dict[str, list[float]] = {m: [] for m in metrics}
    for spec in specs:
        metric, sep, level = str(spec).rpartition("=")
        if sep and metric not in lines:
            raise ValueError(f"threshold {spec!r} names {metric!r}, which is not among the plotted metrics {list(metrics)}")
        for m in [metric] if sep else metrics:
            lines[m].append(float(level))
    return lines


def channel_columns(frame: pd.DataFrame) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {"density": {}, "weight": {}}
    for column in frame.columns:
        if match := _CHANNEL_PATTERN.match(str(column)):
            kind = match["kind"] or {"pi": "density", "w": "weight"}[match["short"]]
            found[kind].setdefault(match["c"], column)
    return found


def plot_channels(frame: pd.DataFrame, out_prefix: str | Path, *, group_by: Sequence[str] = ()) -> list[Path]:
    """Rows = groups x methods that log DARA channels; columns = density, weight; one line per channel."""
    columns = channel_columns(frame)
    if not columns["density"] and not columns["weight"]:
        raise ValueError("plot channels: no dara/density/<c>, dara/weight/<c> (or dara/pi_<c>, dara/w_<c>) columns")
    logged = [c for kind in columns.values() for c in kind.values()]
    frame = frame.dropna(subset=logged, how="all")
    check_one_configuration(frame, [*group_by, "method"], "plot channels")
    items = [(f"{label} {method_label(method)}".strip(), runs) for label, part in _group_items(frame, group_by)
             for method, runs in part.groupby("method", sort=False)]
    fig, axes = _panels(items, 2)
    for row, (label, runs) in enumerate(items):
        for col, kind in enumerate(("density", "weight")):
            ax = axes[row][col]
            for i, (channel, column) in enumerate(sorted(columns[kind].items())):
                draw_seed_band(ax, runs.dropna(subset=[column]), column, f"C{i}", channel)
            ylabel = "active-group density $\\pi_k$" if kind == "density" else "weight $w_k$"
            label_panel(ax, f"{label}: {kind}", ylabel)
            ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, out_prefix)


def plot_checkpoints(table: pd.DataFrame, metrics: Sequence[str], out_prefix: str | Path, *,
                     group_by: Sequence[str] = ()) -> list[Path]:
    """Checkpoint curves from a per-(method, step) table: mean over seeds, band +-1 sd."""
    require_columns(table, ["method", "step", *group_by] + [f"{m}_mean" for m in metrics], "plot checkpoints")
    items = _group_items(table, group_by)
    fig, axes = _panels(items, len(metrics))
    for row, (label, part) in enumerate(items):
        for col, metric in enumerate(metrics):
            ax = axes[row][col]
            for i, (method, rows) in enumerate(part.groupby("method", sort=False)):
                rows = rows.sort_values("step")
                mean = rows[f"{metric}_mean"].astype(float)
                sd = rows[f"{metric}_sd"].astype(float).fillna(0.0) if f"{metric}_sd" in rows else 0.0 * mean
                colour = method_colour(method, i)
                ax.plot(rows["step"], mean, marker="o", ms=3, color=colour, lw=1.5,
                        label=method_label(method))
                ax.fill_between(rows["step"], mean - sd, mean + sd, color=colour, alpha=0.15, lw=0)
            label_panel(ax, f"{label}  {metric}".strip(), metric, "checkpoint step")
        axes[row][-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    fig.tight_layout()
    return save_figure(fig, out_prefix)
