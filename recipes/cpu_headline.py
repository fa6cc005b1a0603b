"""The paper's headline race at toy scale, through the real stack: GRPO, GDPO, DARA-Sym and DARA-Asym on the
sparse-format smoke variant (task=smoke_sparse, model=tiny_sparse), five seeds each, on a CPU.

    python -m recipes cpu_headline --pilot      # GRPO and GDPO, PILOT_SEEDS: writes results/cpu_headline/protocol.json
    python -m recipes cpu_headline              # the race (skips finished runs, resumes an interrupted one)
    python -m results headline outputs/cpu_headline --out results/cpu_headline

The pilot fixes the threshold (PROTOCOL_RULE) before any DARA run is seen; protocol.json is committed and never
derived again (docs/headline_cpu.md).
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
    run_in_turn,
    settings_overrides,
    threshold_from_levels,
)
from recipes.runner import Run
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
PROTOCOL_RULE = (
    "For each pilot method (grpo, gdpo; seeds 100-102, 20 steps): the median over seeds of reward/format/mean per "
    f"step, smoothed by a trailing {SMOOTHING_STEPS}-step mean; its level = the curve's maximum. "
    f"threshold = {LEVEL_SHARE} x the lower of the two levels, rounded down to a multiple of {THRESHOLD_GRID}, "
    f"clipped to [{THRESHOLD_RANGE[0]}, {THRESHOLD_RANGE[1]}]: both baselines' median curves reach it within the "
    "pilot's steps, so the race measures how fast, as the authors' 0.8 sits below every method's plateau. "
    "steps, temperature, group size and prompts per step: the pilot's own (fixed before it ran)."
)


def load_protocol(path: str | Path = PROTOCOL_FILE) -> dict:
    return race.load_protocol(path)


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


# ----------------------------------------------------------------------------------- the protocol's rule
def derive_protocol(frame) -> dict:
    """The race's protocol from the pilot's per-step frame (columns method, seed, step, the metric)."""
    metric = PILOT_SETTINGS["metric"]
    levels, curves = pilot_levels(frame, metric, PILOT_METHODS)
    return {**PILOT_SETTINGS, "threshold": threshold_from_levels(levels), "rule": PROTOCOL_RULE,
            "pilot": {"methods": list(PILOT_METHODS), "seeds": sorted({int(s) for s in frame["seed"]}),
                      "levels": levels, "median_curves": curves}}


# ----------------------------------------------------------------------------------- running
def run_locally(race: Sequence[Run], args) -> int:
    return 1 if run_in_turn(race, "cpu_headline", args.python_exe) else 0


def pilot(args, protocol_file: Path = PROTOCOL_FILE) -> int:
    """Run the pilot, then write the protocol once."""
    protocol = race.run_pilot(args, protocol_file, pilot_runs(), derive_protocol, "cpu_headline")
    if protocol is None:
        return 1
    print(f"[cpu_headline pilot] wrote {protocol_file}: {protocol['metric']} >= {protocol['threshold']} "
          f"(levels {protocol['pilot']['levels']}), {protocol['steps']} steps", flush=True)
    return 0
