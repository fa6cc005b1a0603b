"""The CPU smoke on a real one-node Slurm (tests/slurm_cluster.py installs and starts it; skipped only where it
cannot be installed), through the recipes' Slurm launcher and scripts/slurm/train.sbatch: stopped by the
pre-timeout signal, then ended by Slurm at its time limit mid-step, requeued by the job itself both times and
resumed with every step exactly once (three training starts). Also, without Slurm, the pieces of scripts/slurm/ a
multi-node job relies on (tests/test_multinode.py runs them on two real nodes): a worker's ray_node.sh gives up
clearly when the head never answers, `wait-nodes` names the nodes that never joined, ray_node.sh stops its Ray and
deletes its temp folder on SIGTERM."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dara.preflight import compose
from dara.preflight.ray_ports import plan
from dara.run_log import read_metrics
from recipes.job_progress import latest_checkpoint
from recipes.runner import PROJECT_ROOT
from recipes.slurm import parse_expected, wait_for_nodes
from tests.slurm_cluster import LocalSlurm
from tests.slurm_jobs import (
    DONE,
    RUNNING,
    assert_completed,
    cluster_for_jobs,
    job_log,
    steps_of,
)

JOB_TIMEOUT_S = 900  # each wait: a start and a few steps take ~2-8 min on 2 shared cores


pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.starts]  # Slurm, CPU training jobs


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


def wait_for_log(run_dir: Path, text: str, job_id: str, slurm: LocalSlurm, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in job_log(run_dir):
        assert slurm.job_state(job_id) in RUNNING, job_log(run_dir)[-4000:]
        assert time.monotonic() < deadline, f"no {text!r} in the log:\n{job_log(run_dir)[-4000:]}"
        time.sleep(0.5)


def processes() -> list[tuple[int, int, str]]:
    out = subprocess.run(["ps", "-ww", "-e", "-o", "pid=,ppid=,args="], capture_output=True, text=True).stdout
    return [(int(pid), int(ppid), args) for pid, ppid, args in (line.split(None, 2) for line in out.splitlines())]


def raylet(slurm: LocalSlurm) -> tuple[int, str]:
    """(pid, command line) of the raylet of this cluster's job (its Ray temp folders are under the job's TMPDIR)."""
    (found,) = [(pid, args) for pid, _, args in processes()
                if args.split()[0].endswith("/raylet") and f"{slurm.env['TMPDIR']}/ray_dara_" in args]
    return found


def task_runner_pid(slurm: LocalSlurm) -> int:
    """The process running verl's training loop of this cluster's job: the TaskRunner actor, a worker of its
    raylet (not of another Ray on this machine)."""
    parent = raylet(slurm)[0]
    (pid,) = [pid for pid, ppid, args in processes() if ppid == parent and args.startswith("ray::TaskRunnerV1")]
    return pid


def wait_for_checkpoint(run_dir: Path, step: int, job_id: str, slurm: LocalSlurm) -> None:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while latest_checkpoint(run_dir / "checkpoints") < step:
        assert slurm.job_state(job_id) in RUNNING and time.monotonic() < deadline, job_log(run_dir)[-4000:]
        time.sleep(0.5)


def release(slurm: LocalSlurm, job_id: str) -> None:
    """Start a requeued job now: Slurm holds a requeued job back for a while (reason BeginTime, shown once its
    scheduler has looked at the job, which may be after the test does: CI saw "None" just after a requeue)."""
    assert slurm.job_state(job_id) == "PENDING"
    assert slurm.command(["scontrol", "update", f"jobid={job_id}", "StartTime=now"]).returncode == 0


def test_cpu_smoke_through_sbatch_checkpoints_on_the_pre_timeout_signal_requeues_itself_and_resumes(
        slurm, output_root):
    """The smoke recipe through the Slurm launcher, 5 steps, a checkpoint every step.
    Job 1: SIGUSR1 (what --signal=B:USR1@300 sends before the time limit) after step 1: the trainer saves at the
    next step boundary and stops, the job requeues itself. Job 2, a step that outlasts the signal lead: after its
    first step (checkpointed), its trainer is held in the next step (SIGSTOP) and the job's time limit cut to one
    minute; Slurm ends the job at the limit in the middle of that step, and the job requeues itself from the
    checkpoint. Job 3 resumes and finishes: every step once; the run folder, the job logs and the Ray teardown
    are those of a finished job, and a rerun of the recipe submits nothing. Ray ran on the port range
    dara.preflight.ray_ports sizes for its CPUs, pre-starting one worker per CPU."""
    steps = 5
    ports = plan(compose(["task=smoke"]), None)  # composed first: after step 1 the test must not lose time
    job_id = submit_recipe(slurm, output_root, "--steps", str(steps), "--set", "trainer.save_freq=1")
    run_dir = output_root / "smoke-tiny-dara_asym-s0"
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not ((run_dir / "metrics.jsonl").exists() and steps_of(run_dir)):
        assert slurm.job_state(job_id) in RUNNING and time.monotonic() < deadline, job_log(run_dir)[-4000:]
        time.sleep(0.5)
    args = raylet(slurm)[1]

    # job 1: the pre-timeout signal, a clean stop at the next step boundary
    assert slurm.command(["scancel", "--batch", "--signal=USR1", job_id]).returncode == 0
    # the port range: job-env's size for the smoke's 16 logical CPUs, given to the raylet, which pre-starts 16
    first, last, units = (int(x) for x in re.search(r"ports (\d+)-(\d+) \((\d+) x 256;", job_log(run_dir)).groups())
    assert (ports.cpus, units, last - first + 1) == (16, ports.units, ports.ports)
    assert f"--min_worker_port={first + 16} " in args and f"--max_worker_port={last} " in args
    assert "--num_prestart_python_workers=16 " in args
    slurm.wait_state(job_id, {"PENDING"}, JOB_TIMEOUT_S)  # requeued by the job itself
    log, lines_before = job_log(run_dir), (run_dir / "metrics.jsonl").read_text().splitlines()
    stopped = steps_of(run_dir)[-1]
    assert 1 < stopped < steps - 1 and steps_of(run_dir) == list(range(1, stopped + 1))
    assert "time limit near (SIGUSR1)" in log
    assert f"progress: checkpoint global_step_{stopped} is new (this job: {stopped} step(s)" in log
    assert f"job {job_id} requeues itself (scontrol requeue)" in log
    assert latest_checkpoint(run_dir / "checkpoints") == stopped
    release(slurm, job_id)

    # job 2: its trainer held in a step after one checkpointed step, Slurm ends the job at its time limit
    wait_for_checkpoint(run_dir, stopped + 1, job_id, slurm)
    os.kill(task_runner_pid(slurm), signal.SIGSTOP)  # verl's training loop held: a step longer than the time left
    time_limit = slurm.job_field(job_id, "TimeLimit")
    assert slurm.command(["scontrol", "update", f"jobid={job_id}", "TimeLimit=1"]).returncode == 0
    state = slurm.wait_state(job_id, {"PENDING"} | DONE, JOB_TIMEOUT_S)
    log, checkpoint = job_log(run_dir), latest_checkpoint(run_dir / "checkpoints")
    assert state == "PENDING", log[-4000:]  # requeued by the job itself in Slurm's KillWait
    assert checkpoint > stopped and steps_of(run_dir) == list(range(1, checkpoint + 1)), log[-4000:]
    assert f"progress: checkpoint global_step_{checkpoint} is new (this job: {checkpoint - stopped} step(s)" in log
    assert f"job {job_id} ended at its time limit in the middle of a step: it requeues itself (scontrol requeue)" in log
    assert slurm.command(["scontrol", "update", f"jobid={job_id}", f"TimeLimit={time_limit}"]).returncode == 0
    release(slurm, job_id)

    # job 3: resumes from that checkpoint and finishes
    log = assert_completed(slurm, job_id, run_dir, JOB_TIMEOUT_S)
    assert slurm.job_field(job_id, "Restarts") == "2" and steps_of(run_dir) == list(range(1, steps + 1))
    assert (run_dir / "metrics.jsonl").read_text().splitlines()[:len(lines_before)] == lines_before  # kept as logged

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
                           str(output_root), "--steps", str(steps)], cwd=PROJECT_ROOT, timeout=120)
    assert "0 runs submitted, 1 already finished" in again.stdout, again.stdout + again.stderr


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
