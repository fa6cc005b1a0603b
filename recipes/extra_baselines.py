"""Further tool-calling baselines (METHODS.md "Further estimators", not in the paper's comparison).

SAW (adaptive channel weights) and GD2PO-Hard in its own order, on
Qwen2.5-1.5B-Instruct in the ToolRL setup, seeds {0, 1, 2}.
"""

from __future__ import annotations

from recipes.runner import Run

DESCRIPTION = "Extra tool-calling baselines: SAW, GD2PO-Hard x 3 seeds"
DEFAULT_SEEDS = (0, 1, 2)
ESTIMATORS = ("saw", "gd2po_hard")
MODEL = "qwen2.5-1.5b-instruct"
CLUSTER = "a100_40g_x4"


def runs(seeds=DEFAULT_SEEDS) -> list[Run]:
    return [Run(task="toolrl", model=MODEL, estimator=estimator, cluster=CLUSTER, seed=seed)
            for estimator in ESTIMATORS for seed in seeds]
