"""A quiet main job: everything verl, Ray and the workers print goes to a file; the console gets progress."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from dara.run_log import Progress

# per-step counts the console reports as warnings when non-zero
WARN_COUNTS = {"reward/timeouts": "reward timeouts", "reward/errors": "reward errors",
               "actor/grad_unclipped_updates": "optimizer update(s) not clipped (run.expect_clipped_updates)"}


@contextmanager
def quiet_output(log_path: str | os.PathLike) -> Iterator[TextIO]:
    """Redirect fds 1 and 2 (also what Ray forwards and starts) into `log_path` for the block; yield a stream to
    the real stdout."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    console = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8", errors="replace")
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    try:
        yield console
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for target, fd in enumerate(saved, start=1):
            os.dup2(fd, target)
            os.close(fd)
        console.close()


def step_warnings(record: dict) -> list[str]:
    """`[dara] warning: step 3: 2 reward timeouts` per non-zero count of WARN_COUNTS."""
    return [f"[dara] warning: step {record['step']}: {record[key]:.0f} {what}"
            for key, what in WARN_COUNTS.items() if record.get(key, 0) > 0]


@contextmanager
def follow_progress(progress: Progress, write: Callable[[str], None], interval: float = 1.0) -> Iterator[None]:
    """Write `progress`'s lines (and step warnings) every `interval` seconds while the block runs, and once after."""
    stop = threading.Event()

    def emit():
        for line, record in progress.poll_records():
            write(line)
            for warning in step_warnings(record):
                write(warning)

    def loop():
        while not stop.wait(interval):
            emit()

    thread = threading.Thread(target=loop, name="dara-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        emit()
