"""Every process a run started ends with the run (Linux; elsewhere these do nothing).

Ray's `shutdown` stops the processes Ray knows, not those its workers forked (orphaned to init, kept alive).
`adopt_orphans` makes the run's process a child subreaper; `end_descendants` ends the descendants started after a
given moment, SIGTERM first, SIGKILL after `grace_s`.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from contextlib import suppress
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def adopt_orphans() -> bool:
    return sys.platform.startswith("linux") and ctypes.CDLL(None, use_errno=True).prctl(
        PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def _stat(pid: int) -> list[str]:
    """/proc/<pid>/stat's fields after the command name (state first)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def now_ticks() -> int:
    """Clock ticks since boot (the clock of a process's start time)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


def descendants(pid: int | None = None, since_ticks: int = 0) -> list[int]:
    if not sys.platform.startswith("linux"):
        return []
    todo, found = [os.getpid() if pid is None else pid], []
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                children = [int(child) for child in (task / "children").read_text().split()]
            except OSError:  # the thread ended meanwhile
                continue
            todo += children
            for child in children:
                with suppress(OSError):  # already gone
                    if int(_stat(child)[19]) >= since_ticks:  # field 22: start time
                        found.append(child)
    return found


def running(pid: int) -> bool:  # alive and not a zombie
    try:
        return _stat(pid)[0] != "Z"
    except OSError:
        return False


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signum)


def _reap(pids: list[int]) -> None:  # no zombies of our ended children
    for pid in pids:
        with suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def end_descendants(since_ticks: int = 0, grace_s: float = 10.0) -> list[int]:
    """SIGTERM the descendants started at or after `since_ticks`, SIGKILL those left after `grace_s`."""
    if not (alive := descendants(since_ticks=since_ticks)):
        return []
    _signal_all(alive, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _reap(alive)
        if not [pid for pid in descendants(since_ticks=since_ticks) if running(pid)]:
            return alive
        time.sleep(0.2)
    _signal_all(descendants(since_ticks=since_ticks), signal.SIGKILL)
    time.sleep(0.2)
    _reap(alive)
    return alive
