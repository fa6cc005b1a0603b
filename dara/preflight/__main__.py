"""`python -m dara.preflight <dara.train overrides> [--nodes N] [--gpus-per-node G] [--time T] [--calibration FILE]
[--skip-env]`; the overrides may stand before, between or after the flags."""

from __future__ import annotations

import argparse
import sys

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from dara.config_checks import composition_error_line
from dara.preflight import CalibrationError, compose, load_calibration, parse_time_limit, preflight


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    top = argparse.ArgumentParser(prog="python -m dara.preflight",
                                  description="Would this run start and finish on this allocation? (starts nothing)")
    top.add_argument("overrides", nargs="*", help="the Hydra overrides of python -m dara.train")
    top.add_argument("--nodes", type=int, default=None, help="nodes (default: the cluster config's trainer.nnodes)")
    top.add_argument("--gpus-per-node", type=int, default=None, help="default: trainer.n_gpus_per_node")
    top.add_argument("--time", default=None, help="the job's time limit in Slurm's --time form (default: the cluster's)")
    top.add_argument("--calibration", default=None, metavar="FILE",
                     help="minutes per step measured by python -m recipes gpu_smoke (instead of the cluster's estimates)")
    top.add_argument("--skip-env", action="store_true",
                     help="skip the checks of this machine (torch/vllm/flash_attn/driver, free disk)")
    return top.parse_intermixed_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        calibration = load_calibration(args.calibration) if args.calibration else None
        cfg = compose(args.overrides)
    except CalibrationError as error:
        print(f"[preflight] {error}", file=sys.stderr)
        return 2
    except (HydraException, OmegaConfBaseException) as error:  # they name the bad override
        print(f"[preflight] cannot compose the run: {composition_error_line(error)}", file=sys.stderr)
        return 2
    report = preflight(cfg, nodes=args.nodes, gpus_per_node=args.gpus_per_node, skip_env=args.skip_env,
                       time_limit_minutes=parse_time_limit(args.time), calibration=calibration)
    print(report.text(), flush=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
