"""The paper's headline race at toy scale, through the real stack: GRPO, GDPO, DARA-Sym and DARA-Asym on the
sparse-format smoke variant (task=smoke_sparse, model=tiny_sparse), five seeds each, on a CPU.

    python -m recipes cpu_headline --pilot      # GRPO and GDPO, PILOT_SEEDS: writes results/cpu_headline/protocol.json
    python -m recipes cpu_headline --dry-run    # the 20 runs of the race, one per line
    python -m recipes cpu_headline              # the race (skips finished runs, resumes an interrupted one)
    python -m results headline outputs/cpu_headline --out results/cpu_headline   # runs.csv, thresholds.csv, plot

The pilot fixes the race's settings before any DARA run is seen: `derive_protocol` (the rule, written down in
PROTOCOL_RULE and in the file) turns the pilot's curves into the threshold; steps, temperature and group size are
the pilot's own. protocol.json is committed and never derived again (`--pilot` refuses to overwrite it). Every
race run reads its settings from that file.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from recipes.runner import PROJECT_ROOT, RecipeError, Run, is_finished, train_command
from results import headline

DESCRIPTION = "Toy headline race on a CPU: GRPO, GDPO, DARA-Sym, DARA-Asym on a sparse format reward, 5 seeds"
DEFAULT_SEEDS = (0, 1, 2, 3, 4)
METHODS = headline.METHODS
PILOT_METHODS = ("grpo", "gdpo")
PILOT_SEEDS = (100, 101, 102)  # apart from the race's seeds: the race's runs are fresh
TASK, MODEL, CLUSTER = "smoke_sparse", "tiny_sparse", "cpu"
OUTPUT_ROOT = "outputs/cpu_headline"
PILOT_VARIANT = headline.PILOT_VARIANT
PROTOCOL_FILE = headline.PROTOCOL_FILE

# The pilot's settings (the race takes them over): the authors' ToolRL temperature and group size
# (EXPERIMENTS.md), the minimum of 20 steps, a checkpoint every 5 steps so an interrupted run resumes.
PILOT_SETTINGS = {"metric": "reward/format/mean", "steps": 20, "temperature": 1.0, "group_size": 4,
                  "prompts_per_step": 16, "save_freq": 5}
SMOOTHING_STEPS = 3       # trailing mean over steps of the seed-median curve (64 responses per step are noisy)
LEVEL_SHARE = 0.8         # the threshold sits at this share of the slower baseline's best level
THRESHOLD_GRID = 0.05
THRESHOLD_RANGE = (0.1, 0.8)  # 0.8: the authors' threshold, the most the rule may ask
PROTOCOL_RULE = (
    "For each pilot method (grpo, gdpo; seeds 100-102, 20 steps): the median over seeds of reward/format/mean per "
    f"step, smoothed by a trailing {SMOOTHING_STEPS}-step mean; its level = the curve's maximum. "
    f"threshold = {LEVEL_SHARE} x the lower of the two levels, rounded down to a multiple of {THRESHOLD_GRID}, "
    f"clipped to [{THRESHOLD_RANGE[0]}, {THRESHOLD_RANGE[1]}]: both baselines' median curves reach it within the "
    "pilot's steps, so the race measures how fast, as the authors' 0.8 sits below every method's plateau. "
    "steps, temperature, group size and prompts per step: the pilot's own (fixed before it ran)."
)


def settings_overrides(settings: dict) -> tuple[str, ...]:
    """Hydra overrides of a settings block (the pilot's, or the protocol's: the same keys)."""
    return (f"trainer.total_training_steps={int(settings['steps'])}",
            f"actor_rollout_ref.rollout.temperature={float(settings['temperature'])}",
            f"actor_rollout_ref.rollout.n={int(settings['group_size'])}",
            f"data.train_batch_size={int(settings['prompts_per_step'])}",
            f"trainer.save_freq={int(settings['save_freq'])}",
            "trainer.max_actor_ckpt_to_keep=1")


def load_protocol(path: str | Path = PROTOCOL_FILE) -> dict:
    """The committed protocol (results.headline.load_protocol); a missing or broken file is a RecipeError naming
    it (run --pilot first)."""
    try:
        return headline.load_protocol(path)
    except headline.ProtocolError as error:
        raise RecipeError(str(error)) from None


def runs(seeds: Sequence[int] = DEFAULT_SEEDS, protocol: dict | None = None) -> list[Run]:
    """The race: every method x seed with the protocol's settings (one run folder each under OUTPUT_ROOT)."""
    protocol = protocol or load_protocol()
    extra = settings_overrides(protocol)
    return [Run(task=TASK, model=MODEL, estimator=method, cluster=CLUSTER, seed=seed, output_root=OUTPUT_ROOT,
                extra=extra) for method in METHODS for seed in seeds]


def pilot_runs(seeds: Sequence[int] = PILOT_SEEDS) -> list[Run]:
    return [Run(task=TASK, model=MODEL, estimator=method, cluster=CLUSTER, seed=seed, variant=PILOT_VARIANT,
                output_root=OUTPUT_ROOT, extra=settings_overrides(PILOT_SETTINGS))
            for method in PILOT_METHODS for seed in seeds]


def describe_plan(race: Sequence[Run]) -> str:
    return "\n".join(f"{index:2d}. method {run.method:10s} seed {run.seed}  {run.name}"
                     for index, run in enumerate(race, 1))


# ----------------------------------------------------------------------------------- the protocol's rule
def smoothed_level(steps: Sequence[int], values: Sequence[float], window: int = SMOOTHING_STEPS) -> float:
    """The maximum of the trailing `window`-step mean of a curve (steps ascending)."""
    ordered = [value for _, value in sorted(zip(steps, values, strict=True))]
    if len(ordered) < window:
        raise RecipeError(f"a pilot curve has {len(ordered)} steps, fewer than the {window} the rule smooths over")
    return max(sum(ordered[i - window:i]) / window for i in range(window, len(ordered) + 1))


def threshold_from_levels(levels: dict[str, float]) -> float:
    low, high = THRESHOLD_RANGE
    raw = LEVEL_SHARE * min(levels.values())
    return round(min(high, max(low, math.floor(raw / THRESHOLD_GRID + 1e-9) * THRESHOLD_GRID)), 4)


def derive_protocol(frame) -> dict:
    """The race's protocol from the pilot's per-step frame (columns method, seed, step, the metric)."""
    metric = PILOT_SETTINGS["metric"]
    levels, curves = {}, {}
    for method in PILOT_METHODS:
        part = frame[frame["method"] == method].dropna(subset=[metric])
        if part.empty:
            raise RecipeError(f"the pilot has no {metric} for {method}")
        median = part.groupby("step")[metric].median().sort_index()
        levels[method] = round(float(smoothed_level(list(median.index), list(median.values))), 4)
        curves[method] = {int(step): round(float(value), 4) for step, value in median.items()}
    return {**PILOT_SETTINGS, "threshold": threshold_from_levels(levels), "rule": PROTOCOL_RULE,
            "pilot": {"methods": list(PILOT_METHODS), "seeds": sorted({int(s) for s in frame["seed"]}),
                      "levels": levels, "median_curves": curves}}


# ----------------------------------------------------------------------------------- running
def run_in_turn(batch: Sequence[Run], label: str, python: str = sys.executable) -> int:
    """Each unfinished run in turn (an interrupted one resumes from its last checkpoint: the same folder);
    one line per finished run with the time left. Returns the number of failed runs."""
    todo = [run for run in batch if not is_finished(run)]
    print(f"[{label}] {len(batch)} runs: {len(batch) - len(todo)} finished (skipped), {len(todo)} to run", flush=True)
    failed, spent = [], []
    for index, run in enumerate(todo, 1):
        started = time.monotonic()
        code = subprocess.call(train_command(run, python), cwd=PROJECT_ROOT)
        spent.append(time.monotonic() - started)
        left = sum(spent) / len(spent) * (len(todo) - index)
        status = "done" if code == 0 else f"FAILED (exit {code})"
        if code:
            failed.append(run.name)
        print(f"[{label}] {index}/{len(todo)} {run.method} seed {run.seed}: {status} in {spent[-1] / 60:.1f} min, "
              f"~{left / 60:.0f} min left", flush=True)
    print(f"[{label}] {len(todo) - len(failed)} ran, {len(batch) - len(todo)} skipped, {len(failed)} failed"
          + (f": {', '.join(failed)}" if failed else ""), flush=True)
    return len(failed)


def run_locally(race: Sequence[Run], args) -> int:
    return 1 if run_in_turn(race, "cpu_headline", args.python_exe) else 0


def pilot(args, protocol_file: Path = PROTOCOL_FILE) -> int:
    """Run the pilot, then write the protocol once."""
    from results.loaders import load_runs

    if protocol_file.exists():
        raise RecipeError(f"{protocol_file} exists: the protocol is derived once and committed (delete it to "
                          "derive it anew, which invalidates a race run with it)")
    batch = pilot_runs()
    if run_in_turn(batch, "cpu_headline pilot", args.python_exe):
        return 1
    protocol = derive_protocol(load_runs([str(run.output_dir) for run in batch]))
    from dara.io import atomic_write_text

    atomic_write_text(protocol_file, json.dumps(protocol, indent=2) + "\n")
    print(f"[cpu_headline pilot] wrote {protocol_file}: {protocol['metric']} >= {protocol['threshold']} "
          f"(levels {protocol['pilot']['levels']}), {protocol['steps']} steps", flush=True)
    return 0
