"""The length race: GDPO, DARA-Asym and DARA-Sym x 12 paired seeds on the paper's math regime at toy scale (a dense
correctness reward beside a length reward active in few groups; task=smoke_length, model=tiny_length), on a CPU
through verl + vLLM; then, while time allows, the extras (GRPO and the authors' fixed weights in both forms).

    python -m recipes race_length --pilot      # GDPO on PILOT_SEEDS: checks the regime, writes protocol.json
    python -m recipes race_length [--commit]   # the race, seed by seed; keeps (--commit: commits) each run's logs
    python -m results headline results/race_length/logs --out results/race_length

The pre-registration (regime, the sustained threshold rule, endpoints, seeds, abort rule) is REGISTRATION below,
copied into protocol.json, and docs/headline_cpu.md, "The length race: pre-registration".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from recipes import race
from recipes.race import describe_plan, settings_overrides  # noqa: F401  (describe_plan: the plan in --dry-run)
from recipes.runner import PROJECT_ROOT, RecipeError, Run
from results import headline
from results.thresholds import trailing_mean

DESCRIPTION = "Length race on a CPU: GDPO, DARA-Asym, DARA-Sym x 12 paired seeds, length compliance sparse by group"
NAME = "race_length"
METHODS = ("gdpo", "dara_asym", "dara_sym")              # the order within a seed (the primary pair first)
EXTRA_METHODS = ("grpo", "static_asym", "static_sym")    # optional, after every seed of the main three
DEFAULT_SEEDS = tuple(range(12))
PILOT_METHODS = ("gdpo",)
PILOT_SEEDS = (100, 101, 102)
PILOT_VARIANT = headline.PILOT_VARIANT
TASK, MODEL, CLUSTER = "smoke_length", "tiny_length", "cpu"
STATIC_WEIGHTS = "algorithm.dara.weights=[1.0,5.0]"     # the authors' fixed weights, in the channels' order
OUTPUT_ROOT = f"outputs/{NAME}"
RESULTS_DIR = PROJECT_ROOT / "results" / NAME
PROTOCOL_FILE = RESULTS_DIR / "protocol.json"
LOGS_DIR = RESULTS_DIR / "logs"       # each finished run's logs, committed as the race goes (resume from a clone)

SETTINGS = {"metric": "reward/length/mean", "steps": 40, "temperature": 1.0, "group_size": 8,
            "prompts_per_step": 16, "save_freq": 10}
WINDOW, HOLD_STEPS = 2, 4      # the authors' sustained rule (10 and 20 over 200 steps) scaled to 40 steps
GAP_SHARE = 0.8                # the threshold closes this share of the gap from the start to GDPO's level
THRESHOLD_GRID = 0.01
THRESHOLD_MAX = 0.99           # the authors' strictest threshold
CROSSING_STEP_MIN = 8          # the abort rule: GDPO's length must stay the sparser channel for steps 1-7 at least
REGISTRATION = {
    "race": NAME, "task": TASK, "model": MODEL, "methods": list(METHODS), "extra_methods": list(EXTRA_METHODS),
    "seeds": list(DEFAULT_SEEDS), "channels": ["correctness", "length"], "sparse_channel": "length",
    "secondary_steps": [1, 20], "learning_rate": 1.25e-4, "updates_per_step": 2, "batch_norm": "response",
    "dynamic_sampling": None, "static_weights": {"correctness": 1.0, "length": 5.0},
    "seed_varies": "the data order and every response's sampling seed (one warm-start checkpoint for all runs)",
    "threshold_rule": "sustained", "window": WINDOW, "hold": HOLD_STEPS,
    "threshold_from_pilot": (f"start = gdpo's seed-median metric at step 1; level = the highest value the trailing "
                             f"{WINDOW}-step mean of gdpo's seed-median metric holds at {HOLD_STEPS + 1} consecutive "
                             f"steps; threshold = start + {GAP_SHARE} x (level - start), rounded down to "
                             f"{THRESHOLD_GRID}, at most {THRESHOLD_MAX}"),
    "primary_endpoint": (f"steps to sustained compliance (first step whose trailing {WINDOW}-step mean of the metric "
                         f"is >= threshold and stays so at each of the next {HOLD_STEPS} steps; never = steps + 1), "
                         "paired dara_asym - gdpo over the seeds: mean, two-sided exact sign test (ties dropped), "
                         "95% percentile bootstrap interval of the mean (10,000 resamples)"),
    "secondary_endpoint": "mean of the metric over steps 1-20, paired dara_asym - gdpo, the same statistics",
    "abort_rule": (f"if the pilot's gdpo seed-median dara/density/length reaches its seed-median "
                   f"dara/density/correctness before step {CROSSING_STEP_MIN}, halve the learning rate; if its level "
                   f"is not above its start by {THRESHOLD_GRID}, double it; record the change in REGIME_CHANGES and "
                   "rerun the pilot, before any DARA run"),
}
# Each change of regime the abort rule forced: (what changed, the pilot's figure that forced it).
REGIME_CHANGES: tuple[tuple[str, float], ...] = ()


def _race_run(method: str, seed: int, settings: dict, variant: str = "") -> Run:
    if method.startswith("static_"):   # the fixed-weight baseline: estimator static in one of its two forms
        return Run(task=TASK, model=MODEL, estimator="static", static_form=method.removeprefix("static_"),
                   cluster=CLUSTER, seed=seed, variant=variant, output_root=OUTPUT_ROOT,
                   extra=(STATIC_WEIGHTS, *settings_overrides(settings)))
    return Run(task=TASK, model=MODEL, estimator=method, cluster=CLUSTER, seed=seed, variant=variant,
               output_root=OUTPUT_ROOT, extra=settings_overrides(settings))


def load_protocol(path: str | Path = PROTOCOL_FILE) -> dict:
    return race.load_protocol(path)


def runs(seeds: Sequence[int] = DEFAULT_SEEDS, protocol: dict | None = None) -> list[Run]:
    """The race with the protocol's settings: the main methods seed by seed, then the extras seed by seed."""
    protocol = protocol or race.race_settings(PROTOCOL_FILE, SETTINGS)
    return [_race_run(method, seed, protocol) for methods in (METHODS, EXTRA_METHODS)
            for seed in seeds for method in methods]


def pilot_runs(seeds: Sequence[int] = PILOT_SEEDS) -> list[Run]:
    return [_race_run(method, seed, SETTINGS, PILOT_VARIANT) for method in PILOT_METHODS for seed in seeds]


# ----------------------------------------------------------------------------------- the pilot's rules
def sustained_level(values: Sequence[float], window: int = WINDOW, hold: int = HOLD_STEPS) -> float:
    """The highest value that the trailing ``window``-step mean of a curve (steps ascending) holds at ``hold`` + 1
    consecutive steps: the largest threshold first_sustained_step can confirm on that curve."""
    means = trailing_mean(values, window)
    spans = [min(means[start:start + hold + 1]) for start in range(window - 1, len(means) - hold)]
    if not spans:
        raise RecipeError(f"a pilot curve of {len(means)} steps cannot hold a {window}-step mean for {hold} more steps")
    return float(max(spans))


def threshold_from_start(start: float, level: float) -> float:
    """start + GAP_SHARE x (level - start), rounded down to THRESHOLD_GRID, at most THRESHOLD_MAX."""
    raw = start + GAP_SHARE * (level - start)
    return round(min(THRESHOLD_MAX, math.floor(raw / THRESHOLD_GRID + 1e-9) * THRESHOLD_GRID), 4)


def derive_protocol(frame) -> dict:
    """The race's protocol from the pilot's per-step frame; a regime that fails the abort rule is a RecipeError
    with the numbers (change the regime, record it in REGIME_CHANGES, rerun the pilot)."""
    crossing = race.crossing_step(frame, "gdpo", "length", "correctness")
    if crossing is not None and crossing < CROSSING_STEP_MIN:
        raise RecipeError(f"abort rule: the pilot's GDPO length density reaches its correctness density at step "
                          f"{crossing} (< {CROSSING_STEP_MIN}); halve the learning rate in conf/task/{TASK}.yaml, "
                          f"record it in REGIME_CHANGES, delete the pilot's runs and rerun --pilot")
    metric = SETTINGS["metric"]
    curve = frame[frame["method"] == "gdpo"].dropna(subset=[metric]).groupby("step")[metric].median().sort_index()
    start, level = round(float(curve.iloc[0]), 4), round(sustained_level(list(curve.values)), 4)
    threshold = threshold_from_start(start, level)
    if threshold <= start:
        raise RecipeError(f"abort rule: the pilot's GDPO holds a length compliance of {level} against {start} at "
                          f"step 1, no race to run; double the learning rate in conf/task/{TASK}.yaml, record it in "
                          "REGIME_CHANGES, delete the pilot's runs and rerun --pilot")
    return {**SETTINGS, "threshold": threshold, **REGISTRATION,
            "regime_changes": [list(change) for change in REGIME_CHANGES],
            "pilot": {"methods": list(PILOT_METHODS), "seeds": sorted({int(s) for s in frame["seed"]}),
                      "start": start, "level": level, "gdpo_crossing_step": crossing,
                      "median_curve": {int(step): round(float(value), 4) for step, value in curve.items()}}}


# ----------------------------------------------------------------------------------- running
def run_locally(batch: Sequence[Run], args) -> int:
    return race.run_keeping_logs(batch, args, NAME, LOGS_DIR, PROTOCOL_FILE)


def pilot(args, protocol_file: Path = PROTOCOL_FILE) -> int:
    """Run the pilot, apply the abort rule, then write the protocol once."""
    protocol = race.run_pilot(args, protocol_file, pilot_runs(), derive_protocol, NAME)
    if protocol is None:
        return 1
    print(f"[{NAME} pilot] wrote {protocol_file}: sustained {protocol['metric']} >= {protocol['threshold']} (start "
          f"{protocol['pilot']['start']}, level {protocol['pilot']['level']}; GDPO crossing step "
          f"{protocol['pilot']['gdpo_crossing_step']})", flush=True)
    return 0
