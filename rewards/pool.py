"""A process pool with a hard per-item time limit, safe to use from any thread, Ray actors included.

concurrent.futures and multiprocessing.Pool cannot stop one running item, and signals only work in a main thread
(a C loop holding the GIL also starves a watchdog thread). Here the owner's thread serving a worker process kills
it (SIGKILL) when its item passes the deadline, reports a timeout and starts a replacement. A worker gets an item
only when idle and after importing `preload` (the deadline never counts queueing or start-up); workers come from a
forkserver (forking a threaded process such as a Ray actor can deadlock the child) that imported `preload` once,
so replacements start in milliseconds.
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib
import multiprocessing
import os
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import Any

OK, TIMEOUT, ERROR = "ok", "timeout", "error"
MAX_STARTUP_FAILURES = 3


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One item's result: status OK (`value` holds the return value), TIMEOUT or ERROR (`error` says why)."""

    status: str
    value: Any = None
    error: str = ""
    seconds: float = 0.0


def available_cpus() -> int:
    """CPUs this process may run on (the affinity mask, which Ray and Slurm set)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _worker_main(connection, preload: Sequence[str]) -> None:
    """Import `preload`, say ready, then run (fn, args, kwargs) items until the owner sends None."""
    try:  # PR_SET_PDEATHSIG: die with the forkserver, so a worker stuck in C code never outlives a crashed owner
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the owner, which closes the pool
    for module in preload:
        importlib.import_module(module)
    connection.send("ready")
    try:
        while (message := connection.recv()) is not None:
            fn, args, kwargs = message
            started = time.perf_counter()
            try:
                outcome = Outcome(OK, fn(*args, **kwargs))
            except BaseException:  # noqa: BLE001 - every failure of an item is reported, never raised here
                outcome = Outcome(ERROR, error=traceback.format_exc(limit=8))
            connection.send(dataclasses.replace(outcome, seconds=time.perf_counter() - started))
    except EOFError:  # the owner went away
        pass


class HardTimeoutPool:
    """`submit(fn, *args, **kwargs) -> Future[Outcome]` and `map(fn, items) -> list[Outcome]`, each item limited
    to `timeout_s` seconds of wall time on a worker; `fn` and its arguments must pickle (module-level functions)."""

    def __init__(self, num_processes: int | None = None, timeout_s: float = 10.0, *, preload: Sequence[str] = (),
                 start_method: str = "forkserver"):
        if timeout_s is None or not timeout_s > 0:
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        self.num_processes = available_cpus() if num_processes is None else int(num_processes)
        if self.num_processes < 1:
            raise ValueError(f"num_processes must be at least 1, got {num_processes!r}")
        self.timeout_s, self.preload = float(timeout_s), tuple(preload)
        self._context = multiprocessing.get_context(start_method)
        if start_method == "forkserver" and self.preload:  # only before this process's forkserver has started
            self._context.set_forkserver_preload(list(self.preload))
        self.closed = False
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._workers: list = [None] * self.num_processes  # (process, connection) of each serving thread
        self._threads = [threading.Thread(target=self._serve, args=(index,), name="reward-pool", daemon=True)
                         for index in range(self.num_processes)]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
        """Queue one item; the future resolves to an Outcome (it never raises)."""
        future: Future = Future()
        with self._lock:
            if self.closed:
                raise RuntimeError("the pool is closed")
            self._queue.put((fn, args, kwargs, future))
        return future

    def map(self, fn: Callable[..., Any], items: Iterable[tuple], kwargs: dict | None = None) -> list[Outcome]:
        """fn(*item, **kwargs) for every item; outcomes in item order."""
        futures = [self.submit(fn, *item, **(kwargs or {})) for item in items]
        return [future.result() for future in futures]

    def close(self) -> None:
        """Stop the workers; queued and running items resolve as errors."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
        while True:
            try:
                task = self._queue.get_nowait()
            except queue.Empty:
                break
            if task[3].set_running_or_notify_cancel():  # not cancelled by its caller
                task[3].set_result(Outcome(ERROR, error="pool closed before the item ran"))
        for worker in list(self._workers):
            if worker is not None:
                worker[0].kill()
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join(timeout=10)

    def __enter__(self) -> HardTimeoutPool:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _start_worker(self, index: int) -> str:
        """Start worker `index` and wait until it has imported `preload`; "" or why it cannot start."""
        for _ in range(MAX_STARTUP_FAILURES):
            parent, child = self._context.Pipe()
            process = self._context.Process(target=_worker_main, args=(child, self.preload), daemon=True,
                                            name="reward-pool-worker")
            process.start()
            child.close()
            try:
                parent.recv()
                self._workers[index] = (process, parent)
                return ""
            except (EOFError, OSError):
                process.join(5)
                parent.close()
        return (f"reward pool workers keep dying before they are ready (exit code {process.exitcode}); can they "
                f"import {self.preload}?")

    def _stop_worker(self, index: int) -> None:
        process, connection = self._workers[index]
        self._workers[index] = None
        try:
            connection.send(None)
        except (OSError, ValueError):
            pass
        process.join(timeout=1)
        if process.is_alive():
            process.kill()
            process.join(timeout=5)
        connection.close()

    def _run(self, index: int, fn, args, kwargs) -> Outcome:
        """One item on worker `index`; a worker that timed out or died is stopped (the caller replaces it)."""
        process, connection = self._workers[index]
        started = time.monotonic()
        try:
            connection.send((fn, args, kwargs))
            if connection.poll(self.timeout_s):
                return connection.recv()
            outcome = Outcome(TIMEOUT, error=f"over the {self.timeout_s:g} s limit", seconds=self.timeout_s)
        except (EOFError, OSError):
            why = "pool closed while the item ran" if self.closed else "worker process died while scoring"
            outcome = Outcome(ERROR, error=why, seconds=time.monotonic() - started)
        except Exception:  # noqa: BLE001 - e.g. an argument that cannot be pickled: the worker is fine
            return Outcome(ERROR, error=traceback.format_exc(limit=4))
        process.kill()
        self._stop_worker(index)
        return outcome

    def _serve(self, index: int) -> None:
        broken = ""
        while True:
            if self._workers[index] is None and not broken and not self.closed:
                try:
                    broken = self._start_worker(index)
                except Exception as error:  # noqa: BLE001 - e.g. no process can start: items fail, never hang
                    broken = f"reward pool worker failed to start: {type(error).__name__}: {error}"
            task = self._queue.get()
            if task is None:
                break
            fn, args, kwargs, future = task
            if not future.set_running_or_notify_cancel():  # cancelled by its caller (e.g. asyncio): not run
                continue
            if self._workers[index] is None:
                future.set_result(Outcome(ERROR, error=broken or "pool closed before the item ran"))
            else:
                future.set_result(self._run(index, fn, args, kwargs))
        if self._workers[index] is not None:
            self._stop_worker(index)
