"""What the Slurm tests do with a job of a test cluster (tests/slurm_cluster.py): start the cluster for CPU
training jobs, wait for a job with its log in the failure, requeue it after some steps and check that the
resumed run kept the finished steps. Shared by tests/test_slurm.py (one node) and tests/test_multinode.py (two).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dara.run_folder import METRICS_FILE
from dara.run_log import read_metrics
from tests.slurm_cluster import LocalSlurm, SlurmUnavailable

DONE = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL"}
RUNNING = {"PENDING", "RUNNING", "CONFIGURING"}


def short_tmpdir() -> str:
    """A TMPDIR short enough for Ray's socket paths (train.sbatch puts the Ray temp folders under it)."""
    return tempfile.mkdtemp(prefix="drs", dir="/tmp")


def cluster_for_jobs(cluster_class: type[LocalSlurm], folder: Path, **options) -> Iterator[LocalSlurm]:
    """A module fixture's body: the cluster started (skip where Slurm cannot be installed), with the environment
    its jobs inherit (sbatch --export=ALL); closed and its TMPDIR deleted afterwards."""
    try:
        cluster = cluster_class(folder, **options).__enter__()
    except SlurmUnavailable as error:
        pytest.skip(f"no Slurm on this machine: {error}")
    home = folder / "home"
    home.mkdir()
    # HOME: Ray 2.60 writes under it. TMPDIR: the jobs' Ray temp folders and port locks, apart from any other
    # test session's on this machine
    cluster.env.update(HOME=str(home), RAY_AUTH_MODE="disabled", PYTHONUNBUFFERED="1", TMPDIR=short_tmpdir())
    try:
        yield cluster
    finally:
        cluster.close()
        shutil.rmtree(cluster.env["TMPDIR"], ignore_errors=True)


def job_log(run_dir: Path) -> str:
    return "\n".join(
        path.read_text(errors="replace") for path in sorted((run_dir / "logs").glob("slurm-*.out"))
    )


def steps_of(run_dir: Path) -> list[int]:
    return [int(record["step"]) for record in read_metrics(run_dir / METRICS_FILE)]


def wait_done(cluster: LocalSlurm, job_id: str, run_dir: Path, timeout_s: float) -> str:
    """The job's final state; a job still running after timeout_s is cancelled and fails the test."""
    try:
        return cluster.wait_state(job_id, DONE, timeout_s)
    except TimeoutError:
        cluster.command(["scancel", job_id])
        pytest.fail(f"job {job_id} did not finish in {timeout_s:.0f}s; log tail:\n{job_log(run_dir)[-4000:]}")


def assert_completed(cluster: LocalSlurm, job_id: str, run_dir: Path, timeout_s: float) -> str:
    """Wait for the job, assert it COMPLETED, return its log."""
    state = wait_done(cluster, job_id, run_dir, timeout_s)
    log = job_log(run_dir)
    assert state == "COMPLETED", f"job {job_id} ended {state}; log tail:\n{log[-4000:]}"
    return log

