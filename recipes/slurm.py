"""Helpers that scripts/slurm/train.sbatch calls on the job's first node: `job-env` fails in one line when another
job holds the run folder, exits 3 when `dara.preflight.node_checks` names a problem (not requeued), else prints the
batch script's shell variables; `wait-nodes` waits until every node joined Ray."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time

from omegaconf import OmegaConf

from dara.config import compose as compose_run  # the config `python -m dara.train <overrides>` composes


def job_env(cfg, cpus: int | None = None) -> dict[str, str]:
    """Shell variables for the batch script ("": not set by the config)."""
    from dara.preflight import ray_ports
    ray_init = OmegaConf.select(cfg, "ray_kwargs.ray_init", default={}) or {}
    ports = ray_ports.plan(cfg, cpus if cpus is not None else len(os.sched_getaffinity(0)))
    values = {
        "RUN_NAME": cfg.run.name, "RUN_DIR": os.path.abspath(str(cfg.run.output_dir)),
        "CHECKPOINT_DIR": os.path.abspath(str(cfg.trainer.default_local_dir)),
        "SAVE_FREQ": int(cfg.trainer.save_freq), "TOTAL_STEPS": cfg.trainer.total_training_steps,
        "SIGNAL_LEAD_MINUTES": cfg.run.hardware.signal_lead_minutes, "TRAINER_DEVICE": cfg.trainer.device,
        "CONFIG_GPUS_PER_NODE": cfg.trainer.n_gpus_per_node, "CONFIG_RAY_NUM_CPUS": ray_init.get("num_cpus"),
        "CONFIG_RAY_NUM_GPUS": ray_init.get("num_gpus"),
        "CONFIG_RAY_OBJECT_STORE_MEMORY": ray_init.get("object_store_memory"), "RAY_CPUS": ports.cpus,
        # the port range: RAY_PORT_UNITS consecutive units of RAY_PORT_UNIT ports from RAY_PORT_BASE, starting at
        # one of RAY_PORT_PLACES units; Ray's fixed ports are its first RAY_FIXED_PORTS, the rest its workers'
        "RAY_PORT_BASE": ray_ports.PORT_BASE, "RAY_PORT_UNIT": ray_ports.PORT_UNIT, "RAY_PORT_UNITS": ports.units,
        "RAY_PORT_PLACES": ports.places, "RAY_FIXED_PORTS": ray_ports.FIXED_PORTS,
    }
    return {key: "" if value is None else str(value) for key, value in values.items()}


def check_node(cfg, time_limit: str | None, calibration: str | None, cpus: int | None = None) -> bool:
    """The run folder is free (else exit) and the node checks pass (printed to the job's log)."""
    from dara.preflight import CalibrationError, load_calibration, node_checks, parse_time_limit
    from dara.run_folder import RunFolderError
    from dara.run_lock import check_run_folder_free
    try:
        check_run_folder_free(os.path.abspath(str(cfg.run.output_dir)))
    except RunFolderError as error:
        raise SystemExit(f"[dara-slurm] {error}") from None
    try:
        measured = load_calibration(calibration) if calibration else None
    except CalibrationError as error:
        print(f"[dara-slurm] {error}", file=sys.stderr, flush=True)
        return False
    report = node_checks(cfg, time_limit_minutes=parse_time_limit(time_limit), calibration=measured, cpus=cpus)
    lines = [f"node check, {section.title}: {line}" for section in report.sections for line in section.lines]
    lines += [f"this node cannot run the job: {problem}" for problem in report.problems]
    print("".join(f"[dara-slurm] {line}\n" for line in lines), end="", file=sys.stderr, flush=True)
    return report.ok


def parse_expected(pairs: list[str]) -> dict[str, str]:
    expected = {}
    for pair in pairs:
        node, sep, ip = pair.partition("=")
        if not sep or not node or not ip:
            raise SystemExit(f"[dara-slurm] --expect takes NODE=IP pairs, got {pair!r}")
        expected[ip] = node
    return expected


def wait_for_nodes(address: str, expected: dict[str, str], timeout: float, node_ip: str | None = None) -> int:
    """Wait until a Ray node of every expected address ({ip: node}) is alive; SystemExit naming those missing."""
    import ray
    ray.init(address=address, logging_level="ERROR", log_to_driver=False,
             **({"_node_ip_address": node_ip} if node_ip else {}))
    try:
        deadline = time.monotonic() + timeout
        while True:
            alive = {node["NodeManagerAddress"] for node in ray.nodes() if node.get("Alive")}
            missing = [f"{name} ({ip})" for ip, name in expected.items() if ip not in alive]
            print(f"[dara-slurm] ray nodes alive: {len(expected) - len(missing)}/{len(expected)}", flush=True)
            if not missing:
                return len(alive)
            if time.monotonic() > deadline:
                raise SystemExit(f"[dara-slurm] Ray nodes that did not join within {timeout:.0f}s: "
                                 f"{', '.join(missing)}; see that node's ray_node.sh lines in the job log")
            time.sleep(2)
    finally:
        ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    top = argparse.ArgumentParser(prog="python -m recipes.slurm")
    commands = top.add_subparsers(dest="command", required=True)
    env = commands.add_parser("job-env", help="check this node, then print the run's shell variables")
    env.add_argument("--time-limit", default=None, help="the job's time limit (squeue %%l); default: the cluster's")
    env.add_argument("--calibration", default=None, help="a gpu_smoke calibration file (step minutes)")
    env.add_argument("--cpus", type=int, default=None, help="the node's allocated CPUs (default: this process's)")
    env.add_argument("overrides", nargs="*")
    wait = commands.add_parser("wait-nodes", help="wait until every node of the allocation joined Ray")
    wait.add_argument("--address", required=True, help="the Ray head's HOST:PORT")
    wait.add_argument("--expect", nargs="+", required=True, metavar="NODE=IP", help="the nodes that must join")
    wait.add_argument("--node-ip", default=None, help="this node's Ray address (the head's)")
    wait.add_argument("--timeout", type=float, default=300.0)
    args = top.parse_args(argv)
    if args.command == "wait-nodes":
        wait_for_nodes(args.address, parse_expected(args.expect), args.timeout, args.node_ip)
        return 0
    cfg = compose_run(args.overrides)
    cpus = args.cpus if args.cpus is not None else len(os.sched_getaffinity(0))
    if not check_node(cfg, args.time_limit, args.calibration, cpus):
        return 3
    print("".join(f"{key}={shlex.quote(value)}\n" for key, value in job_env(cfg, cpus).items()), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
