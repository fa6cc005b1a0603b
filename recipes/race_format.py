"""The format race: GRPO, GDPO, DARA-Sym and DARA-Asym x 12 paired seeds on a format reward that stays the sparser
channel for many steps (task=smoke_rare, model=tiny_rare), on a CPU through verl + vLLM.

    python -m recipes race_format --pilot      # GRPO and GDPO on PILOT_SEEDS: checks the regime, writes protocol.json
    python -m recipes race_format [--commit]   # the race, seed by seed; keeps (--commit: commits) each run's logs
    python -m results headline results/race_format/logs --out results/race_format

The pre-registration (regime, endpoints, seeds, abort rule) is REGISTRATION below, copied into protocol.json, and
docs/headline_cpu.md, "The format race: pre-registration".
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from recipes import race
from recipes.race import (
    LEVEL_SHARE,
    SMOOTHING_STEPS,
    THRESHOLD_GRID,
    THRESHOLD_RANGE,
    describe_plan,  # noqa: F401  (the recipe's plan in --dry-run)
    pilot_levels,
    settings_overrides,
    threshold_from_levels,
)
from recipes.runner import PROJECT_ROOT, RecipeError, Run
from results import headline

DESCRIPTION = "Format race on a CPU: GRPO, GDPO, DARA-Sym, DARA-Asym x 12 paired seeds, format sparse for many steps"
NAME = "race_format"
METHODS = ("gdpo", "dara_asym", "dara_sym", "grpo")   # the order within a seed (the primary pair first)
DEFAULT_SEEDS = tuple(range(12))
PILOT_METHODS = ("grpo", "gdpo")
PILOT_SEEDS = (100, 101, 102)
PILOT_VARIANT = headline.PILOT_VARIANT
TASK, MODEL, CLUSTER = "smoke_rare", "tiny_rare", "cpu"
OUTPUT_ROOT = f"outputs/{NAME}"
RESULTS_DIR = PROJECT_ROOT / "results" / NAME
PROTOCOL_FILE = RESULTS_DIR / "protocol.json"
LOGS_DIR = RESULTS_DIR / "logs"       # each finished run's logs, committed as the race goes (resume from a clone)

SETTINGS = {"metric": "reward/format/mean", "steps": 40, "temperature": 1.0, "group_size": 4,
            "prompts_per_step": 32, "save_freq": 10}
CROSSING_STEP_MIN = 8      # the abort rule: GDPO's format must stay the sparser channel for steps 1-7 at least
REGISTRATION = {
    "race": NAME, "task": TASK, "model": MODEL, "methods": list(METHODS), "seeds": list(DEFAULT_SEEDS),
    "channels": ["format", "correctness"], "sparse_channel": "format", "secondary_steps": [1, 20],
    "learning_rate": 2.5e-4, "updates_per_step": 2,
    "seed_varies": "the data order and every response's sampling seed (one warm-start checkpoint for all runs)",
    "threshold_rule": (f"{LEVEL_SHARE} x the lower of grpo's and gdpo's levels (the maximum of the trailing "
                       f"{SMOOTHING_STEPS}-step mean of the seed-median metric over the pilot's steps), rounded down "
                       f"to {THRESHOLD_GRID}, clipped to {list(THRESHOLD_RANGE)}"),
    "primary_endpoint": ("threshold step (first step with the metric >= threshold; never = steps + 1), paired "
                         "dara_asym - gdpo over the seeds: mean, two-sided exact sign test (ties dropped), 95% "
                         "percentile bootstrap interval of the mean (10,000 resamples)"),
    "secondary_endpoint": "mean of the metric over steps 1-20, paired dara_asym - gdpo, the same statistics",
    "abort_rule": (f"if the pilot's gdpo seed-median dara/density/format reaches its seed-median "
                   f"dara/density/correctness before step {CROSSING_STEP_MIN}, halve the learning rate, record it "
                   "in REGIME_CHANGES and rerun the pilot, before any DARA run"),
}
# Each change of regime the abort rule forced: (what changed, the pilot's crossing step that forced it).
REGIME_CHANGES: tuple[tuple[str, int], ...] = ()


def _race_run(method: str, seed: int, settings: dict, variant: str = "") -> Run:
    return Run(task=TASK, model=MODEL, estimator=method, cluster=CLUSTER, seed=seed, variant=variant,
               output_root=OUTPUT_ROOT, extra=settings_overrides(settings))


def load_protocol(path: str | Path = PROTOCOL_FILE) -> dict:
    return race.load_protocol(path)


def runs(seeds: Sequence[int] = DEFAULT_SEEDS, protocol: dict | None = None) -> list[Run]:
    """The race, seed by seed, with the protocol's settings."""
    protocol = protocol or race.race_settings(PROTOCOL_FILE, SETTINGS)
    return [_race_run(method, seed, protocol) for seed in seeds for method in METHODS]


def pilot_runs(seeds: Sequence[int] = PILOT_SEEDS) -> list[Run]:
    return [_race_run(method, seed, SETTINGS, PILOT_VARIANT) for method in PILOT_METHODS for seed in seeds]


# ----------------------------------------------------------------------------------- the pilot's rules
def derive_protocol(frame) -> dict:
    """The race's protocol from the pilot's per-step frame; a regime that fails the abort rule is a RecipeError
    with the numbers (change the regime, record it in REGIME_CHANGES, rerun the pilot)."""
    crossing = race.crossing_step(frame, "gdpo", "format", "correctness")
    if crossing is not None and crossing < CROSSING_STEP_MIN:
        raise RecipeError(f"abort rule: the pilot's GDPO format density reaches its correctness density at step "
                          f"{crossing} (< {CROSSING_STEP_MIN}); halve the learning rate in conf/task/{TASK}.yaml, "
                          f"record it in REGIME_CHANGES, delete the pilot's runs and rerun --pilot")
    metric = SETTINGS["metric"]
    levels, curves = pilot_levels(frame, metric, PILOT_METHODS)
    return {**SETTINGS, "threshold": threshold_from_levels(levels), **REGISTRATION,
            "regime_changes": [list(change) for change in REGIME_CHANGES],
            "pilot": {"methods": list(PILOT_METHODS), "seeds": sorted({int(s) for s in frame["seed"]}),
                      "levels": levels, "gdpo_crossing_step": crossing, "median_curves": curves}}


# ----------------------------------------------------------------------------------- running
def run_locally(batch: Sequence[Run], args) -> int:
    return race.run_keeping_logs(batch, args, NAME, LOGS_DIR, PROTOCOL_FILE)


def pilot(args, protocol_file: Path = PROTOCOL_FILE) -> int:
    """Run the pilot, apply the abort rule, then write the protocol once."""
    protocol = race.run_pilot(args, protocol_file, pilot_runs(), derive_protocol, NAME)
    if protocol is None:
        return 1
    print(f"[{NAME} pilot] wrote {protocol_file}: {protocol['metric']} >= {protocol['threshold']} (levels "
          f"{protocol['pilot']['levels']}; GDPO crossing step {protocol['pilot']['gdpo_crossing_step']})", flush=True)
    return 0
