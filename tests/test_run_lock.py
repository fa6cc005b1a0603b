"""One job per run folder and one training run per host (dara.run_lock): a second holder is refused in one line
naming the first; a killed holder leaves no lock behind."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

import dara
from dara import run_lock
from dara.run_folder import RUN_LOCK

HOLD = """
import sys, time
from pathlib import Path
from dara.run_lock import run_folder_lock, weight_sync_lock
lock = run_folder_lock(sys.argv[1]) if len(sys.argv) == 2 else weight_sync_lock(sys.argv[1], lock_file=Path(sys.argv[2]))
with lock:
    print("locked", flush=True)
    time.sleep(600)
"""


@pytest.fixture
def hold():
    """Another process holding a lock (`python -c HOLD RUN_DIR [HOST_LOCK]`), as a Slurm array task would."""
    procs = []

    def start(*args):
        env = {**os.environ, "SLURM_JOB_ID": "9001", "SLURM_ARRAY_JOB_ID": "9000", "SLURM_ARRAY_TASK_ID": "3"}
        proc = subprocess.Popen([sys.executable, "-c", HOLD, *map(str, args)], stdout=subprocess.PIPE, text=True,
                                env=env, cwd=dara.PROJECT_ROOT)
        procs.append(proc)
        assert proc.stdout.readline().strip() == "locked"
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_a_second_holder_is_refused_naming_the_first_and_a_killed_one_leaves_no_lock(tmp_path, hold):
    run_dir = tmp_path / "run"
    run_lock.check_run_folder_free(tmp_path / "nothing")  # never locked: free, and nothing created
    assert not (tmp_path / "nothing").exists()
    holder = hold(run_dir)
    with pytest.raises(run_lock.RunFolderBusy) as refused, run_lock.run_folder_lock(run_dir):
        pass
    line = str(refused.value)
    assert "\n" not in line and str(run_dir) in line and RUN_LOCK in line
    assert f"host {socket.gethostname()}, pid {holder.pid}, Slurm job 9000_3, since " in line
    with pytest.raises(run_lock.RunFolderBusy):
        run_lock.check_run_folder_free(run_dir)
    holder.kill()  # SIGKILL: no chance to release
    holder.wait()
    run_lock.check_run_folder_free(run_dir)
    with run_lock.run_folder_lock(run_dir):
        assert run_lock.read_holder(run_dir)["pid"] == os.getpid()
        with pytest.raises(run_lock.RunFolderBusy, match=f"pid {os.getpid()}"):
            run_lock.check_run_folder_free(run_dir)  # another open file description: flock tells them apart
    run_lock.check_run_folder_free(run_dir)  # released on leaving the block


def test_a_second_training_run_on_the_host_is_refused_naming_the_first(tmp_path, hold):
    """verl names its weight-sync sockets by Ray job id, the same in every local Ray cluster."""
    lock = tmp_path / "rl-colocate-zmq.dara.lock"
    holder = hold("/runs/first-s0", lock)
    with pytest.raises(run_lock.HostBusy) as refused, run_lock.weight_sync_lock("/runs/second-s0", lock_file=lock):
        pass
    line = str(refused.value)
    assert "\n" not in line and f"pid {holder.pid}" in line and "run folder /runs/first-s0" in line
    assert "cross their weights" in line and str(lock) in line
    holder.kill()
    holder.wait()
    with run_lock.weight_sync_lock("/runs/second-s0", lock_file=lock):
        assert "second-s0" in lock.read_text()
