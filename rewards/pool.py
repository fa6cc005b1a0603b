"""A process pool with a hard per-item time limit, safe to use from any thread, Ray actors included.

Why not concurrent.futures / multiprocessing.Pool: neither can stop one running item. Signals
(SIGALRM, math-verify's own timeout) only work in a main thread, and a huge integer power holds the
interpreter lock, so no watchdog thread in the same process ever runs. Here each item runs in a worker
process; a supervisor thread in the owner kills (SIGKILL) a worker whose item passes its deadline,
reports the item as timed out and starts a replacement.

The deadline counts from the moment a worker starts the item, never while it waits in the queue, and a
worker receives items only after it has imported its modules (`preload`), so a slow start never counts.
Workers come from a forkserver (not fork: forking a threaded process such as a Ray actor can deadlock the
child), which imports `preload` once so that replacements start in milliseconds.
"""

from __future__ import annotations

import collections
import ctypes
import importlib
import itertools
import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

logger = logging.getLogger(__name__)

OK, TIMEOUT, ERROR = "ok", "timeout", "error"
_PR_SET_PDEATHSIG = 1
MAX_STARTUP_FAILURES = 3
# Items queued in each worker's pipe at once (the running one included).
PREFETCH = 2


@dataclass(frozen=True)
class Outcome:
    """Result of one item: status "ok" (value holds the return value), "timeout" or "error"
    (error holds the traceback or the reason)."""

    status: str
    value: Any = None
    error: str = ""
    seconds: float = 0.0


def available_cpus() -> int:
    """CPUs this process may run on (the affinity mask, which Ray and Slurm set)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this worker when its parent (the forkserver) exits: a worker stuck in a
    C-level computation would otherwise outlive a crashed owner."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _worker_main(connection: Connection, preload: Sequence[str]) -> None:
    """Worker loop: import `preload`, report ready, then run (task_id, fn, args, kwargs) items until the
    owner closes the pipe."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the owner, which closes the pool
    for module in preload:
        importlib.import_module(module)
    connection.send(("ready", os.getpid()))
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        task_id, fn, args, kwargs = message
        started = time.perf_counter()
        try:
            value = fn(*args, **kwargs)
            reply = (task_id, OK, value, "", time.perf_counter() - started)
            connection.send(reply)
        except BaseException:  # noqa: BLE001 - every failure of an item is reported, never raised here
            connection.send(
                (task_id, ERROR, None, traceback.format_exc(limit=8), time.perf_counter() - started)
            )


@dataclass
class _Task:
    task_id: int
    fn: Callable[..., Any]
    args: tuple
    kwargs: dict
    future: Future


@dataclass
class _Worker:
    process: Any
    connection: Connection
    ready: bool = False
    # Items sent to this worker, in order: the first is running (since `started`), the rest wait in its pipe.
    tasks: collections.deque = field(default_factory=collections.deque)
    started: float = 0.0


@dataclass
class PoolStats:
    """Counters since the pool started."""

    completed: int = 0
    timeouts: int = 0
    errors: int = 0
    restarts: int = 0
    busy_seconds: float = field(default=0.0)


class HardTimeoutPool:
    """`submit(fn, *args, **kwargs) -> Future[Outcome]` and `map(fn, items) -> list[Outcome]`, each item
    limited to `timeout_s` seconds of wall time on a worker. `fn` and its arguments must be picklable
    (module-level functions)."""

    def __init__(
        self,
        num_processes: int | None = None,
        timeout_s: float = 10.0,
        *,
        preload: Sequence[str] = (),
        start_method: str = "forkserver",
    ):
        if timeout_s is None or not timeout_s > 0:
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        self.num_processes = available_cpus() if num_processes is None else int(num_processes)
        if self.num_processes < 1:
            raise ValueError(f"num_processes must be at least 1, got {num_processes!r}")
        self.timeout_s = float(timeout_s)
        self.preload = tuple(preload)
        self.stats = PoolStats()
        self._context = multiprocessing.get_context(start_method)
        if start_method == "forkserver" and self.preload:
            # Only takes effect if this process has not started its forkserver yet; workers import
            # `preload` themselves in any case.
            self._context.set_forkserver_preload(list(self.preload))
        self._lock = threading.Lock()
        self._pending: collections.deque[_Task] = collections.deque()
        self._task_ids = itertools.count()
        self._closed = False  # no new items (set by close, or when the supervisor fails)
        self._shut_down = False  # close() has run
        self._startup_failures = 0
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_writer.setblocking(False)
        self._workers = [self._start_worker() for _ in range(self.num_processes)]
        self._supervisor = threading.Thread(
            target=self._supervise, name="reward-pool-supervisor", daemon=True
        )
        self._supervisor.start()

    # ------------------------------------------------------------------ public API
    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
        """Queue one item; the future resolves to an Outcome (it never raises)."""
        future: Future = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the pool is closed")
            self._pending.append(_Task(next(self._task_ids), fn, args, kwargs, future))
        self._wake()
        return future

    def map(
        self, fn: Callable[..., Any], items: Iterable[tuple], kwargs: dict | None = None
    ) -> list[Outcome]:
        """Run fn(*item, **kwargs) for every item; outcomes in item order."""
        tasks = [_Task(-1, fn, tuple(item), dict(kwargs or {}), Future()) for item in items]
        with self._lock:  # one lock and one wake-up for the whole batch
            if self._closed:
                raise RuntimeError("the pool is closed")
            for task in tasks:
                task.task_id = next(self._task_ids)
            self._pending.extend(tasks)
        self._wake()
        return [task.future.result() for task in tasks]

    def close(self) -> None:
        """Stop the supervisor and the workers; pending items resolve as errors."""
        with self._lock:
            if self._shut_down:
                return
            self._shut_down = self._closed = True
        self._wake()
        self._supervisor.join(timeout=10)
        for worker in self._workers:
            self._stop_worker(worker, graceful=not worker.tasks)
            while worker.tasks:
                self._resolve(worker.tasks.popleft(), Outcome(ERROR, error="pool closed while the item ran"))
        with self._lock:
            while self._pending:
                self._resolve(
                    self._pending.popleft(), Outcome(ERROR, error="pool closed before the item ran")
                )
        self._wake_reader.close()
        self._wake_writer.close()

    def __enter__(self) -> HardTimeoutPool:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------------ workers
    def _start_worker(self) -> _Worker:
        parent_end, child_end = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=_worker_main, args=(child_end, self.preload), name="reward-pool-worker", daemon=True
        )
        process.start()
        child_end.close()
        return _Worker(process=process, connection=parent_end)

    @staticmethod
    def _stop_worker(worker: _Worker, *, graceful: bool) -> None:
        if graceful:
            try:
                worker.connection.send(None)
            except (OSError, ValueError):
                pass
            worker.process.join(timeout=1)
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join(timeout=5)
        worker.connection.close()

    def _replace(self, index: int) -> None:
        self._stop_worker(self._workers[index], graceful=False)
        self._workers[index] = self._start_worker()
        self.stats.restarts += 1

    # ------------------------------------------------------------------ supervisor
    def _wake(self) -> None:
        try:
            self._wake_writer.send(b"x")
        except (BlockingIOError, OSError):
            pass  # a wake-up is already pending, or the pool is closing

    def _resolve(self, task: _Task, outcome: Outcome) -> None:
        if outcome.status == OK:
            self.stats.completed += 1
        elif outcome.status == TIMEOUT:
            self.stats.timeouts += 1
        else:
            self.stats.errors += 1
        self.stats.busy_seconds += outcome.seconds
        if not task.future.done():
            task.future.set_result(outcome)

    def _assign_pending(self) -> None:
        """Give every idle worker an item first, then top each pipe up to PREFETCH items, so a worker
        goes on to its next item without waiting for this thread (which a loaded machine may not
        schedule for milliseconds)."""
        for depth in range(1, PREFETCH + 1):
            for index, worker in enumerate(self._workers):
                if worker.ready and len(worker.tasks) < depth and not self._send_next(index):
                    return

    def _send_next(self, index: int) -> bool:
        """Send the next queued item to worker `index`; False when the queue is empty."""
        worker = self._workers[index]
        with self._lock:
            if not self._pending:
                return False
            task = self._pending.popleft()
        try:
            worker.connection.send((task.task_id, task.fn, task.args, task.kwargs))
        except (OSError, ValueError) as error:  # the worker died
            with self._lock:
                self._pending.appendleft(task)
            logger.warning("reward pool worker %s died (%s); replacing it", worker.process.pid, error)
            self._requeue_and_replace(index, running_outcome=Outcome(ERROR, error="worker process died"))
            return True
        except Exception:  # noqa: BLE001 - e.g. an argument that cannot be pickled
            self._resolve(task, Outcome(ERROR, error=traceback.format_exc(limit=4)))
            return True
        if not worker.tasks:
            worker.started = time.monotonic()
        worker.tasks.append(task)
        return True

    def _requeue_and_replace(self, index: int, running_outcome: Outcome) -> None:
        """Resolve the worker's running item with `running_outcome`, put the items waiting in its pipe
        back at the front of the queue (in order), and replace the worker."""
        worker = self._workers[index]
        running = worker.tasks.popleft() if worker.tasks else None
        with self._lock:
            self._pending.extendleft(reversed(worker.tasks))
        worker.tasks.clear()
        self._replace(index)
        if running is not None:
            self._resolve(running, running_outcome)

    def _receive(self, index: int) -> None:
        worker = self._workers[index]
        try:
            message = worker.connection.recv()
        except (EOFError, OSError):
            if not worker.ready:
                self._startup_failures += 1
                if self._startup_failures > MAX_STARTUP_FAILURES:
                    raise RuntimeError(
                        f"reward pool workers keep dying before they are ready (exit code "
                        f"{worker.process.exitcode}); can they import {self.preload}?"
                    ) from None
            logger.warning(
                "reward pool worker %s exited (code %s); replacing it",
                worker.process.pid,
                worker.process.exitcode,
            )
            elapsed = time.monotonic() - worker.started
            died = Outcome(ERROR, error="worker process died while scoring", seconds=elapsed)
            self._requeue_and_replace(index, running_outcome=died)
            return
        if message[0] == "ready":
            worker.ready = True
            self._startup_failures = 0
            return
        task_id, status, value, error, seconds = message
        if worker.tasks and worker.tasks[0].task_id == task_id:
            task = worker.tasks.popleft()
            # The worker has started its next item (if any) now, as far as this thread can tell: a late
            # read only makes that item's limit more generous, never shorter.
            worker.started = time.monotonic()
            self._resolve(task, Outcome(status, value, error, seconds))

    def _kill_overdue(self) -> None:
        now = time.monotonic()
        for index, worker in enumerate(self._workers):
            if worker.tasks and now - worker.started >= self.timeout_s:
                over = Outcome(
                    TIMEOUT, error=f"over the {self.timeout_s:g} s limit", seconds=now - worker.started
                )
                self._requeue_and_replace(index, running_outcome=over)

    def _next_wait(self) -> float | None:
        deadlines = [w.started + self.timeout_s for w in self._workers if w.tasks]
        if not deadlines:
            return None
        return max(0.0, min(deadlines) - time.monotonic())

    def _supervise(self) -> None:
        try:
            while not self._closed:
                self._supervise_once()
        except BaseException:  # noqa: BLE001 - never leave callers waiting on futures that cannot resolve
            logger.exception("reward pool supervisor failed; failing every queued and running item")
            with self._lock:
                self._closed = True
                stranded = list(self._pending) + [t for w in self._workers for t in w.tasks]
                self._pending.clear()
            for worker in self._workers:
                worker.tasks.clear()
            for task in stranded:
                self._resolve(
                    task, Outcome(ERROR, error=f"reward pool failed: {traceback.format_exc(limit=2)}")
                )

    def _supervise_once(self) -> None:
        self._assign_pending()
        connections = {worker.connection: index for index, worker in enumerate(self._workers)}
        ready = wait([*connections, self._wake_reader], timeout=self._next_wait())
        for item in ready:
            if item is self._wake_reader:
                try:
                    self._wake_reader.recv(4096)
                except OSError:
                    pass
            elif self._workers[connections[item]].connection is item:  # not replaced in this round
                self._receive(connections[item])
        self._kill_overdue()
