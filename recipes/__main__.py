"""`python -m recipes <name> [--dry-run] [--launcher local|slurm] [--seeds ...]`: run one paper table or figure.

    python -m recipes list                                   # the recipes and their run counts
    python -m recipes toolrl_main --dry-run                  # each run: name, status, folder, overrides
    python -m recipes toolrl_main --launcher slurm --partition gpu --time 24:00:00
    python -m recipes group_size --seeds 0 --launcher local --set trainer.total_training_steps=10
    python -m recipes math_main --preflight [--skip-env]     # would every run start and finish? starts nothing
"""

from __future__ import annotations

import argparse
import sys

from recipes import RECIPES, label, load
from recipes.runner import (
    RecipeError,
    SlurmOptions,
    describe,
    launch_local,
    launch_slurm,
    preflight_runs,
    summary_line,
    with_options,
)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m recipes", description=__doc__.splitlines()[0])
    top.add_argument("recipe", help=f"'list', one of: {', '.join(RECIPES)}, or a recipe of your own (FILE.py or "
                                    "package.module)")
    top.add_argument("--dry-run", action="store_true", help="list the runs (and the sbatch commands); start nothing")
    top.add_argument("--launcher", choices=("local", "slurm"), default="local")
    top.add_argument("--seeds", type=int, nargs="+", default=None, help="replace the recipe's seeds")
    top.add_argument("--cluster", default=None, help="replace the recipe's cluster choice (conf/cluster/*.yaml)")
    top.add_argument("--output-root", default=None, help="run.output_root of every run (default: outputs)")
    top.add_argument("--steps", type=int, default=None, help="trainer.total_training_steps of every run")
    top.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                     help="a further Hydra override for every run (repeatable)")
    top.add_argument("--only", default=None, help="keep only runs whose name contains this text")
    top.add_argument("--preflight", action="store_true",
                     help="run python -m dara.preflight for every run (with --time); start nothing")
    top.add_argument("--skip-env", action="store_true",
                     help="preflight (also the Slurm launcher's) without the environment check")
    slurm = top.add_argument_group("slurm launcher")
    slurm.add_argument("--partition", default=None)
    slurm.add_argument("--account", default=None)
    slurm.add_argument("--time", default=None, help="sbatch --time (the job requeues itself shortly before it)")
    slurm.add_argument("--sbatch-arg", dest="sbatch_args", action="append", default=[],
                       help="a further sbatch option, e.g. --sbatch-arg=--qos=high (repeatable)")
    slurm.add_argument("--python", default=None, help="interpreter on the nodes (default: the checkout's .venv)")
    return top


def list_recipes() -> None:
    for name in RECIPES:
        module = load(name)
        print(f"{name:16s} {len(module.runs(module.DEFAULT_SEEDS)):4d} runs  {module.DESCRIPTION}")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.recipe == "list":
        list_recipes()
        return 0
    try:
        module = load(args.recipe)
        seeds = tuple(args.seeds) if args.seeds is not None else module.DEFAULT_SEEDS
        # run.recipe is the wandb group: every run of one table or figure lands in one group
        runs = with_options(module.runs(seeds), output_root=args.output_root, cluster=args.cluster,
                            extra=[f"run.recipe={label(args.recipe, module)}", *args.extra], total_steps=args.steps)
        if args.only:
            runs = [run for run in runs if args.only in run.name]
        print(f"[recipes] {label(args.recipe, module)}: {summary_line(runs)}", flush=True)
        if args.preflight:
            results = preflight_runs(runs, skip_env=args.skip_env, time_limit=args.time)
            failed = sum(len(group) for group, report in results if not report.ok)
            print(f"[recipes] preflight: {len(runs) - failed} of {len(runs)} runs pass, {failed} fail", flush=True)
            return 1 if failed else 0
        if args.dry_run:
            print(describe(runs))
            if args.launcher == "slurm":
                launch_slurm(runs, slurm_options(args), dry_run=True)
            return 0
        if args.launcher == "local":
            return 1 if launch_local(runs) else 0
        launch_slurm(runs, slurm_options(args), skip_env=args.skip_env)
        return 0
    except (KeyError, RecipeError) as error:
        print(f"[recipes] error: {error.args[0] if error.args else error}", file=sys.stderr)
        return 2


def slurm_options(args) -> SlurmOptions:
    return SlurmOptions(partition=args.partition, account=args.account, time=args.time,
                        extra_args=tuple(args.sbatch_args), python=args.python)


if __name__ == "__main__":
    sys.exit(main())
