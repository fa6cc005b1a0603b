"""The CPU smoke run on a real one-node Slurm cluster, through the recipes' Slurm launcher and
scripts/slurm/train.sbatch (Ray head started by the job, trainer against it), and a preemption: a running job
is requeued (`scontrol requeue`), released, resumes from its latest verl checkpoint and ends with every step
exactly once. tests/slurm_cluster.py installs (apt-get) and starts Slurm; skipped only where it cannot be
installed. Both runs take ~6-7 minutes together on 2 cores.

Also the pieces of scripts/slurm/ that a multi-node job relies on, without Slurm: a worker node's ray_node.sh
gives up with a clear error when the head never answers, `wait-nodes` names the nodes that never joined, and
ray_node.sh stops its node's Ray and deletes its temp folder on SIGTERM (tests/test_multinode.py runs them on
two real nodes).
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dara.run_log import read_metrics
from recipes.runner import PROJECT_ROOT
from recipes.slurm import parse_expected, wait_for_nodes
from tests.slurm_cluster import LocalSlurm
from tests.slurm_jobs import (
    DONE,
    RUNNING,
    assert_completed,
    cluster_for_jobs,
    job_log,
    release_and_assert_resumed,
    requeue_after_two_steps,
    steps_of,
)

JOB_TIMEOUT_S = 480


pytestmark = [pytest.mark.slow, pytest.mark.slurm]  # a real Slurm cluster and CPU training jobs


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    yield from cluster_for_jobs(LocalSlurm, tmp_path_factory.mktemp("slurm"))


@pytest.fixture(scope="module")
def output_root(tmp_path_factory):
    """One output root for both runs, so the smoke assets are built once."""
    return tmp_path_factory.mktemp("runs")


def submit_recipe(slurm: LocalSlurm, output_root: Path, *args: str) -> str:
    command = [sys.executable, "-m", "recipes", "smoke", "--launcher", "slurm", "--output-root", str(output_root),
               "--python", sys.executable, *args]
    result = slurm.command(command, cwd=PROJECT_ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if "submitted array" in line)
    return line.split("submitted array ")[1].split()[0]


def ray_processes_left(slurm: LocalSlurm) -> list[str]:
    """Live processes of a Ray cluster a job of this cluster started (temp folders <TMPDIR>/ray_dara_<id>_<node>)."""
    out = subprocess.run(["pgrep", "-af", f"{slurm.env['TMPDIR']}/ray_dara_"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


@pytest.mark.slurm
@pytest.mark.slow
def test_cpu_smoke_run_through_sbatch(slurm, output_root):
    job_id = submit_recipe(slurm, output_root)
    run_dir = output_root / "smoke-tiny-dara_asym-s0"
    log = assert_completed(slurm, job_id, run_dir, JOB_TIMEOUT_S)
    assert steps_of(run_dir) == [1, 2, 3]
    for record in read_metrics(run_dir / "metrics.jsonl"):
        for channel in ("format", "correctness"):
            for key in (f"reward/{channel}/mean", f"dara/density/{channel}", f"dara/weight/{channel}"):
                assert math.isfinite(record[key]), (record["step"], key)
            assert 0.0 <= record[f"dara/density/{channel}"] <= 1.0 and record[f"dara/weight/{channel}"] >= 1.0
    info = json.loads((run_dir / "run_info.json").read_text())
    assert (info["run_name"], info["seed"], info["method"]) == ("smoke-tiny-dara_asym-s0", 0, "dara_asym")
    assert "ray nodes alive: 1/1" in log and "training exited with 0" in log and "ray cluster stopped" in log
    assert (run_dir / "logs" / f"job-{job_id}_0.log").exists()
    assert not ray_processes_left(slurm)
    # a rerun of the recipe finds the run finished and submits nothing
    again = slurm.command([sys.executable, "-m", "recipes", "smoke", "--launcher", "slurm", "--output-root",
                           str(output_root)], cwd=PROJECT_ROOT, timeout=120)
    assert "0 runs submitted, 1 already finished" in again.stdout


@pytest.mark.slurm
@pytest.mark.slow
def test_requeued_job_resumes_from_its_checkpoint_with_every_step_once(slurm, output_root):
    steps = 4
    # every checkpoint kept (run.checkpoint.keep_last=steps): the test reads when each was written
    job_id = submit_recipe(slurm, output_root, "--seeds", "1", "--steps", str(steps), "--set", "trainer.save_freq=1",
                           "--set", f"run.checkpoint.keep_last={steps}")
    run_dir = output_root / "smoke-tiny-dara_asym-s1"
    requeue = requeue_after_two_steps(slurm, job_id, run_dir, steps, JOB_TIMEOUT_S)
    assert slurm.job_field(job_id, "Reason") == "BeginTime"
    release_and_assert_resumed(slurm, job_id, run_dir, steps, requeue, JOB_TIMEOUT_S)
    assert not ray_processes_left(slurm)


def wait_for_log(run_dir: Path, text: str, job_id: str, slurm: LocalSlurm, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in job_log(run_dir):
        assert slurm.job_state(job_id) in RUNNING, job_log(run_dir)[-4000:]
        assert time.monotonic() < deadline, f"no {text!r} in the log:\n{job_log(run_dir)[-4000:]}"
        time.sleep(0.5)


@pytest.mark.slurm
@pytest.mark.slow
def test_pre_timeout_signal_checkpoints_at_the_next_step_and_the_job_requeues_itself(slurm, output_root):
    """SIGUSR1 (what --signal=B:USR1@300 sends before the time limit) after step 1: the trainer saves at the next
    step boundary (the smoke task has no save_freq: the checkpoint is the stop's), the job requeues itself, and
    the rerun resumes from that checkpoint with every step once."""
    steps = 4
    job_id = submit_recipe(slurm, output_root, "--seeds", "3", "--steps", str(steps))
    run_dir = output_root / "smoke-tiny-dara_asym-s3"
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not ((run_dir / "metrics.jsonl").exists() and steps_of(run_dir)):
        assert slurm.job_state(job_id) in RUNNING and time.monotonic() < deadline, job_log(run_dir)[-4000:]
        time.sleep(0.5)
    assert slurm.command(["scancel", "--batch", "--signal=USR1", job_id]).returncode == 0
    slurm.wait_state(job_id, {"PENDING"}, JOB_TIMEOUT_S)  # requeued by the job itself
    log = job_log(run_dir)
    stopped = steps_of(run_dir)[-1]
    assert 1 < stopped < steps and steps_of(run_dir) == list(range(1, stopped + 1))
    assert "time limit near (SIGUSR1)" in log
    assert f"progress: checkpoint global_step_{stopped} is new (this job: {stopped} step(s)" in log
    assert f"job {job_id} requeues itself (scontrol requeue)" in log
    assert (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == str(stopped)
    assert slurm.command(["scontrol", "update", f"jobid={job_id}", "StartTime=now"]).returncode == 0
    log = assert_completed(slurm, job_id, run_dir, JOB_TIMEOUT_S)
    assert slurm.job_field(job_id, "Restarts") == "1" and steps_of(run_dir) == list(range(1, steps + 1))
    assert not ray_processes_left(slurm)


@pytest.mark.slurm
@pytest.mark.slow
def test_a_job_whose_step_outlasts_its_time_is_not_requeued_and_says_why(slurm, output_root):
    """A one-minute job whose first step cannot finish in it (the CPU rollout server waits 10 minutes before it
    generates): after the signal, no step boundary comes before the limit, so no checkpoint; Slurm ends the job
    at its limit and it is not requeued, its log saying why. A manual sbatch with --time, as documented."""
    run_dir = output_root / "smoke-tiny-dara_asym-s4"
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    command = ["sbatch", "--parsable", "--time=1", f"--output={run_dir}/logs/slurm-%j.out", "scripts/slurm/train.sbatch",
               "--python", sys.executable, f"run.output_root={output_root}", "run.seed=4",
               "actor_rollout_ref.rollout.engine_kwargs.hf.batch_wait_s=600"]
    result = slurm.command(command, cwd=PROJECT_ROOT, timeout=60)
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.strip().split(";")[0]
    wait_for_log(run_dir, "training: python -m dara.train", job_id, slurm, JOB_TIMEOUT_S)
    assert slurm.command(["scancel", "--batch", "--signal=USR1", job_id]).returncode == 0
    state = slurm.wait_state(job_id, DONE, JOB_TIMEOUT_S)
    log = job_log(run_dir)
    assert state == "TIMEOUT", log[-4000:]
    assert slurm.job_field(job_id, "Restarts") == "0" and "requeued" not in log.replace("not requeued", "")
    (line,) = [line for line in log.splitlines() if "not requeued" in line]
    assert line.startswith("[dara-slurm] not requeued: no checkpoint since this job started (latest: step 0) and "
                           "no step finished in ") and "of 1:00: start-up and one step take longer" in line
    assert "time limit 1:00" in log and "time limit near (SIGUSR1)" in log
    assert not (run_dir / "metrics.jsonl").exists() or not steps_of(run_dir)
    assert not (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").exists()
    assert (line + "\n") in (run_dir / "logs" / f"job-{job_id}.log").read_text()


RAY_NODE = PROJECT_ROOT / "scripts" / "slurm" / "ray_node.sh"


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nothing listens once the probe is closed


def test_worker_node_gives_up_clearly_when_the_head_never_answers(tmp_path):
    temp = tmp_path / "ray_dara_test_n2"
    result = subprocess.run(["bash", str(RAY_NODE), "--temp", str(temp), "--wait-for", f"127.0.0.1:{_closed_port()}",
                             "--wait-timeout", "3", "--", "sleep", "600"],
                            capture_output=True, text=True, timeout=60, env={**os.environ, "SLURMD_NODENAME": "n2"})
    assert result.returncode == 3, result.stdout + result.stderr
    assert "n2: the Ray head 127.0.0.1:" in result.stdout and "did not answer within 3s" in result.stdout
    assert not temp.exists()


def test_wait_nodes_names_the_nodes_that_never_joined(tmp_path):
    assert parse_expected(["n1=10.0.0.1", "n2=10.0.0.2"]) == {"10.0.0.1": "n1", "10.0.0.2": "n2"}
    with pytest.raises(SystemExit, match="NODE=IP"):
        parse_expected(["n1"])


@pytest.mark.slow
def test_ray_node_stops_its_ray_and_deletes_its_temp_folder_on_sigterm(tmp_path, monkeypatch):
    """A real one-node Ray head through ray_node.sh: wait-nodes names the node that never joins, then SIGTERM."""
    temp = Path("/tmp") / f"ray_dara_test{os.getpid()}_n1"  # short: Ray's socket paths must fit 107 bytes
    port = _closed_port()
    # the machine's own address: Ray replaces a loopback --node-ip-address by one of its choosing
    own_ip = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()[0]
    ray = Path(sys.executable).parent / "ray"
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # also for wait-nodes' ray.init in this process
    monkeypatch.setenv("HOME", str(tmp_path))
    env = {**os.environ, "SLURMD_NODENAME": "n1"}
    node = subprocess.Popen(["bash", str(RAY_NODE), "--temp", str(temp), "--", str(ray), "start", "--head",
                             f"--node-ip-address={own_ip}", f"--port={port}", "--num-cpus=1", "--num-gpus=0",
                             "--include-dashboard=false", f"--temp-dir={temp}", "--disable-usage-stats", "--block"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        deadline = time.monotonic() + 90
        while not list(temp.glob("session_*/sockets/raylet*")):
            assert node.poll() is None and time.monotonic() < deadline, node.communicate(timeout=30)[0][-3000:]
            time.sleep(0.5)
        with pytest.raises(SystemExit, match=r"did not join within 5s: n2 \(10\.231\.255\.12\)"):
            wait_for_nodes(f"{own_ip}:{port}", {own_ip: "n1", "10.231.255.12": "n2"}, 5, own_ip)
    finally:
        node.send_signal(signal.SIGTERM)
        output = node.communicate(timeout=60)[0]
    # every Ray process stopped and the folder deleted by ray_node.sh itself (its SIGKILL comes 4 s after its
    # SIGTERM by the clock, inside Slurm's KillWait)
    assert f"{temp} removed" in output and not temp.exists(), output[-3000:]
    left = subprocess.run(["pgrep", "-f", f"{temp}/session_"], capture_output=True, text=True).stdout.split()
    assert not left
