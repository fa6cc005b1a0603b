"""recipes.job_progress: train.sbatch's decision at a job's end (requeue only with a new checkpoint), on run
folders written as the trainer writes them."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from dara.slurm_time import format_time_limit
from recipes.job_progress import FINISHED, NO_PROGRESS, PROGRESS, latest_checkpoint, steps_since, verdict


def progress(tmp_path, steps: list[int], checkpoint: int, step_seconds: float, *args: str):
    """A run folder (metrics.jsonl with a torn last line, verl's marker), then the command on it."""
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "latest_checkpointed_iteration.txt").write_text(f"{checkpoint}\n")
    lines = [json.dumps({"step": s, "timing_s/step": step_seconds, "reward/format/mean": 0.5}) + "\n" for s in steps]
    (tmp_path / "metrics.jsonl").write_text("".join(lines) + '{"step": 9, "tor')
    return subprocess.run([sys.executable, "-m", "recipes.job_progress", "--run-dir", str(tmp_path),
                           "--checkpoint-dir", str(tmp_path / "checkpoints"), *args],
                          capture_output=True, text=True, timeout=60)


def test_a_new_checkpoint_is_progress_and_the_job_requeues(tmp_path):
    result = progress(tmp_path, [1, 2, 3, 4, 5], 5, 600.0, "--since-checkpoint", "2", "--job-start",
                      str(time.time() - 40 * 60), "--total-steps", "10")
    assert latest_checkpoint(tmp_path / "checkpoints") == 5 and latest_checkpoint(tmp_path) == 0
    assert [r["step"] for r in steps_since(tmp_path, 2)] == [3, 4, 5]  # the torn last line is skipped
    assert result.returncode == PROGRESS, result.stdout + result.stderr
    assert result.stdout.startswith("[dara-slurm] progress: checkpoint global_step_5 is new (this job: 3 step(s), "
                                    "10.0 min/step") and result.stdout.count("\n") == 1


def test_no_new_checkpoint_is_not_requeued_and_says_what_would_progress(tmp_path):
    # two 45-minute steps after resuming from step 10, save_freq 10, in a 2-hour job: no checkpoint
    result = progress(tmp_path, [11, 12], 10, 45 * 60, "--since-checkpoint", "10", "--job-start",
                      str(time.time() - 115 * 60), "--time-limit", "2:00:00", "--save-freq", "10", "--total-steps", "200")
    assert result.returncode == NO_PROGRESS
    assert result.stdout.startswith("[dara-slurm] not requeued: no checkpoint since this job started (latest: step "
                                    "10): it ran 2 step(s) in 115 min of 2:00:00 (45.0 min/step, about 25 min start-up)")
    # the suggested --time: start-up 25 + 10 steps x 45 + the 5-minute lead = 480 min
    _, exact = verdict(since=10, latest=10, records=steps_since(tmp_path, 10), elapsed_min=115, time_limit="2:00:00",
                       save_freq=10, lead_min=5, total_steps=200)
    assert exact.endswith("resubmit with --time >= 8:00:00 (save_freq 10) or trainer.save_freq <= 2")


def test_no_step_at_all_and_a_finished_run():
    status, line = verdict(since=0, latest=0, records=[], elapsed_min=61, time_limit="1:00:00", save_freq=10,
                           lead_min=5)
    assert status == NO_PROGRESS and "no step finished in 61 min of 1:00:00" in line
    records = [{"step": s, "timing_s/step": 30.0} for s in (3, 4)]
    assert verdict(since=2, latest=2, records=records, elapsed_min=10, time_limit=None, save_freq=-1,
                   lead_min=5, total_steps=4)[0] == FINISHED
    assert format_time_limit(1440) == "1-00:00:00" and format_time_limit(61.2) == "1:02:00"  # minutes rounded up
