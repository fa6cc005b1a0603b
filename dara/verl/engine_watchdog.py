"""A run whose rollout engine died ends in one line instead of hanging (verl 0.9.1 waits forever; docs/cpu.md,
"A dead engine"): the trainer checks each rollout server's `/health` before every advantage step, and a
thread polls it; after `failures` failed polls it writes the line to ENGINE_FAILURE (dara.train prints it) and
ends the trainer's process, stuck in a weight sync."""

from __future__ import annotations

import logging
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from dara.io import atomic_write_text
from dara.reaper import end_descendants

logger = logging.getLogger(__name__)

ENGINE_FAILURE = "engine_failure.txt"  # in the run folder: the watchdog's line, read by dara.train
# rollout backends whose server answers /health (the project's transformers fallback "hf" has none)
HEALTH_ENDPOINT_ENGINES = ("vllm", "sglang")
EXIT_CODE = 75  # the trainer process's exit status when the watchdog ends it
# the servers are on the run's own nodes: never through a proxy (Python ignores no_proxy's CIDR entries)
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class RolloutEngineDied(RuntimeError):
    pass


def health(address: str, timeout_s: float) -> str | None:
    """None when `http://<address>/health` answers 200, else what went wrong."""
    try:
        with _DIRECT.open(f"http://{address}/health", timeout=timeout_s) as response:
            return None if response.status == 200 else f"/health answered {response.status}"
    except urllib.error.HTTPError as error:
        return f"/health answered {error.code}"
    except (OSError, ValueError) as error:  # refused, reset, timed out, bad address
        return f"/health unreachable ({type(error).__name__}: {error})"


def failure_message(engine: str, address: str, problem: str) -> str:
    return (f"the rollout engine ({engine}, server {address}) died: {problem} (its error, if any, is in "
            "logs/main.log). The run folder keeps its last checkpoint: start the same command again to resume")


def read_engine_failure(run_dir: str | os.PathLike | None) -> str | None:
    path = Path(run_dir, ENGINE_FAILURE) if run_dir else None
    return (path.read_text().strip() or None) if path is not None and path.is_file() else None


def clear_engine_failure(run_dir: str | os.PathLike | None) -> None:
    if run_dir:
        Path(run_dir, ENGINE_FAILURE).unlink(missing_ok=True)


def end_trainer_process(code: int) -> None:
    """End the trainer's process, its forks first (they hold its sockets: Ray would see the actor alive)."""
    end_descendants(grace_s=2.0)
    os._exit(code)


class EngineWatchdog:
    def __init__(self, engine: str, addresses: Sequence[str], run_dir: str | None, *, interval_s: float = 5.0,
                 failures: int = 3, end_process: Callable[[int], None] = end_trainer_process):
        if interval_s <= 0 or failures < 1:
            raise ValueError(f"engine watchdog: interval_s must be > 0 and failures >= 1, got {interval_s}, "
                             f"{failures}")
        self.engine, self.addresses, self.run_dir = engine, list(addresses), run_dir
        self.interval_s, self.failures = interval_s, failures
        self._end_process = end_process
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.polls = 0  # completed rounds of the thread

    def problem(self) -> tuple[str, str] | None:
        """(address, problem) of the first server that is not healthy now, else None."""
        return next(((a, found) for a in self.addresses if (found := health(a, timeout_s=self.interval_s))), None)

    def raise_if_dead(self, cause: BaseException | None = None) -> None:
        if (found := self.problem()) is not None:  # `cause`: the error it explains
            raise RolloutEngineDied(failure_message(self.engine, *found)) from cause

    def start(self) -> EngineWatchdog:
        self._thread = threading.Thread(target=self._watch, name="dara-engine-watchdog", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.interval_s)

    def _watch(self) -> None:
        failed = 0
        while not self._stop.wait(self.interval_s):
            found = self.problem()
            self.polls += 1
            failed = failed + 1 if found else 0
            if found and failed >= self.failures:
                line = failure_message(self.engine, *found)
                logger.error("[dara] %s", line)
                if self.run_dir:
                    atomic_write_text(Path(self.run_dir, ENGINE_FAILURE), line + "\n")  # whole or absent
                self._end_process(EXIT_CODE)
                return
