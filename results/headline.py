"""``python -m results headline RUNS --out results/<race> [--protocol FILE]``: a CPU race's committed files (runs.csv,
thresholds.csv, statistics.csv, summary.md, headline.png/.pdf; results/cpu_headline/README.md) from RUNS, its output
root (pilot runs left out) or its runs.csv, under the settings of its committed ``protocol.json``."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

import dara
from dara.io import atomic_write_text
from results import plots, race_stats, tables
from results.loaders import RunLogError, find_run_folders, load_runs, require_columns, run_info
from results.tables import method_label
from results.thresholds import seed_summary, threshold_steps
from results.variants import BASE_METHOD

log = logging.getLogger(__name__)
METHODS = ("grpo", "gdpo", "dara_sym", "dara_asym")  # table order when the protocol names none
PILOT_VARIANT = "pilot"  # the pilot's runs carry this variant and are left out
PROTOCOL_KEYS = ("metric", "threshold", "steps", "temperature", "group_size", "prompts_per_step", "save_freq")
CHANNELS = ("format", "correctness")  # the smoke_sparse task's channels, in its order (a protocol's default)
SPARSE_CHANNEL = "format"
SECONDARY_STEPS = (1, 20)  # the secondary endpoint: the metric's mean over these steps
NEVER = "-"


class ProtocolError(ValueError):
    pass


def step_rule(protocol: dict) -> dict:
    """A protocol's rule as keyword arguments of results.thresholds.threshold_steps (the format race's
    ``threshold_rule`` is prose: median)."""
    if protocol.get("threshold_rule") != "sustained":
        return {"rule": "median"}
    if missing := [key for key in ("window", "hold") if key not in protocol]:
        raise ProtocolError(f"a sustained threshold rule needs its {' and '.join(missing)} in the protocol")
    return {"rule": "sustained", "window": int(protocol["window"]), "hold": int(protocol["hold"])}


def rule_text(rule: dict) -> str:
    if rule["rule"] != "sustained":
        return "the first step at or above the threshold"
    return (f"the first step whose trailing {rule['window']}-step mean is at or above the threshold and stays "
            f"there at each of the next {rule['hold']} steps")


def load_protocol(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ProtocolError(f"{path} is missing: each race runs with its committed protocol (restore it from git)")
    protocol = json.loads(path.read_text())
    if missing := [key for key in PROTOCOL_KEYS if key not in protocol]:
        raise ProtocolError(f"{path} lacks {', '.join(missing)}")
    if not 0.0 < float(protocol["threshold"]) <= 1.0:
        raise ProtocolError(f"{path}: threshold {protocol['threshold']} is not a format rate in (0, 1]")
    return protocol


def is_pilot(run_dir: Path) -> bool:
    info = run_info(run_dir)
    return f"-{PILOT_VARIANT}-" in str(info.get("run_name") or Path(run_dir).name) or info.get("variant") == PILOT_VARIANT


def _runs_of(part: pd.DataFrame) -> str:
    return ", ".join(sorted(map(str, part["run"].unique())))


def race_frame(run_root: str | Path, methods: Sequence[str], steps: int) -> pd.DataFrame:
    """Every race run below ``run_root`` but the pilot's; variants of a method or two runs of one seed are errors."""
    root, methods = Path(run_root), list(methods)
    if not root.is_dir():
        raise RunLogError(f"{root}: no such folder (the race's output root, e.g. outputs/cpu_headline)")
    if not (folders := [folder for folder in find_run_folders(root) if not is_pilot(folder)]):
        raise RunLogError(f"{root}: no race run folder (metrics.jsonl) below it; pilot runs are left out")
    frame = load_runs(folders)
    require_columns(frame, ["run", "method", "seed", "step"], "headline")
    if BASE_METHOD in frame.columns:
        variants = frame[frame[BASE_METHOD].isin(methods) & ~frame["method"].isin(methods)]
        if not variants.empty:
            raise RunLogError(f"{root}: runs of one method differ in more than the seed (variants "
                              f"{sorted(variants['method'].unique())}): {_runs_of(variants)}")
    if others := sorted(set(frame["method"]) - set(methods)):
        log.info("headline: leaving out runs of methods %s (not among %s)", others, methods)
    frame = frame[frame["method"].isin(methods)].astype({"seed": int, "step": int})
    duplicated = frame[frame.duplicated(["method", "seed", "step"], keep=False)]
    if not duplicated.empty:
        pairs = "; ".join(f"{method} seed {seed}: {_runs_of(part)}"
                          for (method, seed), part in duplicated.groupby(["method", "seed"]))
        raise RunLogError(f"{root}: several runs of one method and seed ({pairs})")
    return _in_race(frame, methods, int(steps), root)


def frame_from_runs_csv(path: str | Path, methods: Sequence[str], steps: int) -> pd.DataFrame:
    frame = pd.read_csv(path)
    require_columns(frame, ["method", "seed", "step"], f"headline {path}")
    frame = frame[frame["method"].isin(methods)].astype({"seed": int, "step": int})
    return _in_race(frame.assign(run=frame["method"] + "-s" + frame["seed"].astype(str)), methods, int(steps), path)


def _in_race(frame: pd.DataFrame, methods: Sequence[str], steps: int, where) -> pd.DataFrame:
    """Steps 1..steps in method, seed and step order; a missing method or a short run is an error."""
    if missing := [method for method in methods if method not in set(frame["method"])]:
        raise RunLogError(f"{where}: no run of method(s) {', '.join(missing)}")
    in_race = frame[frame["step"].between(1, steps)]
    runs = frame[["run", "method", "seed"]].drop_duplicates().set_index("run")
    logged = in_race.groupby("run")["step"].nunique().reindex(sorted(runs.index), fill_value=0)
    short = [f"{run} ({runs.at[run, 'method']} seed {runs.at[run, 'seed']}, {count} of steps 1-{steps} logged)"
             for run, count in logged.items() if count < steps]
    if short:
        raise RunLogError(f"{where}: run(s) with fewer than the protocol's {steps} steps: {', '.join(short)}")
    order = in_race["method"].map({method: index for index, method in enumerate(methods)})
    return in_race.assign(_order=order).sort_values(["_order", "seed", "step"], kind="stable").drop(
        columns="_order").reset_index(drop=True)


def runs_table(frame: pd.DataFrame, channels: Sequence[str] = CHANNELS) -> pd.DataFrame:
    """runs.csv: method, seed, step, the reward means, then density and weight per channel."""
    rewards = [f"reward/{channel}/mean" for channel in channels]
    require_columns(frame, ["method", "seed", "step", *rewards, *(f"dara/density/{c}" for c in channels)],
                    "headline runs.csv")
    columns = [*rewards, *(f"dara/{kind}/{c}" for c in channels for kind in ("density", "weight"))]
    return frame.reindex(columns=["method", "seed", "step", *columns]).reset_index(drop=True)


def thresholds_table(frame: pd.DataFrame, metric: str, threshold: float, steps: int | None = None,
                     channels: Sequence[str] = CHANNELS, sparse_channel: str = SPARSE_CHANNEL,
                     rule: dict | None = None) -> pd.DataFrame:
    """thresholds.csv: method, seed, the run's threshold step under ``rule`` (<NA>: never), the steps before it with
    the ``sparse_channel`` weight above 1.05 (empty: no weight logged) and the collapsed channels (";"-joined)."""
    rule = rule or {"rule": "median"}
    table = threshold_steps(frame, metric, float(threshold), per_seed=True, **rule)[["method", "seed", "step"]].copy()
    steps = int(steps if steps is not None else frame["step"].max())
    reached = race_stats.threshold_endpoint(frame, metric, float(threshold), steps, **rule)
    active = race_stats.dara_active_steps(frame, reached, sparse_channel)
    runs = dict(iter(frame.groupby(["method", "seed"], sort=False)))
    keys = list(zip(table["method"], table["seed"], strict=True))
    table["dara_active_steps"] = pd.array([active[(m, int(s))] for m, s in keys], dtype="Int64")
    table["collapsed"] = [";".join(race_stats.collapsed_channels(runs[key], channels)) for key in keys]
    return table


def statistics_table(frame: pd.DataFrame, metric: str, threshold: float, steps: int,
                     secondary_steps: Sequence[int] = SECONDARY_STEPS, rule: dict | None = None) -> pd.DataFrame:
    """statistics.csv: paired comparisons of the threshold step and of the metric's mean over ``secondary_steps``."""
    first, last = int(secondary_steps[0]), min(int(secondary_steps[1]), int(steps))
    return race_stats.comparisons_table({
        "threshold step": race_stats.threshold_endpoint(frame, metric, float(threshold), int(steps), **(rule or {})),
        f"mean {metric} steps {first}-{last}": race_stats.mean_endpoint(frame, metric, first, last)})


def _step_text(step) -> str:
    return NEVER if pd.isna(step) else str(int(step))


def summary_table(frame: pd.DataFrame, metric: str, threshold: float, rule: dict | None = None) -> pd.DataFrame:
    """Per method: the median-curve step, the per-seed steps, the seeds that reached it, and their min/max/median."""
    rule = rule or {"rule": "median"}
    per_seed = threshold_steps(frame, metric, float(threshold), per_seed=True, **rule)
    curve = threshold_steps(frame, metric, float(threshold), **rule).set_index("method")["step"]
    stats = seed_summary(per_seed).set_index("method")
    table = pd.DataFrame([{"method": method, "median_curve_step": curve[method],
                           "seed_steps": ", ".join(map(_step_text, part.sort_values("seed")["step"])),
                           "reached": int(stats.at[method, "reached"]), "runs": int(stats.at[method, "runs"]),
                           **{k: stats.at[method, k] for k in ("step_min", "step_max", "step_median")}}
                          for method, part in per_seed.groupby("method", sort=False)])
    return table.astype({c: "Int64" for c in ("median_curve_step", "step_min", "step_max")})


def markdown_table(table: pd.DataFrame) -> str:
    return tables.markdown_table(table, empty=NEVER, float_format="{:g}")


def plot(frame: pd.DataFrame, metric: str, threshold: float, out_prefix: str | Path,
         channel: str = SPARSE_CHANNEL) -> list[Path]:
    """Panels: (a) the metric and the threshold, (b) the sparse channel's density, (c) its weight."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
    fig, axes = plt.subplots(3, 1, figsize=(7.0, 9.0), sharex=True)
    panels = ((metric, metric, f"(a) {metric}: median over seeds, band = min-max"),
              (f"dara/density/{channel}", f"active-group density $\\pi_{{{channel}}}$", f"(b) dara/density/{channel}"),
              (f"dara/weight/{channel}", f"weight $w_{{{channel}}}$",
               f"(c) dara/weight/{channel} (the methods that log it)"))
    for ax, (column, ylabel, title) in zip(axes, panels, strict=True):
        drawn = 0
        for i, (method, runs) in enumerate(frame.groupby("method", sort=False)):
            runs = runs.dropna(subset=[column]) if column in runs.columns else runs.iloc[0:0]
            if not runs.empty:
                plots.draw_seed_band(ax, runs, column, plots.method_colour(method, i), method_label(method))
                drawn += 1
        plots.label_panel(ax, title, ylabel, xlabel=None)
    axes[0].axhline(float(threshold), color="black", ls="--", lw=0.9, label=f"threshold {threshold:g}")
    axes[0].legend(fontsize=7, loc="best")
    if drawn:
        axes[2].legend(fontsize=7)
    else:
        axes[2].text(0.5, 0.5, f"no method logs dara/weight/{channel}", ha="center", va="center",
                     transform=axes[2].transAxes, fontsize=8)
    axes[2].set_xlabel("step")
    axes[2].xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    return plots.save_figure(fig, out_prefix)


def summary_markdown(summary: pd.DataFrame, metric: str, threshold: float, steps: int, protocol_path,
                     statistics: pd.DataFrame | None = None, rule: dict | None = None) -> str:
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
    return (f"# {Path(str(protocol_path)).parent.name} race: threshold steps\n\n"
            f"- metric: `{metric}`, threshold: {threshold:g} (>=), steps 1-{steps} (protocol: `{protocol_path}`)\n"
            f"- median_curve_step: {curve}\n- seed_steps: {per_seed}, in seed order (`{NEVER}`: never within the "
            "steps); reached: seeds that did, of runs; step_min/max/median: over those seeds\n\n"
            + markdown_table(summary) + paired)


def write_headline(run_root: str | Path, protocol_path: str | Path | None, out_dir: str | Path,
                   methods: Sequence[str] | None = None) -> list[Path]:
    """Write the race's files into ``out_dir`` (protocol default: ``out_dir``/protocol.json) and print a summary."""
    out = Path(out_dir)
    protocol_path = Path(protocol_path) if protocol_path is not None else out / "protocol.json"
    shown = protocol_path.absolute()  # the committed summary names no machine's path
    shown = shown.relative_to(dara.PROJECT_ROOT) if shown.is_relative_to(dara.PROJECT_ROOT) else shown
    protocol = load_protocol(protocol_path)
    metric, threshold, steps = str(protocol["metric"]), float(protocol["threshold"]), int(protocol["steps"])
    channels = tuple(protocol.get("channels", CHANNELS))
    sparse = str(protocol.get("sparse_channel", SPARSE_CHANNEL))
    methods = list(methods or protocol.get("methods", METHODS))
    frame = (frame_from_runs_csv if Path(run_root).suffix == ".csv" else race_frame)(run_root, methods, steps)
    require_columns(frame, [metric], "headline")
    rule = step_rule(protocol)
    summary = summary_table(frame, metric, threshold, rule)
    statistics = statistics_table(frame, metric, threshold, steps, protocol.get("secondary_steps", SECONDARY_STEPS),
                                  rule)
    texts = {"runs.csv": runs_table(frame, channels),
             "thresholds.csv": thresholds_table(frame, metric, threshold, steps, channels, sparse, rule),
             "statistics.csv": statistics}
    texts = {name: table.to_csv(index=False, lineterminator="\n") for name, table in texts.items()}
    texts["summary.md"] = summary_markdown(summary, metric, threshold, steps, shown, statistics, rule)
    for name, text in texts.items():
        atomic_write_text(out / name, text)
    written = [out / name for name in texts] + plot(frame, metric, threshold, out / "headline", sparse)
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
