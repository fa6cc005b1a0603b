"""Instruct vs Thinking: DARA-Asym on Qwen3-4B-Thinking-2507, 100 steps, against the math table's
Qwen3-4B-Instruct-2507 DARA-Asym run at step 100 (EXPERIMENTS.md "Math reasoning", Models).

The authors' command for it trains the Thinking model with DARA-Asym to step 100 (their math README); the
Instruct side is the math_main run of the same method and seed, read at step 100.
"""

from __future__ import annotations

from recipes.runner import Run

DESCRIPTION = "Instruct vs Thinking: DARA-Asym on Qwen3-4B-Thinking-2507, DeepScaleR, 100 steps"
DEFAULT_SEEDS = (0,)
MODEL = "qwen3-4b-thinking-2507"
ESTIMATOR = "dara_asym"
CLUSTER = "h100_x8"
STEPS = 100


def runs(seeds=DEFAULT_SEEDS) -> list[Run]:
    return [Run(task="deepscaler", model=MODEL, estimator=ESTIMATOR, cluster=CLUSTER, seed=seed, total_steps=STEPS)
            for seed in seeds]
