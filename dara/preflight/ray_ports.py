"""Ray's ports per job: how many worker ports a node needs, and the range scripts/slurm/train.sbatch gives it.

Every Ray worker process (a pre-started worker, a task's worker, an actor) holds one port of the raylet's
`--min-worker-port`..`--max-worker-port` range; when the range is used up the raylet logs "No available ports"
and the worker (an actor of verl) never starts. Ray 2.60's raylet pre-starts one Python worker per logical CPU
of its node (`ray/_private/services.py`: `--num_prestart_python_workers=<num_cpus>`), so a whole 256-thread node
uses 256 worker ports before verl starts any of its own workers (`verl_workers`: about 40 on an 8-GPU run).

A job's range: Ray's fixed ports (GCS, client server, dashboard agent, node manager, object manager, metrics,
runtime-env agent, dashboard: the sbatch puts them at the range's first `FIXED_PORTS`) + one worker port per
Ray CPU + verl's workers + `SPARE_PORTS`, rounded up to whole units of `PORT_UNIT` ports in
`PORT_BASE`..`PORT_END` (below Linux's ephemeral range, 32768-). The sbatch takes the job's units on the head
with one lock file per unit, so two jobs on one node never share a port.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from dara.preflight.report import Section

PORT_BASE, PORT_END = 20000, 32768
PORT_UNIT = 256
FIXED_PORTS = 16
ALL_UNITS = (PORT_END - PORT_BASE) // PORT_UNIT  # 49
SPARE_PORTS = 32  # one-off tasks and helpers that come and go (verl's rendezvous task, a restarted worker)


@dataclass(frozen=True)
class RayPorts:
    """The port range of one job's Ray node with `cpus` logical CPUs, next to `verl_workers` of verl's."""

    cpus: int
    verl_workers: int

    @property
    def needed(self) -> int:
        return FIXED_PORTS + self.cpus + self.verl_workers + SPARE_PORTS

    @property
    def units(self) -> int:
        return math.ceil(self.needed / PORT_UNIT)

    @property
    def ports(self) -> int:
        return self.units * PORT_UNIT

    @property
    def worker_ports(self) -> int:
        return self.ports - FIXED_PORTS

    @property
    def places(self) -> int:
        """Where the range can start: the runs of `units` consecutive units in PORT_BASE..PORT_END."""
        return ALL_UNITS - self.units + 1

    def arithmetic(self) -> str:
        return (f"{FIXED_PORTS} fixed + {self.cpus} pre-started workers (one per Ray CPU) + {self.verl_workers} "
                f"verl workers + {SPARE_PORTS} spare = {self.needed} -> {units_text(self.units)} = {self.ports} "
                f"ports ({self.worker_ports} worker ports); {PORT_BASE}-{PORT_END - 1} holds {ALL_UNITS // self.units}"
                " such jobs per node")


def units_text(units: int) -> str:
    return f"{units} unit{'s' if units > 1 else ''} of {PORT_UNIT}"


def max_cpus(units: int, verl_workers: int) -> int:
    """The most Ray CPUs whose range fits `units` units."""
    return units * PORT_UNIT - FIXED_PORTS - verl_workers - SPARE_PORTS


def verl_workers(cfg: DictConfig) -> dict[str, int]:
    """verl 0.9.1's Ray workers of the run (worker processes, each with a port), by kind, from its config: the
    TaskRunner, one FSDP worker per GPU (actor, rollout and reference share it), one vLLM server per rollout
    replica (TP x DP x PP GPUs), the agent-loop and reward-loop workers, TransferQueue's controller and storage
    units (verl's v1 trainer always starts TransferQueue)."""
    gpus = int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)
    rollout = cfg.actor_rollout_ref.rollout
    replica = 1
    for key in ("tensor_model_parallel_size", "data_parallel_size", "pipeline_model_parallel_size"):
        replica *= int(OmegaConf.select(rollout, key, default=1) or 1)
    storage = OmegaConf.select(cfg, "transfer_queue.backend.SimpleStorage.num_data_storage_units", default=1)
    return {
        "TaskRunner": 1,
        "FSDP workers (one per GPU)": gpus,
        "vLLM servers (GPUs / TP x DP x PP)": max(1, gpus // replica),
        "agent-loop workers (rollout.agent.num_workers)": int(OmegaConf.select(rollout, "agent.num_workers",
                                                                               default=0) or 0),
        "reward-loop workers (reward.num_workers)": int(OmegaConf.select(cfg, "reward.num_workers", default=0) or 0),
        "TransferQueue (controller + storage units)": 1 + int(storage or 1),
    }


def ray_cpus(cfg: DictConfig, allocation_cpus: int | None) -> int | None:
    """Ray's logical CPUs per node: the config's `ray_kwargs.ray_init.num_cpus` (the CPU path), else the
    allocation's CPUs (a GPU cluster; None when unknown, as on a login node)."""
    configured = OmegaConf.select(cfg, "ray_kwargs.ray_init.num_cpus", default=None)
    return int(configured) if configured is not None else allocation_cpus


def plan(cfg: DictConfig, allocation_cpus: int | None) -> RayPorts | None:
    cpus = ray_cpus(cfg, allocation_cpus)
    return None if cpus is None else RayPorts(cpus, sum(verl_workers(cfg).values()))


def check_ray_ports(cfg: DictConfig, section: Section, allocation_cpus: int | None = None) -> None:
    """The arithmetic of the job's Ray port range (for `allocation_cpus`, or per CPU count when not known)."""
    workers = verl_workers(cfg)
    total = sum(workers.values())
    section.line("verl's Ray workers: " + " + ".join(f"{n} {kind}" for kind, n in workers.items()) + f" = {total}")
    ports = plan(cfg, allocation_cpus)
    if ports is None:
        fits = ", ".join(f"up to {max_cpus(units, total)} CPUs {units_text(units)} ({units * PORT_UNIT - FIXED_PORTS}"
                         " worker ports)" for units in (1, 2, 3))
        section.line(f"Ray starts with the allocation's CPUs and pre-starts a worker per CPU: a job's ports = "
                     f"{FIXED_PORTS} fixed + CPUs + {total} + {SPARE_PORTS} spare, in whole units: {fits}; the job "
                     "sizes its range from its allocation (train.sbatch)")
        section.line(f"e.g. a 256-CPU node: {RayPorts(256, total).arithmetic()}")
        return
    section.line(f"{ports.cpus} Ray CPUs: {ports.arithmetic()}")
    if ports.places < 1:
        section.fail(f"{ports.ports} ports per job do not fit in {PORT_BASE}-{PORT_END - 1}: give Ray fewer CPUs "
                     "(ray_kwargs.ray_init.num_cpus)")
