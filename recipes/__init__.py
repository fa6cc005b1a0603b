"""Paper recipes: each enumerates the runs of one table or figure (recipes/paper.py, recipes/race.py); a recipe of
your own is a file or package.module (`python -m recipes path/to/my_recipe.py --dry-run`)."""

from __future__ import annotations

import importlib

# A recipe defines DESCRIPTION, DEFAULT_SEEDS and runs(seeds) -> list[Run]; it may also define run_locally(runs,
# args) and describe_plan(runs) for its own procedure, and LOCAL_ONLY (why it has no Slurm launcher).
PAPER = ("toolrl_main", "group_size", "three_rewards", "math_main", "instruct_vs_thinking", "fixed_weight",
         "extra_baselines", "rvpo", "smoke")
RECIPES = {**{name: f"recipes.paper:RECIPES.{name}" for name in PAPER}, "gpu_smoke": "recipes.gpu_smoke",
           "cpu_headline": "recipes.race:CPU_HEADLINE", "race_format": "recipes.race:RACE_FORMAT",
           "race_length": "recipes.race:RACE_LENGTH"}
RECIPE_ATTRIBUTES = ("DESCRIPTION", "DEFAULT_SEEDS", "runs")


def load(name: str):
    """The recipe `name`: the project's, or your own by file (`.py`) or import path (package.module)."""
    if name in RECIPES:
        module, _, attribute = RECIPES[name].partition(":")
        found = importlib.import_module(module)
        for part in filter(None, attribute.split(".")):
            found = found[part] if isinstance(found, dict) else getattr(found, part)
        return found
    if not (name.endswith(".py") or "/" in name or "." in name):
        raise KeyError(f"unknown recipe {name!r}; recipes: {', '.join(RECIPES)} (or a file / package.module "
                       "of your own)")
    from tasks.registry import load_ref
    try:
        module = load_ref(name)
    except ValueError as error:
        raise KeyError(f"recipe {name!r}: {error}") from None
    if missing := [attribute for attribute in RECIPE_ATTRIBUTES if not hasattr(module, attribute)]:
        raise KeyError(f"recipe {name!r} defines no {', '.join(missing)} (a recipe module defines "
                       f"{', '.join(RECIPE_ATTRIBUTES)})")
    return module


def label(name: str, module) -> str:
    """run.recipe (the wandb group): the project's name, else the module's NAME or stem."""
    return name if name in RECIPES else str(getattr(module, "NAME", None) or module.__name__.rsplit(".", 1)[-1])
