"""Further tool-calling baselines (METHODS.md "Further estimators", not in the paper's comparison).

SAW and SA-MRPO (adaptive channel weights), GD2PO-Hard in its own order and the soft GD2PO-SNR, on
Qwen2.5-1.5B-Instruct in the ToolRL setup, seeds {0, 1, 2}.
"""

from __future__ import annotations

from recipes.runner import Run

DESCRIPTION = "Extra tool-calling baselines: SAW, SA-MRPO, GD2PO-Hard, GD2PO-SNR x 3 seeds"
DEFAULT_SEEDS = (0, 1, 2)
ESTIMATORS = ("saw", "sa_mrpo", "gd2po_hard", "gd2po_snr")
MODEL = "qwen2.5-1.5b-instruct"
CLUSTER = "a100_40g_x4"


def runs(seeds=DEFAULT_SEEDS) -> list[Run]:
    return [Run(task="toolrl", model=MODEL, estimator=estimator, cluster=CLUSTER, seed=seed)
            for estimator in ESTIMATORS for seed in seeds]
