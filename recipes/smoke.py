"""The CPU smoke run (conf/task/smoke.yaml, tiny model, cluster cpu) as a recipe: the laptop and CI check of
the launchers (`python -m recipes smoke --launcher slurm` runs it on a Slurm cluster)."""

from __future__ import annotations

from recipes.runner import Run

DESCRIPTION = "CPU smoke: 3 DARA-Asym steps of the tiny offline model (cluster cpu)"
DEFAULT_SEEDS = (0,)


def runs(seeds=DEFAULT_SEEDS) -> list[Run]:
    return [Run(task="smoke", model="tiny", estimator="dara_asym", cluster="cpu", seed=seed) for seed in seeds]
