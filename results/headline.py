"""The committed results of a CPU race (recipes/cpu_headline.py, race_format.py, race_length.py):
``python -m results headline RUNS --out results/<race> [--protocol FILE]``, RUNS the race's output root (pilot runs
left out) or its committed ``runs.csv``. Writes runs.csv, thresholds.csv, statistics.csv, summary.md and
headline.png/.pdf (each atomically; what each holds: results/cpu_headline/README.md), with the metric, threshold,
rule, steps, channels and endpoints of the committed ``protocol.json``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

import dara
from dara.io import atomic_write_text
from dara.run_folder import RUN_INFO
from results import plots, race_stats, tables
from results.loaders import RunLogError, find_run_folders, load_runs, require_columns
from results.tables import method_label
from results.thresholds import seed_summary, threshold_steps
from results.variants import BASE_METHOD

log = logging.getLogger(__name__)

# The race's methods in table order, the pilot's run variant (left out) and the committed protocol
# (recipes/cpu_headline.py writes it once from the pilot; its runs and this module read it).
METHODS = ("grpo", "gdpo", "dara_sym", "dara_asym")
PILOT_VARIANT = "pilot"
PROTOCOL_FILE = dara.PROJECT_ROOT / "results" / "cpu_headline" / "protocol.json"
PROTOCOL_KEYS = ("metric", "threshold", "steps", "temperature", "group_size", "prompts_per_step", "save_freq")
CHANNELS = ("format", "correctness")  # the smoke_sparse task's reward channels, in its order (a protocol's default)
SPARSE_CHANNEL = "format"
SECONDARY_STEPS = (1, 20)  # the secondary endpoint's default window: the metric's mean over these steps
NEVER = "-"


class ProtocolError(ValueError):
    """A missing or broken protocol file."""


def step_rule(protocol: dict) -> dict:
    """How a protocol finds a run's threshold step, as keyword arguments of results.thresholds.threshold_steps:
    ``{"rule": "sustained", "window": W, "hold": H}`` when its ``threshold_rule`` is "sustained" (window and hold
    fixed in the protocol: a missing one is a ProtocolError); otherwise ``{"rule": "median"}``, the first step at or
    above the threshold (the format race's ``threshold_rule`` is the text of how its pilot set the threshold)."""
    if protocol.get("threshold_rule") != "sustained":
        return {"rule": "median"}
    missing = [key for key in ("window", "hold") if key not in protocol]
    if missing:
        raise ProtocolError(f"a sustained threshold rule needs its {' and '.join(missing)} in the protocol")
    return {"rule": "sustained", "window": int(protocol["window"]), "hold": int(protocol["hold"])}


def rule_text(rule: dict) -> str:
    """The rule in words: the step at which a curve counts as reaching the threshold."""
    if rule["rule"] != "sustained":
        return "the first step at or above the threshold"
    return (f"the first step whose trailing {rule['window']}-step mean is at or above the threshold and stays "
            f"there at each of the next {rule['hold']} steps")


def load_protocol(path: str | Path = PROTOCOL_FILE) -> dict:
    """The committed protocol; a missing file or key, or a threshold that is no rate, is an error naming it."""
    path = Path(path)
    if not path.is_file():
        raise ProtocolError(f"{path} is missing: each race runs with its committed protocol (restore it from git)")
    protocol = json.loads(path.read_text())
    missing = [key for key in PROTOCOL_KEYS if key not in protocol]
    if missing:
        raise ProtocolError(f"{path} lacks {', '.join(missing)}")
    if not 0.0 < float(protocol["threshold"]) <= 1.0:
        raise ProtocolError(f"{path}: threshold {protocol['threshold']} is not a format rate in (0, 1]")
    return protocol


# ----------------------------------------------------------------------------------- the runs
def is_pilot(run_dir: Path) -> bool:
    """Whether a run folder is one of the pilot's: its run name (run_info.json, else the folder's name)
    carries the variant ``pilot``, or run_info.json records that variant."""
    run_dir = Path(run_dir)
    info_path = run_dir / RUN_INFO
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    name = str(info.get("run_name") or run_dir.name)
    return f"-{PILOT_VARIANT}-" in name or info.get("variant") == PILOT_VARIANT


def _runs_of(part: pd.DataFrame) -> str:
    return ", ".join(sorted(map(str, part["run"].unique())))


def race_frame(run_root: str | Path, methods: Sequence[str], steps: int) -> pd.DataFrame:
    """Every race run below ``run_root`` (pilot runs left out), methods in the order given, steps 1..steps.

    A method without a run, a run with fewer than ``steps`` logged steps, two runs of one method and seed, or
    runs of one method in several configurations (variants) is an error naming the runs."""
    root, methods, steps = Path(run_root), list(methods), int(steps)
    if not root.is_dir():
        raise RunLogError(f"{root}: no such folder (the race's output root, e.g. outputs/cpu_headline)")
    folders = [folder for folder in find_run_folders(root) if not is_pilot(folder)]
    if not folders:
        raise RunLogError(f"{root}: no race run folder (metrics.jsonl) below it; pilot runs are left out")
    frame = load_runs(folders)
    require_columns(frame, ["run", "method", "seed", "step"], "headline")
    if BASE_METHOD in frame.columns:
        variants = frame[frame[BASE_METHOD].isin(methods) & ~frame["method"].isin(methods)]
        if not variants.empty:
            raise RunLogError(f"{root}: runs of one method differ in more than the seed (variants "
                              f"{sorted(variants['method'].unique())}): {_runs_of(variants)}")
    others = sorted(set(frame["method"]) - set(methods))
    if others:
        log.info("headline: leaving out runs of methods %s (not among %s)", others, methods)
    frame = frame[frame["method"].isin(methods)].astype({"seed": int, "step": int})
    duplicated = frame[frame.duplicated(["method", "seed", "step"], keep=False)]
    if not duplicated.empty:
        pairs = "; ".join(f"{method} seed {seed}: {_runs_of(part)}"
                          for (method, seed), part in duplicated.groupby(["method", "seed"]))
        raise RunLogError(f"{root}: several runs of one method and seed ({pairs})")
    return _in_race(frame, methods, steps, root)


def frame_from_runs_csv(path: str | Path, methods: Sequence[str], steps: int) -> pd.DataFrame:
    """A race's committed runs.csv as the frame ``race_frame`` gives, so the tables and statistics can be rebuilt
    without the run folders."""
    frame = pd.read_csv(path)
    require_columns(frame, ["method", "seed", "step"], f"headline {path}")
    frame = frame[frame["method"].isin(methods)].astype({"seed": int, "step": int})
    return _in_race(frame.assign(run=frame["method"] + "-s" + frame["seed"].astype(str)), methods, steps, path)


def _in_race(frame: pd.DataFrame, methods: Sequence[str], steps: int, where) -> pd.DataFrame:
    """The rows at steps 1..steps in method order, then seed and step; a method without a run or a run with fewer
    than ``steps`` logged steps is an error naming ``where`` and the runs."""
    missing = [method for method in methods if method not in set(frame["method"])]
    if missing:
        raise RunLogError(f"{where}: no run of method(s) {', '.join(missing)}")
    in_race = frame[frame["step"].between(1, int(steps))]
    runs = frame[["run", "method", "seed"]].drop_duplicates().set_index("run")
    logged = in_race.groupby("run")["step"].nunique().reindex(sorted(runs.index), fill_value=0)
    short = [f"{run} ({runs.at[run, 'method']} seed {runs.at[run, 'seed']}, {count} of steps 1-{steps} logged)"
             for run, count in logged.items() if count < steps]
    if short:
        raise RunLogError(f"{where}: run(s) with fewer than the protocol's {steps} steps: {', '.join(short)}")
    order = in_race["method"].map({method: index for index, method in enumerate(methods)})
    return in_race.assign(_order=order).sort_values(["_order", "seed", "step"], kind="stable").drop(
        columns="_order").reset_index(drop=True)


# ----------------------------------------------------------------------------------- the tables
def runs_table(frame: pd.DataFrame, channels: Sequence[str] = CHANNELS) -> pd.DataFrame:
    """runs.csv: method, seed, step, the reward means, then density and weight per channel; one row per run
    and step in the frame's order (a weight column a method does not log stays empty)."""
    density = [f"dara/density/{channel}" for channel in channels]
    rewards = [f"reward/{channel}/mean" for channel in channels]
    require_columns(frame, ["method", "seed", "step", *rewards, *density], "headline runs.csv")
    columns = ["method", "seed", "step", *rewards]
    for channel in channels:
        columns += [f"dara/density/{channel}", f"dara/weight/{channel}"]
    table = frame.reindex(columns=columns)  # a weight no run logs: a column of NaN
    return table.reset_index(drop=True)


def thresholds_table(frame: pd.DataFrame, metric: str, threshold: float, steps: int | None = None,
                     channels: Sequence[str] = CHANNELS, sparse_channel: str = SPARSE_CHANNEL,
                     rule: dict | None = None) -> pd.DataFrame:
    """thresholds.csv: method, seed, the run's threshold step under ``rule`` (``step_rule``'s form; default: the
    first step with ``metric`` >= ``threshold``; <NA>: never), the steps before it with DARA's ``sparse_channel``
    weight above 1.05 (empty: no weight logged; a run that never reached it counts all its steps) and the
    channels that collapsed (";"-joined)."""
    rule = rule or {"rule": "median"}
    per_seed = threshold_steps(frame, metric, float(threshold), per_seed=True, **rule)
    steps = int(steps if steps is not None else frame["step"].max())
    reached = race_stats.threshold_endpoint(frame, metric, float(threshold), steps, **rule)
    active = race_stats.dara_active_steps(frame, reached, sparse_channel)
    runs = dict(iter(frame.groupby(["method", "seed"], sort=False)))
    table = per_seed[["method", "seed", "step"]].copy()
    table["dara_active_steps"] = pd.array([active[(m, int(s))] for m, s in zip(table["method"], table["seed"],
                                                                                strict=True)], dtype="Int64")
    table["collapsed"] = [";".join(race_stats.collapsed_channels(runs[(m, s)], channels))
                          for m, s in zip(table["method"], table["seed"], strict=True)]
    return table


def statistics_table(frame: pd.DataFrame, metric: str, threshold: float, steps: int,
                     secondary_steps: Sequence[int] = SECONDARY_STEPS, rule: dict | None = None) -> pd.DataFrame:
    """statistics.csv: the paired comparisons on the primary endpoint (threshold step under ``rule``, default
    first reaching) and the secondary one (the metric's mean over ``secondary_steps``, clipped to the race's
    steps)."""
    first, last = int(secondary_steps[0]), min(int(secondary_steps[1]), int(steps))
    reached = race_stats.threshold_endpoint(frame, metric, float(threshold), int(steps), **(rule or {}))
    return race_stats.comparisons_table({
        "threshold step": reached,
        f"mean {metric} steps {first}-{last}": race_stats.mean_endpoint(frame, metric, first, last)})


def _step_text(step) -> str:
    return NEVER if pd.isna(step) else str(int(step))


def summary_table(frame: pd.DataFrame, metric: str, threshold: float, rule: dict | None = None) -> pd.DataFrame:
    """Per method: the median-curve step, the per-seed steps as text (seed order, "-" for never), how many
    seeds reached the threshold of how many runs, and the min, max and median step over those that did; each
    step under ``rule`` (``step_rule``'s form; default: the first step at or above the threshold)."""
    rule = rule or {"rule": "median"}
    per_seed = threshold_steps(frame, metric, float(threshold), per_seed=True, **rule)
    curve = threshold_steps(frame, metric, float(threshold), **rule).set_index("method")["step"]
    stats = seed_summary(per_seed).set_index("method")
    rows = []
    for method, part in per_seed.groupby("method", sort=False):
        rows.append({"method": method, "median_curve_step": curve[method],
                     "seed_steps": ", ".join(_step_text(step) for step in part.sort_values("seed")["step"]),
                     "reached": int(stats.at[method, "reached"]), "runs": int(stats.at[method, "runs"]),
                     "step_min": stats.at[method, "step_min"], "step_max": stats.at[method, "step_max"],
                     "step_median": stats.at[method, "step_median"]})
    table = pd.DataFrame(rows)
    for column in ("median_curve_step", "step_min", "step_max"):
        table[column] = table[column].astype("Int64")
    return table


def markdown_table(table: pd.DataFrame) -> str:
    """A frame as a markdown table ("-" for an empty cell, floats without trailing zeros)."""
    return tables.markdown_table(table, empty=NEVER, float_format="{:g}")


# ----------------------------------------------------------------------------------- the figure
def _band_panel(ax, frame: pd.DataFrame, column: str, ylabel: str) -> int:
    """Per method that logs ``column``: median over seeds (line), min-max band. Returns the methods drawn."""
    drawn = 0
    for index, (method, runs) in enumerate(frame.groupby("method", sort=False)):
        runs = runs.dropna(subset=[column]) if column in runs.columns else runs.iloc[0:0]
        if runs.empty:
            continue
        colour = plots.METHOD_COLOURS.get(str(method), f"C{index % 10}")
        plots.draw_seed_band(ax, runs, column, colour, method_label(method))
        drawn += 1
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    return drawn


def plot(frame: pd.DataFrame, metric: str, threshold: float, out_prefix: str | Path,
         channel: str = SPARSE_CHANNEL) -> list[Path]:
    """One figure, three stacked panels over the steps: (a) the metric with the threshold (dashed),
    (b) the sparse channel's density pi_channel, (c) its weight w_channel (the methods that log it).
    Writes PREFIX.png and PREFIX.pdf atomically; returns their paths."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(3, 1, figsize=(7.0, 9.0), sharex=True)
    _band_panel(axes[0], frame, metric, metric)
    axes[0].axhline(float(threshold), color="black", ls="--", lw=0.9, label=f"threshold {threshold:g}")
    axes[0].set_title(f"(a) {metric}: median over seeds, band = min-max", fontsize=9)
    axes[0].legend(fontsize=7, loc="best")
    _band_panel(axes[1], frame, f"dara/density/{channel}", f"active-group density $\\pi_{{{channel}}}$")
    axes[1].set_title(f"(b) dara/density/{channel}", fontsize=9)
    if not _band_panel(axes[2], frame, f"dara/weight/{channel}", f"weight $w_{{{channel}}}$"):
        axes[2].text(0.5, 0.5, f"no method logs dara/weight/{channel}", ha="center", va="center",
                     transform=axes[2].transAxes, fontsize=8)
    else:
        axes[2].legend(fontsize=7)
    axes[2].set_title(f"(c) dara/weight/{channel} (the methods that log it)", fontsize=9)
    axes[2].set_xlabel("step")
    axes[2].xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    return plots.save_figure(fig, out_prefix)


# ----------------------------------------------------------------------------------- everything
def summary_markdown(summary: pd.DataFrame, metric: str, threshold: float, steps: int, protocol_path,
                     statistics: pd.DataFrame | None = None, rule: dict | None = None) -> str:
    """summary.md: the protocol's metric, threshold and steps, the rules, the per-method table, then the
    paired statistics."""
    if rule is None or rule["rule"] == "median":
        curve = "the first step at which the median over seeds reaches the threshold"
        per_seed = "each seed's first step at or above the threshold"
    else:
        curve, per_seed = f"on the median over seeds, {rule_text(rule)}", f"on each seed's curve, {rule_text(rule)}"
    paired = "" if statistics is None or statistics.empty else (
        "\n## Paired by seed (A - B)\n\n- threshold step: a run that never reached it counts as "
        f"{steps + 1}; lower/higher: seeds where A's value is below/above B's (for the threshold step, lower is "
        "faster); sign_p: two-sided exact sign test, ties dropped; ci: 95% percentile bootstrap interval of the "
        "mean over seeds (10,000 resamples)\n\n" + markdown_table(statistics))
    return (
        f"# {Path(str(protocol_path)).parent.name} race: threshold steps\n\n"
        f"- metric: `{metric}`, threshold: {threshold:g} (>=), steps 1-{steps} "
        f"(protocol: `{protocol_path}`)\n"
        f"- median_curve_step: {curve}\n"
        f"- seed_steps: {per_seed}, in seed order (`{NEVER}`: never "
        "within the steps); reached: seeds that did, of runs; step_min/max/median: over those seeds\n\n"
        + markdown_table(summary) + paired
    )


def write_headline(run_root: str | Path, protocol_path: str | Path | None, out_dir: str | Path,
                   methods: Sequence[str] | None = None) -> list[Path]:
    """Load the race, write runs.csv, thresholds.csv, statistics.csv, summary.md and headline.png/.pdf into
    ``out_dir`` (each atomically), print one line per file and a per-method summary; returns the paths written.
    The protocol is ``protocol_path``, else ``out_dir``/protocol.json (the race's committed one)."""
    out = Path(out_dir)
    protocol_path = Path(protocol_path) if protocol_path is not None else out / "protocol.json"
    shown = protocol_path.absolute()  # the committed summary names no machine's path
    shown = shown.relative_to(dara.PROJECT_ROOT) if shown.is_relative_to(dara.PROJECT_ROOT) else shown
    protocol = load_protocol(protocol_path)
    metric, threshold, steps = str(protocol["metric"]), float(protocol["threshold"]), int(protocol["steps"])
    channels = tuple(protocol.get("channels", CHANNELS))
    sparse = str(protocol.get("sparse_channel", SPARSE_CHANNEL))
    methods = list(methods or protocol.get("methods", METHODS))
    if Path(run_root).suffix == ".csv":  # a committed runs.csv: the tables again without the run folders
        frame = frame_from_runs_csv(run_root, methods, steps)
    else:
        frame = race_frame(run_root, methods, steps)
    require_columns(frame, [metric], "headline")
    rule = step_rule(protocol)
    summary = summary_table(frame, metric, threshold, rule)
    statistics = statistics_table(frame, metric, threshold, steps, protocol.get("secondary_steps", SECONDARY_STEPS),
                                  rule)
    csv = {"runs.csv": runs_table(frame, channels),
           "thresholds.csv": thresholds_table(frame, metric, threshold, steps, channels, sparse, rule),
           "statistics.csv": statistics}
    written = []
    for name, table in csv.items():
        atomic_write_text(out / name, table.to_csv(index=False, lineterminator="\n"))
        written.append(out / name)
    atomic_write_text(out / "summary.md", summary_markdown(summary, metric, threshold, steps, shown, statistics,
                                                           rule))
    written.append(out / "summary.md")
    written += plot(frame, metric, threshold, out / "headline", sparse)
    for path in written:
        print(f"wrote {path}")
    print(f"{metric} >= {threshold:g} within {steps} steps ({rule_text(rule)}):")
    for row in summary.itertuples(index=False):
        print(f"  {row.method:10s} median-curve step {_step_text(row.median_curve_step):>3s}, "
              f"reached {row.reached}/{row.runs} (per seed: {row.seed_steps})")
    for row in statistics.itertuples(index=False):
        print(f"  {row.endpoint}: {row.comparison} mean {row.mean:+.3g} [{row.ci_low:+.3g}, {row.ci_high:+.3g}], "
              f"lower/higher/tied {row.lower}/{row.higher}/{row.tied}, sign p {row.sign_p:.3g}")
    return written
