"""The Ray port range of a job (dara/preflight/ray_ports.py): sized from Ray's CPUs (Ray pre-starts a worker per
CPU, each on its own worker port) plus verl's workers, against the arithmetic written out here; job-env hands it
to train.sbatch, whose own locking block (run here in bash, without Slurm) takes that many units per job and
never gives two jobs overlapping ports. tests/test_slurm.py checks the range a real job's Ray gets."""

from __future__ import annotations

import functools
import re
import subprocess

import pytest

from dara.preflight import compose, preflight
from dara.preflight.ray_ports import RayPorts, max_cpus, plan, verl_workers
from recipes.runner import SBATCH_SCRIPT
from recipes.slurm import job_env

MATH_H100 = ("task=deepscaler", "model=deepseek-r1-distill-qwen-1.5b", "cluster=h100_x8")


@functools.cache
def composed(*overrides: str):
    return compose(overrides)


def smallest_units(needed: int) -> int:
    units = 1
    while units * 256 < needed:
        units += 1
    return units


def test_port_range_from_a_cpu_count_against_the_arithmetic():
    for cpus in (1, 2, 16, 64, 128, 166, 167, 192, 224, 256, 384, 422, 423, 512):
        for workers in (0, 42):
            ports = RayPorts(cpus, workers)
            needed = 16 + cpus + workers + 32  # Ray's fixed ports + a pre-started worker per CPU + verl + spare
            assert ports.needed == needed and ports.units == smallest_units(needed)
            assert ports.ports == 256 * ports.units and ports.worker_ports == ports.ports - 16
            assert ports.worker_ports >= cpus + workers + 32  # every worker has a port, with room to spare
            assert ports.places == 49 - ports.units + 1  # 20000-32767 holds 49 units of 256
    # the node: 256 threads and verl's ~40 workers overflow the old 240 worker ports; now 2 units
    assert RayPorts(256, 42).worker_ports == 496 and RayPorts(166, 42).units == 1 and RayPorts(167, 42).units == 2
    assert [max_cpus(units, 42) for units in (1, 2)] == [166, 422]
    assert RayPorts(max_cpus(2, 42), 42).units == 2 and RayPorts(max_cpus(2, 42) + 1, 42).units == 3


def test_verl_workers_are_counted_from_the_run_config():
    cfg = composed(*MATH_H100)
    rollout = cfg.actor_rollout_ref.rollout
    workers = verl_workers(cfg)
    assert list(workers.values()) == [1, 8, 8 // rollout.tensor_model_parallel_size, rollout.agent.num_workers,
                                      cfg.reward.num_workers,
                                      1 + cfg.transfer_queue.backend.SimpleStorage.num_data_storage_units]
    assert sum(workers.values()) == 1 + 8 + 8 + 8 + 8 + 9 == 42
    # two 8-GPU nodes with TP 2: 16 FSDP workers, 8 vLLM servers
    two_nodes = composed(*MATH_H100, "trainer.nnodes=2", "actor_rollout_ref.rollout.tensor_model_parallel_size=2")
    assert list(verl_workers(two_nodes).values())[1:3] == [16, 8]
    # Ray's CPUs: the allocation's on a GPU cluster, the config's logical count on the CPU path
    assert plan(cfg, None) is None and plan(cfg, 256) == RayPorts(256, 42)
    smoke = composed("task=smoke")
    assert plan(smoke, 256).cpus == smoke.ray_kwargs.ray_init.num_cpus == 16


def test_job_env_hands_the_range_to_the_batch_script():
    env = job_env(composed(*MATH_H100), cpus=256)
    assert (env["RAY_CPUS"], env["RAY_PORT_UNITS"], env["RAY_PORT_PLACES"]) == ("256", "2", "48")
    assert (env["RAY_PORT_BASE"], env["RAY_PORT_UNIT"], env["RAY_FIXED_PORTS"]) == ("20000", "256", "16")
    smoke = job_env(composed("task=smoke"), cpus=256)
    assert (smoke["RAY_CPUS"], smoke["RAY_PORT_UNITS"]) == ("16", "1")


def test_preflight_prints_the_arithmetic_and_refuses_a_range_that_cannot_fit():
    text = preflight(composed(*MATH_H100), skip_env=True).text()
    assert "== ray ports: ok" in text
    assert ("verl's Ray workers: 1 TaskRunner + 8 FSDP workers (one per GPU) + 8 vLLM servers (GPUs / TP x DP x PP) "
            "+ 8 agent-loop workers (rollout.agent.num_workers) + 8 reward-loop workers (reward.num_workers) + 9 "
            "TransferQueue (controller + storage units) = 42") in text
    assert "up to 166 CPUs 1 unit of 256 (240 worker ports), up to 422 CPUs 2 units of 256 (496 worker ports)" in text
    assert ("e.g. a 256-CPU node: 16 fixed + 256 pre-started workers (one per Ray CPU) + 42 verl workers + 32 spare "
            "= 346 -> 2 units of 256 = 512 ports (496 worker ports)") in text
    huge = preflight(composed("task=smoke", "ray_kwargs.ray_init.num_cpus=20000"), skip_env=True)
    (problem,) = [p for p in huge.problems if p.startswith("ray ports:")]
    assert "do not fit in 20000-32767" in problem


def sbatch_port_block() -> str:
    """train.sbatch's own lines that take the job's port units (from `lock_port_units() {` to `PORT_LAST=`)."""
    text = SBATCH_SCRIPT.read_text()
    block = re.search(r"^lock_port_units\(\) \{.*?^PORT_LAST=.*?$", text, re.S | re.M)
    assert block, "train.sbatch no longer has its port-locking block"
    return block.group(0)


@pytest.mark.parametrize("units", [1, 2])
def test_the_batch_scripts_port_ranges_never_overlap(tmp_path, units):
    """Three jobs on one node whose job ids point at the same units: each takes job-env's number of units,
    held until it ends, and the ranges are disjoint and below Linux's ephemeral ports."""
    env = job_env(composed(*MATH_H100), cpus=256 if units == 2 else 64)
    assert env["RAY_PORT_UNITS"] == str(units)
    script = "\n".join([
        "set -euo pipefail",
        *(f"{key}={env[key]}" for key in ("RAY_PORT_BASE", "RAY_PORT_UNIT", "RAY_PORT_UNITS", "RAY_PORT_PLACES",
                                          "RAY_FIXED_PORTS")),
        f'HEAD=n1 LOCK_DIR={tmp_path} ID_NUM="$1" PORT_LOCKS=()',
        "log() { echo \"$*\"; }",
        sbatch_port_block(),
        'echo "$PORT $PORT_LAST"',
        "read -r _ <&0",  # hold the locks until the test closes stdin
    ])
    jobs, ranges = [], []
    for job_id in (7, 7, 8):  # one after the other: each holds its locks before the next starts
        jobs.append(subprocess.Popen(["bash", "-c", script, "job", str(job_id)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True))
        ranges.append(tuple(int(x) for x in jobs[-1].stdout.readline().split()))
    for job in jobs:
        job.communicate("\n", timeout=30)
        assert job.returncode == 0
    assert all(last - first + 1 == units * 256 for first, last in ranges)
    assert all(20000 <= first and last < 32768 for first, last in ranges)
    spans = sorted(ranges)
    assert all(a[1] < b[0] for a, b in zip(spans[:-1], spans[1:], strict=True)), ranges  # disjoint
    assert ranges[0][0] == 20000 + 7 * 256  # the first job's units come from its id
