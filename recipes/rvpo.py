"""RVPO as the DARA authors ran it: the soft-min aggregation of their published tool-calling runs.

Their `all_seeds` and training-dynamics files hold RVPO on Qwen2.5-1.5B-Instruct in the ToolRL setup at seeds
{0, 1, 2} (reference/dara_authors/SOURCE.md), next to the paper's methods: the same task, model and cluster as
`toolrl_main`, with `estimator=rvpo` (k = 1, token whitening). `python -m results report` sets these runs beside
the authors' rvpo rows.
"""

from __future__ import annotations

from recipes.runner import Run

DESCRIPTION = "RVPO (the authors' published extra baseline): 1.5B tool calling x 3 seeds"
DEFAULT_SEEDS = (0, 1, 2)
MODEL = "qwen2.5-1.5b-instruct"
CLUSTER = "a100_40g_x4"


def runs(seeds=DEFAULT_SEEDS) -> list[Run]:
    return [Run(task="toolrl", model=MODEL, estimator="rvpo", cluster=CLUSTER, seed=seed) for seed in seeds]
