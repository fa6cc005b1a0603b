"""Paper recipes: one module per table or figure, each enumerating its runs (see recipes/runner.py).

    python -m recipes list
    python -m recipes <name> [--dry-run] [--launcher local|slurm] [--seeds 0 1 2]
    python -m recipes path/to/my_recipe.py --dry-run        # a recipe of your own (a file or package.module)
"""

from __future__ import annotations

import importlib

# recipe name -> module (each defines DESCRIPTION, DEFAULT_SEEDS and runs(seeds) -> list[Run]; a module may also
# define run_locally(runs, args), describe_plan(runs), submit(runs, options, dry_run) and pilot(args) for its own
# procedure)
RECIPES = {
    "toolrl_main": "recipes.toolrl_main",
    "group_size": "recipes.group_size",
    "three_rewards": "recipes.three_rewards",
    "math_main": "recipes.math_main",
    "instruct_vs_thinking": "recipes.instruct_vs_thinking",
    "fixed_weight": "recipes.fixed_weight",
    "extra_baselines": "recipes.extra_baselines",
    "rvpo": "recipes.rvpo",
    "smoke": "recipes.smoke",
    "gpu_smoke": "recipes.gpu_smoke",
    "cpu_headline": "recipes.cpu_headline",
    "race_format": "recipes.race_format",
    "race_length": "recipes.race_length",
}


RECIPE_ATTRIBUTES = ("DESCRIPTION", "DEFAULT_SEEDS", "runs")


def load(name: str):
    """The recipe module of `name`: one of the project's, or one of your own given by file (`.py`) or import path
    (package.module). An unknown name, or a module lacking a recipe's attributes, is an error naming it."""
    if name in RECIPES:
        return importlib.import_module(RECIPES[name])
    if not (name.endswith(".py") or "/" in name or "." in name):
        raise KeyError(f"unknown recipe {name!r}; recipes: {', '.join(RECIPES)} (or a file / package.module "
                       "of your own)")
    from tasks.registry import load_ref

    try:
        module = load_ref(name)
    except ValueError as error:
        raise KeyError(f"recipe {name!r}: {error}") from None
    missing = [attribute for attribute in RECIPE_ATTRIBUTES if not hasattr(module, attribute)]
    if missing:
        raise KeyError(f"recipe {name!r} defines no {', '.join(missing)} (a recipe module defines "
                       f"{', '.join(RECIPE_ATTRIBUTES)})")
    return module


def label(name: str, module) -> str:
    """The recipe's name in run.recipe (the wandb group): the project's name, else the module's NAME or stem."""
    if name in RECIPES:
        return name
    return str(getattr(module, "NAME", None) or module.__name__.rsplit(".", 1)[-1])
