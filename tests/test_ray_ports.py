"""A job's Ray port range (dara/preflight/ray_ports.py) against its arithmetic; train.sbatch's locking block (run
here in bash) never gives two jobs overlapping ports (a real job's range: tests/test_slurm.py)."""

from __future__ import annotations

import itertools
import math
import re
import subprocess

import pytest

from dara.preflight import compose, preflight
from dara.preflight.ray_ports import RayPorts, plan, verl_workers
from recipes.runner import SBATCH_SCRIPT
from recipes.slurm import job_env

MATH = ["task=deepscaler", "model=deepseek-r1-distill-qwen-1.5b", "cluster=h100_x8"]


@pytest.fixture(scope="module")
def math_h100():
    return compose(MATH)


@pytest.mark.parametrize("cpus", [1, 16, 166, 167, 256, 422, 423, 512])
def test_port_range_from_a_cpu_count_against_the_arithmetic(cpus):
    ports = RayPorts(cpus, 42)
    needed = 16 + cpus + 42 + 32  # Ray's fixed ports + a pre-started worker per CPU + verl's + spare
    assert ports.needed == needed and ports.units == math.ceil(needed / 256) and ports.ports == 256 * ports.units
    assert ports.places == 49 - ports.units + 1  # 20000-32767 holds 49 units of 256
    assert ports.units == (1 if cpus <= 166 else 2 if cpus <= 422 else 3)


def test_verl_workers_and_ray_cpus_come_from_the_run_config(math_h100):
    rollout = math_h100.actor_rollout_ref.rollout
    assert list(verl_workers(math_h100).values()) == [
        1, 8, 8 // rollout.tensor_model_parallel_size, rollout.agent.num_workers, math_h100.reward.num_workers,
        1 + math_h100.transfer_queue.backend.SimpleStorage.num_data_storage_units] == [1, 8, 8, 8, 8, 9]
    two_nodes = compose([*MATH, "trainer.nnodes=2", "actor_rollout_ref.rollout.tensor_model_parallel_size=2"])
    assert list(verl_workers(two_nodes).values())[1:3] == [16, 8]  # 16 FSDP workers, 8 vLLM servers
    # Ray's CPUs: the allocation's on a GPU cluster, the config's on the CPU path
    assert plan(math_h100, None) is None and plan(math_h100, 256) == RayPorts(256, 42)
    smoke = compose(["task=smoke"])
    assert plan(smoke, 256).cpus == smoke.ray_kwargs.ray_init.num_cpus == 16
    env = job_env(math_h100, cpus=256)
    assert [env[k] for k in ("RAY_CPUS", "RAY_PORT_UNITS", "RAY_PORT_PLACES", "RAY_PORT_BASE", "RAY_PORT_UNIT",
                             "RAY_FIXED_PORTS")] == ["256", "2", "48", "20000", "256", "16"]
    text = preflight(math_h100, skip_env=True).text()
    assert "== ray ports: ok" in text and "+ 9 TransferQueue (controller + storage units) = 42" in text
    assert "up to 166 CPUs in 1 unit(s), up to 422 CPUs in 2 unit(s)" in text
    assert ("e.g. a 256-CPU node: 16 fixed + 256 pre-started workers (one per Ray CPU) + 42 verl workers + 32 spare "
            "= 346 -> 2 unit(s) of 256 = 512 ports (496 worker ports)") in text
    huge = preflight(compose(["task=smoke", "ray_kwargs.ray_init.num_cpus=20000"]), skip_env=True)
    assert any(p.startswith("ray ports:") and "do not fit in 20000-32767" in p for p in huge.problems)


@pytest.mark.parametrize("units", [1, 2])
def test_the_batch_scripts_port_ranges_never_overlap(tmp_path, units, math_h100):
    """Three jobs on one node whose ids point at the same units: the ranges are disjoint, below Linux's ephemeral."""
    env = job_env(math_h100, cpus=256 if units == 2 else 64)
    block = re.search(r"^lock_port_units\(\) \{.*?^PORT_LAST=.*?$", SBATCH_SCRIPT.read_text(), re.S | re.M)
    assert block and env["RAY_PORT_UNITS"] == str(units), "train.sbatch no longer has its port-locking block"
    script = "\n".join(["set -euo pipefail", *(f"{key}={env[key]}" for key in (
        "RAY_PORT_BASE", "RAY_PORT_UNIT", "RAY_PORT_UNITS", "RAY_PORT_PLACES", "RAY_FIXED_PORTS")),
        f'HEAD=n1 LOCK_DIR={tmp_path} ID_NUM="$1" PORT_LOCKS=()', 'log() { echo "$*"; }', block.group(0),
        'echo "$PORT $PORT_LAST"', "read -r _ <&0"])  # hold the locks until the test closes stdin
    jobs, ranges = [], []
    for job_id in (7, 7, 8):  # one after the other: each holds its locks before the next starts
        jobs.append(subprocess.Popen(["bash", "-c", script, "job", str(job_id)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True))
        ranges.append(tuple(int(x) for x in jobs[-1].stdout.readline().split()))
    for job in jobs:
        job.communicate("\n", timeout=30)
        assert job.returncode == 0
    assert all(last - first + 1 == units * 256 and 20000 <= first and last < 32768 for first, last in ranges)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(sorted(ranges))), ranges  # disjoint
    assert ranges[0][0] == 20000 + 7 * 256  # the first job's units come from its id
