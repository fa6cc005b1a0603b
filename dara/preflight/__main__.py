"""`python -m dara.preflight <dara.train overrides> [--nodes N] [--gpus-per-node G] [--time T] [--skip-env]`."""

from __future__ import annotations

import argparse
import sys

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from dara.config_checks import composition_error_line
from dara.preflight import compose, parse_time_limit, preflight


def main(argv: list[str] | None = None) -> int:
    top = argparse.ArgumentParser(prog="python -m dara.preflight",
                                  description="Would this run start and finish on this allocation? (starts nothing)")
    top.add_argument("overrides", nargs="*", help="the Hydra overrides of python -m dara.train")
    top.add_argument("--nodes", type=int, default=None, help="nodes (default: the cluster config's trainer.nnodes)")
    top.add_argument("--gpus-per-node", type=int, default=None, help="default: trainer.n_gpus_per_node")
    top.add_argument("--time", default=None, help="the job's time limit in Slurm's --time form (default: the cluster's)")
    top.add_argument("--skip-env", action="store_true", help="skip the environment check (flash_attn, vllm, driver)")
    args = top.parse_args(argv)
    try:
        cfg = compose(args.overrides)
    except (HydraException, OmegaConfBaseException) as error:  # they name the bad override
        print(f"[preflight] cannot compose the run: {composition_error_line(error)}", file=sys.stderr)
        return 2
    report = preflight(cfg, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                       time_limit_minutes=parse_time_limit(args.time), skip_env=args.skip_env)
    print(report.text(), flush=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
