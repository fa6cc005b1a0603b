"""Paper recipes: one module per table or figure, each enumerating its runs (see recipes/runner.py).

    python -m recipes list
    python -m recipes <name> [--dry-run] [--launcher local|slurm] [--seeds 0 1 2]
"""

from __future__ import annotations

import importlib

# recipe name -> module (each defines DESCRIPTION, DEFAULT_SEEDS and runs(seeds) -> list[Run]; a module may also
# define run_locally(runs, args), describe_plan(runs) and submit(runs, options, dry_run) for its own procedure)
RECIPES = {
    "toolrl_main": "recipes.toolrl_main",
    "group_size": "recipes.group_size",
    "three_rewards": "recipes.three_rewards",
    "math_main": "recipes.math_main",
    "instruct_vs_thinking": "recipes.instruct_vs_thinking",
    "fixed_weight": "recipes.fixed_weight",
    "extra_baselines": "recipes.extra_baselines",
    "smoke": "recipes.smoke",
    "gpu_smoke": "recipes.gpu_smoke",
}


def load(name: str):
    """The recipe module of `name`; an unknown name is an error listing the recipes."""
    if name not in RECIPES:
        raise KeyError(f"unknown recipe {name!r}; recipes: {', '.join(RECIPES)}")
    return importlib.import_module(RECIPES[name])
