"""One job per run folder (dara.run_lock): a second holder is refused naming the first; a killed holder leaves
no lock behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

import dara
from dara.run_folder import RUN_LOCK
from dara.run_lock import RunFolderBusy, check_run_folder_free, read_holder, run_folder_lock

HOLD = """
import sys, time
from dara.run_lock import run_folder_lock
with run_folder_lock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(600)
"""


@pytest.fixture
def holder(tmp_path):
    """Another process holding the run folder's lock, as a Slurm array task would."""
    env = {**os.environ, "SLURM_JOB_ID": "9001", "SLURM_ARRAY_JOB_ID": "9000", "SLURM_ARRAY_TASK_ID": "3"}
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "run")], stdout=subprocess.PIPE, text=True,
                            env=env, cwd=dara.PROJECT_ROOT)
    assert proc.stdout.readline().strip() == "locked"
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_a_second_holder_is_refused_in_one_line_naming_the_first(tmp_path, holder):
    run_dir = tmp_path / "run"
    with pytest.raises(RunFolderBusy) as refused, run_folder_lock(run_dir):
        pass
    line = str(refused.value)
    assert "\n" not in line and str(run_dir) in line and RUN_LOCK in line
    assert f"host {socket.gethostname()}, pid {holder.pid}, Slurm job 9000_3, since " in line
    with pytest.raises(RunFolderBusy):
        check_run_folder_free(run_dir)
    assert holder.poll() is None  # the holder is untouched


def test_a_killed_holder_leaves_no_lock(tmp_path, holder):
    run_dir = tmp_path / "run"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    check_run_folder_free(run_dir)
    with run_folder_lock(run_dir):
        assert read_holder(run_dir)["pid"] == os.getpid()
        with pytest.raises(RunFolderBusy, match=f"pid {os.getpid()}"):
            check_run_folder_free(run_dir)  # another open file description: flock tells them apart
    check_run_folder_free(run_dir)  # released on leaving the block


def test_a_folder_never_locked_is_free(tmp_path):
    check_run_folder_free(tmp_path / "nothing")
    assert not (tmp_path / "nothing").exists()


HOLD_HOST = """
import sys, time
from pathlib import Path
from dara.run_lock import weight_sync_lock
with weight_sync_lock(sys.argv[1], lock_file=Path(sys.argv[2])):
    print("locked", flush=True)
    time.sleep(600)
"""


def test_a_second_training_run_on_the_host_is_refused_naming_the_first(tmp_path):
    """verl's weight-sync sockets are named by Ray job id, the same in every local Ray cluster: a second run on the
    host is refused in one line naming the run that trains; a killed holder leaves the host free."""
    from pathlib import Path

    from dara.run_lock import HostBusy, weight_sync_lock

    lock = tmp_path / "rl-colocate-zmq.dara.lock"
    proc = subprocess.Popen([sys.executable, "-c", HOLD_HOST, "/runs/first-s0", str(lock)], stdout=subprocess.PIPE,
                            text=True, cwd=dara.PROJECT_ROOT)
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(HostBusy) as refused, weight_sync_lock("/runs/second-s0", lock_file=lock):
            pass
        line = str(refused.value)
        assert "\n" not in line and f"pid {proc.pid}" in line and "run folder /runs/first-s0" in line
        assert "cross their weights" in line and str(lock) in line
    finally:
        proc.kill()
        proc.wait()
    with weight_sync_lock("/runs/second-s0", lock_file=Path(lock)):
        assert "second-s0" in lock.read_text()
