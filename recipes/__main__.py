"""`python -m recipes <name> [--dry-run] [--launcher local|slurm] [--seeds ...]`: run one paper table or figure
(docs/experiments.md)."""

from __future__ import annotations

import argparse
import sys

from recipes import RECIPES, label, load
from recipes.runner import (
    RecipeError,
    SlurmOptions,
    describe,
    launch_slurm,
    preflight_runs,
    run_in_turn,
    summary_line,
    with_options,
)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m recipes", description=__doc__.splitlines()[0])
    add = top.add_argument
    add("recipe", help=f"'list', one of: {', '.join(RECIPES)}, or a recipe of your own (FILE.py or package.module)")
    add("--dry-run", action="store_true", help="list the runs (and the sbatch commands); start nothing")
    add("--launcher", choices=("local", "slurm"), default="local")
    add("--seeds", type=int, nargs="+", default=None, help="replace the recipe's seeds")
    add("--cluster", default=None, help="replace the recipe's cluster choice (conf/cluster/*.yaml)")
    add("--output-root", default=None, help="run.output_root of every run (default: outputs)")
    add("--steps", type=int, default=None, help="trainer.total_training_steps of every run")
    add("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE",
        help="a further Hydra override for every run (repeatable)")
    add("--only", default=None, help="keep only runs whose name contains this text")
    add("--commit", action="store_true", help="a race: git-commit each finished run's kept logs as it goes")
    add("--preflight", action="store_true", help="python -m dara.preflight for every run (with --time); start nothing")
    add("--skip-env", action="store_true", help="preflight without the checks of this machine (environment, disk)")
    add("--calibration", default=None, metavar="FILE", help="minutes per step measured by the gpu_smoke recipe")
    add("--calibrate-for", default=None, metavar="CLUSTER", help="gpu_smoke: the cluster file of this node's GPU")
    slurm = top.add_argument_group("slurm launcher")
    slurm.add_argument("--partition", default=None)
    slurm.add_argument("--account", default=None)
    slurm.add_argument("--time", default=None, help="sbatch --time (default: the cluster file's job time limit)")
    slurm.add_argument("--sbatch-arg", dest="sbatch_args", action="append", default=[], help="e.g. --sbatch-arg=--qos=high")
    slurm.add_argument("--python", default=None, help="interpreter on the nodes (default: the checkout's .venv)")
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.recipe == "list":
            for name in RECIPES:
                module = load(name)
                print(f"{name:20s} {len(module.runs(module.DEFAULT_SEEDS)):4d} runs  {module.DESCRIPTION}")
            return 0
        module = load(args.recipe)
        seeds = tuple(args.seeds) if args.seeds is not None else module.DEFAULT_SEEDS
        # run.recipe is the wandb group: every run of one table or figure lands in one group
        runs = with_options(module.runs(seeds), output_root=args.output_root, cluster=args.cluster,
                            extra=[f"run.recipe={label(args.recipe, module)}", *args.extra], total_steps=args.steps)
        runs = [run for run in runs if not args.only or args.only in run.name]
        print(f"[recipes] {label(args.recipe, module)}: {summary_line(runs)}", flush=True)
        if args.preflight:
            results = preflight_runs(runs, skip_env=args.skip_env, time_limit=args.time, calibration=args.calibration)
            failed = sum(len(group) for group, report in results if not report.ok)
            print(f"[recipes] preflight: {len(runs) - failed} of {len(runs)} runs pass, {failed} fail", flush=True)
            return 1 if failed else 0
        args.python_exe = args.python or sys.executable
        if args.launcher == "slurm" and hasattr(module, "LOCAL_ONLY"):
            raise RecipeError(module.LOCAL_ONLY)
        if args.dry_run:
            print(describe(runs))
            if hasattr(module, "describe_plan"):
                print(module.describe_plan(runs))
        if args.launcher == "slurm":
            options = SlurmOptions(partition=args.partition, account=args.account, time=args.time,
                                   extra_args=tuple(args.sbatch_args), python=args.python,
                                   calibration=args.calibration)
            launch_slurm(runs, options, dry_run=args.dry_run, skip_env=args.skip_env)
        elif not args.dry_run:
            if hasattr(module, "run_locally"):
                return module.run_locally(runs, args)
            return 1 if run_in_turn(runs, python=args.python_exe) else 0
        return 0
    except (KeyError, RecipeError) as error:
        print(f"[recipes] error: {error.args[0] if error.args else error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
