"""The testbed's studies, how their runs are executed, and how each run is summarised. Every (estimator, G,
seed) of a study is one run of `train.train_run` at B = budget / G prompts; runs are independent, so a study's
results do not depend on run order."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from dara.testbed.task import TaskConfig
from dara.testbed.train import AdvantageFn, RunConfig, estimator_options, train_run
from tasks.registry import load_ref

# The results layer's threshold rule, named by import path: dara sits below results and never imports it.
SUSTAINED_STEP = "results.thresholds:first_sustained_step"

ALL_ESTIMATORS = ("grpo", "gdpo", "dara_sym", "dara_asym", "dvao", "gd2po_hard", "gd2po_snr", "static", "saw",
                  "sa_mrpo")
CORE_ESTIMATORS = ("grpo", "gdpo", "dara_sym", "dara_asym")
THRESHOLDS = (0.8, 0.99)
SMOOTHING_WINDOW = 5  # steps of the trailing mean that steps_to_* reads


@dataclass(frozen=True)
class Study:
    """One experiment of the testbed."""
    name: str
    task: TaskConfig
    estimators: tuple[str, ...]
    group_sizes: tuple[int, ...]
    seeds: int
    steps: int
    budget: int = 256  # responses per step, B * G
    lr: float = 3e-3
    description: str = ""

    def __post_init__(self) -> None:
        for g in self.group_sizes:
            if g < 2 or self.budget % g:
                raise ValueError(f"study {self.name}: group size {g} must be >= 2 and divide the budget {self.budget}")
        if self.seeds < 1:
            raise ValueError(f"study {self.name}: seeds must be >= 1")

    def run_configs(self) -> Iterator[RunConfig]:
        for estimator in self.estimators:
            for g in self.group_sizes:
                for seed in range(self.seeds):
                    yield RunConfig(estimator=estimator, seed=seed, num_prompts=self.budget // g, group_size=g,
                                    steps=self.steps, lr=self.lr, options=estimator_options(estimator, self.task))

    @property
    def num_runs(self) -> int:
        return len(self.estimators) * len(self.group_sizes) * self.seeds


def full_studies(seeds: int = 8, side_seeds: int = 4, steps: int = 150) -> list[Study]:
    """The documented full run (docs/testbed.md); the side studies run fewer seeds to stay under 30 minutes."""
    sparse = TaskConfig()
    return [
        Study("main", sparse, ALL_ESTIMATORS, (8,), seeds, steps,
              description="every estimator; sparse format channel (2% at init), B=32 x G=8"),
        Study("group_size", sparse, CORE_ESTIMATORS, (2, 4, 16, 32), side_seeds, steps,
              description="fixed budget of 256 responses per step, G in 2 (tiny), 4, 16, 32; G=8 is in main"),
        Study("dense", replace(sparse, format_init_rate=0.10), CORE_ESTIMATORS, (8,), side_seeds, steps,
              description="format 10% at init: format is the dense channel, DARA leaves its weight near 1"),
        Study("three_channel", replace(sparse, length_channel=True), CORE_ESTIMATORS, (8,), side_seeds, steps,
              description="correctness, format and a length channel (EOS within 6 tokens)"),
    ]


def quick_studies() -> list[Study]:
    """A small version for CI: every estimator once, the group-size contrast at its two ends."""
    sparse = TaskConfig()
    return [
        Study("main", sparse, ALL_ESTIMATORS, (8,), 2, 40, budget=64, description="quick: every estimator, B=8 x G=8"),
        Study("group_size", sparse, ("gdpo", "dara_asym"), (4, 16), 2, 40, budget=64,
              description="quick: G=4 against G=16 at 64 responses per step"),
    ]


def summarize_run(records: list[dict[str, float]], final: dict[str, float], study: Study) -> dict[str, float]:
    """Scalar outcomes of one run: steps_to_<x> (first step whose 5-step trailing mean of format compliance
    reaches x; `study.steps` when never, reached_<x> gives the share), format_auc, final_<channel> (held out), and
    per channel the means over the steps where each energy, density and weight metric is defined."""
    sparse = study.task.sparse_channel
    compliance = [r[f"reward/{sparse}/mean"] for r in records]
    out: dict[str, float] = {}
    first_sustained_step = load_ref(SUSTAINED_STEP)
    for threshold in THRESHOLDS:
        # the results package's sustained rule with no hold: first full trailing window reaching x
        steps = range(1, len(compliance) + 1)
        reached = first_sustained_step(steps, compliance, threshold, window=SMOOTHING_WINDOW, hold=0)
        out[f"steps_to_{threshold:g}"] = float(reached if reached is not None else study.steps)
        out[f"reached_{threshold:g}"] = float(reached is not None)
    out["format_auc"] = sum(compliance) / len(compliance)
    out.update({key.replace("eval/", "final_"): value for key, value in final.items()})
    for name in study.task.channel_names:
        for key in ("energy_vs_ideal", "weighted_energy_vs_ideal", "weighted_energy_share", "density", "weight",
                    "energy_ratio"):
            values = [r[f"{key}/{name}"] for r in records if math.isfinite(r.get(f"{key}/{name}", math.nan))]
            if values:
                out[f"{key}/{name}"] = sum(values) / len(values)
    out["seconds_per_step"] = sum(r["step_seconds"] for r in records) / len(records)
    return out


@dataclass
class RunResult:
    study: str
    config: RunConfig
    records: list[dict[str, float]]
    outcome: dict[str, float]


def run_study(study: Study, advantage_fn: AdvantageFn | None = None,
              log: Callable[[str], None] = print) -> list[RunResult]:
    """Run every (estimator, G, seed) of a study, one progress line per run."""
    results = []
    for i, config in enumerate(study.run_configs(), start=1):
        start = time.perf_counter()
        records, final = train_run(study.task, config, advantage_fn)
        outcome = summarize_run(records, final, study)
        results.append(RunResult(study.name, config, records, outcome))
        log(f"[{study.name} {i}/{study.num_runs}] {config.estimator:<10} G={config.group_size:<2} seed={config.seed} "
            f"steps_to_0.8={outcome['steps_to_0.8']:.0f} steps_to_0.99={outcome['steps_to_0.99']:.0f} "
            f"final_correctness={outcome['final_correctness']:.3f} ({time.perf_counter() - start:.1f}s)")
    return results
