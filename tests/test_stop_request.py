"""A stop request (what train.sbatch writes on Slurm's pre-timeout signal, and gpu_smoke's forced stop) on the
CPU runtime: the running `dara.train` checkpoints at its next step boundary with verl's own save (the smoke task
has no save_freq), ends with the run unfinished, and the same command resumes from that checkpoint with every
step logged once. Each rank's own count of its optimizer updates (ray_nodes.json) shows the resumed job ran only
the steps after the checkpoint.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

import dara
from dara.run_folder import STOP_REQUEST
from dara.run_log import read_metrics
from dara.verl.stop_request import clear_stop_request, request_stop, stop_requested

RUN = "smoke-tiny-dara_asym-s0"


def test_request_is_a_file_with_its_reason(tmp_path):
    assert stop_requested(tmp_path) is None
    path = request_stop(tmp_path, "time limit near (SIGUSR1)\n")
    assert path == tmp_path / STOP_REQUEST and stop_requested(tmp_path) == "time limit near (SIGUSR1)"
    clear_stop_request(tmp_path)
    clear_stop_request(tmp_path)  # twice: no error
    assert stop_requested(tmp_path) is None and list(tmp_path.iterdir()) == []


def train(output_root, steps: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dara.train", f"run.output_root={output_root}",
                             f"trainer.total_training_steps={steps}"], cwd=dara.PROJECT_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def logged_steps(run_dir) -> list[int]:
    path = run_dir / "metrics.jsonl"
    return [int(r["step"]) for r in read_metrics(path)] if path.exists() else []


@pytest.mark.slow  # two dara.train runs on the CPU runtime (~2-4 min on 2 cores)
def test_stop_request_checkpoints_at_the_next_step_and_the_rerun_resumes(tmp_path):
    steps = 4
    run_dir = tmp_path / RUN
    first = train(tmp_path, steps)
    deadline = time.monotonic() + 900  # a hang guard only
    while not logged_steps(run_dir):
        assert first.poll() is None, first.communicate()[0][-4000:]
        assert time.monotonic() < deadline, "no step logged"
        time.sleep(0.2)
    requested_after = logged_steps(run_dir)[-1]
    request_stop(run_dir, "test: stop")
    output = first.communicate(timeout=900)[0]
    assert first.returncode == 0, output[-4000:]
    stopped = logged_steps(run_dir)
    # the stop came at a step boundary after the request: no save_freq save here, the checkpoint is the stop's
    assert stopped == list(range(1, stopped[-1] + 1)) and requested_after < stopped[-1] < steps
    tracker = run_dir / "checkpoints" / "latest_checkpointed_iteration.txt"
    assert tracker.read_text().strip() == str(stopped[-1])
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("global_step_*")) == [f"global_step_{stopped[-1]}"]
    assert stop_requested(run_dir) is None  # the trainer deleted the request it honoured
    assert f"stop requested (test: stop): step {stopped[-1]} checkpointed" in (run_dir / "logs" / "main.log").read_text()

    second = train(tmp_path, steps)
    output = second.communicate(timeout=900)[0]
    assert second.returncode == 0, output[-4000:]
    assert logged_steps(run_dir) == list(range(1, steps + 1))
    placement = json.loads((run_dir / "ray_nodes.json").read_text())
    (rank,) = placement["worker_groups"]["actor_rollout"]
    # one update per step (the smoke's mini-batch is its batch): the resumed job trained only the steps left
    assert rank["work"]["actor"]["optimizer_steps"] == steps - stopped[-1]
    assert rank["work"]["actor"]["forward_passes"] >= steps - stopped[-1]
