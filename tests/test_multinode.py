"""Multi-node runs on a real two-node Slurm cluster (tests/slurm_cluster.py `TwoNodeSlurm`): each node in its own
network namespace on a bridge the test creates, one slurmd per node, the file system shared.

`sbatch --nodes=2 scripts/slurm/train.sbatch --ifname dara0 task=smoke`, as docs/experiments.md writes it: the
Ray head on n1, a worker on n2 that joins over the namespace network, verl's actor on both nodes (trainer.nnodes=2
x one logical GPU: the FSDP group is two ranks over gloo, one per node), 3 steps. The run folder's
ray_nodes.json must show both nodes, one actor rank on each, and each rank's own count of the optimizer updates
and forward passes it ran during training (one update per step: the smoke's mini-batch is its whole batch). Requeue and resume are the one-node Slurm
test's (tests/test_slurm.py): the same train.sbatch path.
Everything the job started is gone afterwards (processes, per-node Ray temp folders). Skipped only where Slurm cannot be installed (no root/apt).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from recipes.runner import PROJECT_ROOT
from tests.slurm_cluster import TwoNodeSlurm
from tests.slurm_jobs import (
    assert_completed,
    cluster_for_jobs,
    steps_of,
)

pytestmark = [pytest.mark.multinode, pytest.mark.slurm, pytest.mark.slow, pytest.mark.starts]

JOB_TIMEOUT_S = 900  # a job takes ~4-8 min on 2 shared cores
RUN_NAME = "smoke-tiny-dara_asym-s{seed}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    for slurm in cluster_for_jobs(TwoNodeSlurm, tmp_path_factory.mktemp("slurm2")):
        yield slurm
    assert not slurm.namespace_pids()  # close() stopped every process inside the namespaces


@pytest.fixture(scope="module")
def output_root(tmp_path_factory):
    return tmp_path_factory.mktemp("runs2")


def submit(cluster: TwoNodeSlurm, output_root: Path, seed: int, *overrides: str) -> tuple[str, Path]:
    """The documented two-node command, from the project root; the job's output goes into the run folder."""
    run_dir = output_root / RUN_NAME.format(seed=seed)
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    command = ["sbatch", "--parsable", "--nodes=2", f"--output={run_dir}/logs/slurm-%j.out",
               "scripts/slurm/train.sbatch", "--python", sys.executable, "--ifname", cluster.INTERFACE,
               "task=smoke", f"run.output_root={output_root}", f"run.seed={seed}", *overrides]
    result = cluster.command(command, cwd=PROJECT_ROOT, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().split(";")[0], run_dir


def assert_job_left_nothing(cluster: TwoNodeSlurm, job_id: str) -> None:
    """No process of the job's Ray on any node, no per-node temp folder; only the slurmds in the namespaces."""
    slurmds = {int((cluster.folder / f"slurmd.{name}.pid").read_text()) for name in cluster.NODE_NAMES}
    deadline = time.monotonic() + 30
    temp_folders = Path(cluster.env["TMPDIR"]).glob
    # ray_node.sh deletes a node's temp folder after its Ray processes are gone: wait for both
    while (set(cluster.namespace_pids()) - slurmds or list(temp_folders(f"ray_dara_{job_id}_*"))) and \
            time.monotonic() < deadline:
        time.sleep(0.5)
    left = set(cluster.namespace_pids()) - slurmds
    assert not left, [Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")[:200] for pid in left
                      if Path(f"/proc/{pid}/cmdline").exists()]
    assert not list(Path(cluster.env["TMPDIR"]).glob(f"ray_dara_{job_id}_*"))


def assert_trained_on_both_nodes(cluster: TwoNodeSlurm, run_dir: Path, steps_run: int) -> dict:
    """Both nodes in the placement, one actor rank on each, and each rank ran one optimizer update per step this
    job ran (counted by the rank itself) and at least one forward pass per update."""
    placement = json.loads((run_dir / "ray_nodes.json").read_text())
    assert "error" not in placement, placement
    alive = {node["ip"] for node in placement["nodes"] if node["alive"]}
    assert alive == set(cluster.addresses.values())
    assert [node["is_head"] for node in placement["nodes"] if node["ip"] == cluster.addresses["n1"]] == [True]
    actor = placement["worker_groups"]["actor_rollout"]
    assert [row["rank"] for row in actor] == [0, 1]
    assert len({row["node_id"] for row in actor}) == 2 and {row["ip"] for row in actor} == alive
    assert placement["distinct_worker_nodes"] == 2
    for row in actor:
        # one FSDP group of two ranks over gloo, rendezvous at rank 0's node
        assert row["process_group"] == {"backend": "gloo", "world_size": 2}, row
        assert row["master_addr"] == actor[0]["ip"]
        # what the rank ran between "workers up" and "fit returned", counted in its own process
        work = row["work"]["actor"]
        assert work["optimizer_steps"] == steps_run and work["forward_passes"] >= steps_run, row
    return placement


def test_two_node_job_trains_with_workers_on_both_nodes(cluster, output_root):
    started = time.monotonic()
    job_id, run_dir = submit(cluster, output_root, 0)
    log = assert_completed(cluster, job_id, run_dir, JOB_TIMEOUT_S)
    assert steps_of(run_dir) == [1, 2, 3]
    assert_trained_on_both_nodes(cluster, run_dir, steps_run=3)
    assert "ray nodes alive: 2/2" in log and "training exited with 0" in log and "ray cluster stopped" in log
    assert f"the Ray head {cluster.addresses['n1']}:" in log and "answers" in log  # n2 waited for the head
    assert log.count("ray stopped") == 2  # both nodes' ray_node.sh cleaned up
    assert "collectives on dara0" in log
    assert_job_left_nothing(cluster, job_id)
    print(f"two-node 3-step job: {time.monotonic() - started:.0f}s")

