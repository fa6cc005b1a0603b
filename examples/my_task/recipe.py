"""A recipe of your own (docs/own_experiment.md): my_task with GDPO and DARA-Asym over two seeds.

    python -m recipes DIR/recipe.py --dry-run

A recipe module defines DESCRIPTION, DEFAULT_SEEDS and runs(seeds) -> list[Run]. This one lives beside its task,
so each run adds this folder to Hydra's search path.
"""

from pathlib import Path

from recipes.runner import Run

NAME = "my_task"  # run.recipe (the wandb group) of its runs
DESCRIPTION = "my_task: GDPO vs DARA-Asym on the tiny model, CPU"
DEFAULT_SEEDS = (0, 1)
SEARCHPATH = f"hydra.searchpath=[file://{Path(__file__).resolve().parent}]"


def runs(seeds=DEFAULT_SEEDS) -> list[Run]:
    return [Run(task="my_task", model="tiny", estimator=estimator, cluster="cpu", seed=seed, extra=(SEARCHPATH,))
            for estimator in ("gdpo", "dara_asym") for seed in seeds]
