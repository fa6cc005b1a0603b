"""Every process a run started ends with the run (Linux; elsewhere these do nothing).

Ray's ``shutdown`` stops the processes Ray knows (its daemons, its workers), not the processes those workers
forked: a trainer actor's forks (found alive an hour after a run whose rollout engine died, 0.6 GB each) are
orphaned, handed to init and kept. Two guards:

- :func:`adopt_orphans` makes the run's process a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so an
  orphaned descendant is handed to it instead of init and stays findable;
- :func:`end_descendants` ends the descendants of this process that started after a given moment (what the run
  started: a test process's earlier children are left alone), SIGTERM first, SIGKILL after ``grace_s``.

``dara.train`` calls both around a run; the engine watchdog ends its own process's descendants before it ends
the process, so Ray sees the actor's sockets close at once instead of after its keepalive timeout.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def adopt_orphans() -> bool:
    """Make this process the subreaper of its descendants; False where Linux's prctl is not there."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def start_ticks(pid: int) -> int:
    """A process's start time in clock ticks since boot (/proc/<pid>/stat field 22)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def now_ticks() -> int:
    """The current time in the same clock as :func:`start_ticks`."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:  # the thread ended meanwhile
            continue
    return found


def descendants(pid: int | None = None, since_ticks: int = 0) -> list[int]:
    """The descendants of ``pid`` (this process by default) that started at or after ``since_ticks``."""
    if not sys.platform.startswith("linux"):
        return []
    todo, found = [os.getpid() if pid is None else pid], []
    while todo:
        for child in children(todo.pop()):
            todo.append(child)
            try:
                if start_ticks(child) >= since_ticks:
                    found.append(child)
            except OSError:  # already gone
                continue
    return found


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def _reap(pids: list[int]) -> None:
    """Collect the exit status of those of ``pids`` that are ended children of this process (adopted orphans
    included), so none stays a zombie; another's child, or one still running, is left as it is."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def end_descendants(since_ticks: int = 0, grace_s: float = 10.0) -> list[int]:
    """SIGTERM the descendants started at or after ``since_ticks``, SIGKILL those left after ``grace_s``; returns
    the pids that were alive."""
    alive = descendants(since_ticks=since_ticks)
    if not alive:
        return []
    _signal_all(alive, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _reap(alive)
        left = [pid for pid in descendants(since_ticks=since_ticks) if running(pid)]
        if not left:
            return alive
        time.sleep(0.2)
    _signal_all(descendants(since_ticks=since_ticks), signal.SIGKILL)
    time.sleep(0.2)
    _reap(alive)
    return alive


def running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
