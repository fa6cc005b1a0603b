"""Ray's ports per job: how many a node needs, and the range scripts/slurm/train.sbatch gives it.

Every Ray worker holds one port of the raylet's range (used up: "No available ports", verl's actor never starts),
and Ray 2.60 pre-starts one worker per logical CPU. A job's range: FIXED_PORTS + one per Ray CPU + verl's workers
+ SPARE_PORTS, in whole PORT_UNITs in PORT_BASE..PORT_END (below Linux's ephemeral range), locked per node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from dara.preflight.report import Section

PORT_BASE, PORT_END, PORT_UNIT = 20000, 32768, 256
FIXED_PORTS = 16
ALL_UNITS = (PORT_END - PORT_BASE) // PORT_UNIT  # 49
SPARE_PORTS = 32  # one-off tasks and helpers that come and go (verl's rendezvous task, a restarted worker)


@dataclass(frozen=True)
class RayPorts:
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
    def places(self) -> int:
        return ALL_UNITS - self.units + 1

    def arithmetic(self) -> str:
        return (f"{FIXED_PORTS} fixed + {self.cpus} pre-started workers (one per Ray CPU) + {self.verl_workers} verl "
                f"workers + {SPARE_PORTS} spare = {self.needed} -> {self.units} unit(s) of {PORT_UNIT} = {self.ports} "
                f"ports ({self.ports - FIXED_PORTS} worker ports); {PORT_BASE}-{PORT_END - 1} holds "
                f"{ALL_UNITS // self.units} such jobs per node")


def verl_workers(cfg: DictConfig) -> dict[str, int]:
    """verl 0.9.1's Ray worker processes of the run, by kind (verl's v1 trainer always starts TransferQueue)."""
    gpus = int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)
    rollout = cfg.actor_rollout_ref.rollout
    replica = math.prod(int(OmegaConf.select(rollout, key, default=1) or 1) for key in (
        "tensor_model_parallel_size", "data_parallel_size", "pipeline_model_parallel_size"))
    storage = OmegaConf.select(cfg, "transfer_queue.backend.SimpleStorage.num_data_storage_units", default=1)
    return {"TaskRunner": 1, "FSDP workers (one per GPU)": gpus, "vLLM servers (GPUs / TP x DP x PP)": max(1, gpus // replica),
            "agent-loop workers (rollout.agent.num_workers)": int(OmegaConf.select(rollout, "agent.num_workers",
                                                                                   default=0) or 0),
            "reward-loop workers (reward.num_workers)": int(OmegaConf.select(cfg, "reward.num_workers", default=0) or 0),
            "TransferQueue (controller + storage units)": 1 + int(storage or 1)}


def plan(cfg: DictConfig, allocation_cpus: int | None) -> RayPorts | None:
    """The range for `ray_kwargs.ray_init.num_cpus` (the CPU path), else the allocation's CPUs (None: unknown)."""
    configured = OmegaConf.select(cfg, "ray_kwargs.ray_init.num_cpus", default=None)
    cpus = int(configured) if configured is not None else allocation_cpus
    return None if cpus is None else RayPorts(cpus, sum(verl_workers(cfg).values()))


def check_ray_ports(cfg: DictConfig, section: Section, allocation_cpus: int | None = None) -> None:
    workers = verl_workers(cfg)
    total = sum(workers.values())
    section.line("verl's Ray workers: " + " + ".join(f"{n} {kind}" for kind, n in workers.items()) + f" = {total}")
    ports = plan(cfg, allocation_cpus)
    if ports is None:
        fits = ", ".join(f"up to {units * PORT_UNIT - FIXED_PORTS - total - SPARE_PORTS} CPUs in {units} unit(s)"
                         for units in (1, 2, 3))
        section.line(f"Ray's CPUs are the allocation's (train.sbatch sizes the range from them): {fits}; e.g. a "
                     f"256-CPU node: {RayPorts(256, total).arithmetic()}")
        return
    section.line(f"{ports.cpus} Ray CPUs: {ports.arithmetic()}")
    if ports.places < 1:
        section.fail(f"{ports.ports} ports per job do not fit in {PORT_BASE}-{PORT_END - 1}: give Ray fewer CPUs "
                     "(ray_kwargs.ray_init.num_cpus)")
