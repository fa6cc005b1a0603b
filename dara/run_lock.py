"""One job per run folder, one training run per host (verl 0.9.1's weight-sync sockets in /tmp are named by
Ray job id, the same in every local Ray cluster: docs/experiments.md): exclusive `flock`s, released by the
kernel however the process ends, whose text names the holder. A file system without flock: one line, and the
run goes on unlocked."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dara.run_folder import RUN_LOCK, RunFolderError


class RunFolderBusy(RunFolderError):
    pass


def holder_record() -> dict:
    job = os.environ.get("SLURM_JOB_ID")
    if os.environ.get("SLURM_ARRAY_JOB_ID") and os.environ.get("SLURM_ARRAY_TASK_ID"):
        job = f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return {"host": socket.gethostname(), "pid": os.getpid(), "slurm_job": job,
            "since": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "since_unix": time.time()}


def describe_holder(record: dict | None) -> str:
    if not record:
        return "another process (its record is not readable yet)"
    job = f", Slurm job {record['slurm_job']}" if record.get("slurm_job") else ""
    return f"host {record.get('host', '?')}, pid {record.get('pid', '?')}{job}, since {record.get('since', '?')}"


def read_holder(folder: str | os.PathLike, lock_name: str = RUN_LOCK) -> dict | None:
    try:
        return json.loads((Path(folder) / lock_name).read_text() or "null")
    except (OSError, ValueError):
        return None


def _busy(run_dir: Path) -> RunFolderBusy:
    return RunFolderBusy(f"{run_dir} is in use by {describe_holder(read_holder(run_dir))} ({RUN_LOCK}); "
                         "wait for that job to end (or cancel it) before starting this run again")


def _try_lock(fd: int) -> bool:
    """True: locked; False: held by another; OSError: the file system cannot flock."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as error:
        if error.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):  # BlockingIOError among them
            return False
        raise


def _unsupported(path: Path, error: OSError, what: str) -> None:
    print(f"[dara] {path}: the file system cannot lock files ({error.strerror}); {what} is not locked against a "
          "second job", flush=True)


@contextmanager
def _held(lock_file: Path, busy, what: str, record: dict) -> Iterator[None]:
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            locked = _try_lock(fd)
        except OSError as error:
            _unsupported(lock_file, error, what)
            locked = None
        if locked is False:
            raise busy()
        if locked:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(record).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextmanager
def run_folder_lock(run_dir: str | os.PathLike) -> Iterator[None]:
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    with _held(run_dir / RUN_LOCK, lambda: _busy(run_dir), "the run folder", holder_record()):
        yield


WEIGHT_SYNC_LOCK = Path("/tmp/rl-colocate-zmq.dara.lock")  # beside verl's sockets (verl hard-codes /tmp)


class HostBusy(RunFolderError):
    pass


@contextmanager
def weight_sync_lock(run_dir: str | os.PathLike, lock_file: Path = WEIGHT_SYNC_LOCK) -> Iterator[None]:
    def busy() -> HostBusy:
        record = read_holder(lock_file.parent, lock_file.name)
        folder = f", run folder {record['run_dir']}" if record and record.get("run_dir") else ""
        return HostBusy(f"another training run on this host is using verl's weight-sync sockets in /tmp "
                        f"({describe_holder(record)}{folder}; {lock_file}): verl 0.9.1 names them by Ray job id, "
                        "the same in every local Ray cluster, so two runs would cross their weights. Start this run "
                        "after it ends, on another node, or with a private /tmp (Slurm's job_container/tmpfs, "
                        "`unshare -m`)")

    try:
        os.close(os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644))
    except PermissionError as error:  # another user's lock file (0644): their sockets are theirs too
        _unsupported(lock_file, error, "verl's weight-sync sockets")
        yield
        return
    with _held(lock_file, busy, "verl's weight-sync sockets", {**holder_record(), "run_dir": str(run_dir)}):
        yield


def check_run_folder_free(run_dir: str | os.PathLike) -> None:
    """Raise RunFolderBusy when another job holds the folder now."""
    run_dir = Path(run_dir)
    if not (run_dir / RUN_LOCK).exists():
        return
    fd = os.open(run_dir / RUN_LOCK, os.O_RDWR)
    try:
        if _try_lock(fd) is False:
            raise _busy(run_dir)
    except OSError:
        return  # no flock on this file system: nothing to check
    finally:
        os.close(fd)
