"""`python -m recipes <name> [--dry-run] [--launcher local|slurm] [--seeds ...]`: run one paper table or figure.

    python -m recipes list                                   # the recipes and their run counts
    python -m recipes toolrl_main --dry-run                  # each run: name, status, folder, overrides
    python -m recipes toolrl_main --launcher slurm --partition gpu --time 24:00:00
    python -m recipes group_size --seeds 0 --launcher local --set trainer.total_training_steps=10
    python -m recipes math_main --preflight [--skip-env]     # would every run start and finish? starts nothing
    python -m recipes gpu_smoke                              # the first GPU run: checks and calibrates
    python -m recipes cpu_headline --pilot                   # a recipe's pilot: writes the protocol its runs read
    python -m recipes race_format --commit                   # a race that commits each finished run's logs
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
    top.add_argument("--pilot", action="store_true",
                     help="the recipe's pilot (cpu_headline, race_format, race_length): runs it and writes the protocol its runs read")
    top.add_argument("--commit", action="store_true",
                     help="the recipe's race (race_format, race_length): git-commit each finished run's kept logs as it goes")
    top.add_argument("--preflight", action="store_true",
                     help="run python -m dara.preflight for every run (with --time); start nothing")
    top.add_argument("--skip-env", action="store_true",
                     help="preflight (also the Slurm launcher's) without the checks of this machine (environment, disk)")
    top.add_argument("--calibration", default=None, metavar="FILE",
                     help="minutes per step measured by `python -m recipes gpu_smoke` (preflight and Slurm jobs)")
    slurm = top.add_argument_group("slurm launcher")
    slurm.add_argument("--partition", default=None)
    slurm.add_argument("--account", default=None)
    slurm.add_argument("--time", default=None,
                       help="sbatch --time of every job (default: the cluster file's job_time_limit_minutes); the "
                            "preflight checks each run against it")
    slurm.add_argument("--sbatch-arg", dest="sbatch_args", action="append", default=[],
                       help="a further sbatch option, e.g. --sbatch-arg=--qos=high (repeatable)")
    slurm.add_argument("--python", default=None, help="interpreter on the nodes (default: the checkout's .venv)")
    top.add_argument("--calibrate-for", default=None, metavar="CLUSTER",
                     help="gpu_smoke: the cluster file whose GPU this node has (default: matched by name and memory)")
    return top


def list_recipes() -> None:
    for name in RECIPES:
        module = load(name)
        try:
            count = f"{len(module.runs(module.DEFAULT_SEEDS)):4d} runs"
        except RecipeError as error:  # a recipe whose runs need a file its pilot writes
            count = f"   ? runs  ({error})"
        print(f"{name:16s} {count}  {module.DESCRIPTION}")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.recipe == "list":
        list_recipes()
        return 0
    try:
        module = load(args.recipe)
        if args.pilot:
            if not hasattr(module, "pilot"):
                raise RecipeError(f"recipe {args.recipe!r} has no pilot")
            args.python_exe = args.python or sys.executable
            return module.pilot(args)
        seeds = tuple(args.seeds) if args.seeds is not None else module.DEFAULT_SEEDS
        # run.recipe is the wandb group: every run of one table or figure lands in one group
        runs = with_options(module.runs(seeds), output_root=args.output_root, cluster=args.cluster,
                            extra=[f"run.recipe={label(args.recipe, module)}", *args.extra], total_steps=args.steps)
        if args.only:
            runs = [run for run in runs if args.only in run.name]
        print(f"[recipes] {label(args.recipe, module)}: {summary_line(runs)}", flush=True)
        if args.preflight:
            results = preflight_runs(runs, skip_env=args.skip_env, time_limit=args.time,
                                     calibration=args.calibration)
            failed = sum(len(group) for group, report in results if not report.ok)
            print(f"[recipes] preflight: {len(runs) - failed} of {len(runs)} runs pass, {failed} fail", flush=True)
            return 1 if failed else 0
        args.python_exe = args.python or sys.executable
        if args.dry_run:
            print(describe(runs))
            if hasattr(module, "describe_plan"):
                print(module.describe_plan(runs))
            if args.launcher == "slurm":
                submit(module, runs, args, dry_run=True)
            return 0
        if args.launcher == "local":
            if hasattr(module, "run_locally"):
                return module.run_locally(runs, args)
            return 1 if launch_local(runs) else 0
        submit(module, runs, args)
        return 0
    except (KeyError, RecipeError) as error:
        print(f"[recipes] error: {error.args[0] if error.args else error}", file=sys.stderr)
        return 2


def submit(module, runs, args, dry_run: bool = False) -> None:
    """The recipe's own Slurm submission (gpu_smoke), else one job array per seed group (train.sbatch)."""
    if not hasattr(module, "submit"):
        launch_slurm(runs, slurm_options(args), dry_run=dry_run, skip_env=args.skip_env)
        return
    if not dry_run:
        failed = [g for g, report in preflight_runs(runs, skip_env=args.skip_env, time_limit=args.time) if not report.ok]
        if failed:
            raise RecipeError(f"preflight failed for {args.recipe}: nothing submitted")
    extra = [*(("--calibrate-for", args.calibrate_for) if args.calibrate_for else ()),
             *(item for setting in args.extra if not setting.startswith("run.recipe=") for item in ("--set", setting))]
    module.submit(runs, slurm_options(args), dry_run=dry_run, extra_args=("--output-root", str(runs[0].root), *extra))


def slurm_options(args) -> SlurmOptions:
    return SlurmOptions(partition=args.partition, account=args.account, time=args.time,
                        extra_args=tuple(args.sbatch_args), python=args.python, calibration=args.calibration)


if __name__ == "__main__":
    sys.exit(main())
