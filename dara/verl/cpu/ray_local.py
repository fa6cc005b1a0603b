"""A local Ray whose files stay inside the run's output folder.

Ray 2.60 puts its session (logs, sockets, spilled objects) under ``$RAY_TMPDIR`` (else the system temp folder)
and writes an auth token under ``$HOME``. :func:`local_ray_session` points both into ``<output_dir>/ray`` for
the driver and every process Ray starts (they inherit the driver's environment), turns Ray's token auth off
(``RAY_AUTH_MODE=disabled``: a local, single-user cluster), and shuts Ray down and restores the environment
on exit.

HOME moves only where the caller asks (``move_home``: the CPU path, whose tests and tiny runs must leave the
user's home untouched). A GPU run keeps the real HOME: the HF hub cache, wandb credentials and pip cache live
there, and moving it would re-download every model into each run folder (or fail on an offline node).

Unix socket paths are limited to 107 bytes and Ray nests ``session_<date>_<pid>/sockets/plasma_store`` under its
temp folder: when the output folder's path is too long, Ray is given a short symlink in the system temp folder
that points into the output folder (the files still live there). Whatever is at that alias path already (a
link left by a job that was killed, or a real folder: Ray recreated its session folder there after an older
version of this module had removed the link) is replaced; a path that cannot be cleared gives way to another
name. The session removes the alias on every way out (an error, Ctrl-C), after it has stopped the Ray
processes this process started (:func:`stop_local_ray`), so nothing recreates it after.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# len("/session_2026-11-29_23-30-30_123456_1234567/sockets/plasma_store") rounded up, plus "/ray" Ray appends
_RAY_SOCKET_SUFFIX = 72
_SOCKET_PATH_LIMIT = 107


ALIAS_PREFIX = "dara-ray-"
_ALIAS_TRIES = 4  # the stable name, then names with this process's id


def alias_path(target: str | os.PathLike) -> Path:
    """The stable short alias path of `target` in the system temp folder (/tmp/dara-ray-<hash>)."""
    digest = hashlib.sha1(str(target).encode()).hexdigest()[:10]
    return Path(tempfile.gettempdir()) / f"{ALIAS_PREFIX}{digest}"


def _clear(path: Path) -> None:
    """Remove whatever is at `path`: a link (to anywhere), a file, or a real folder and its contents."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _claim_alias(alias: Path, target: Path) -> Path:
    """`alias` as a link to `target`, replacing what is there (OSError where it cannot)."""
    for _ in range(2):  # once more if something appears between the clearing and the link
        if alias.is_symlink() and os.readlink(alias) == str(target):
            return alias
        _clear(alias)
        try:
            alias.symlink_to(target, target_is_directory=True)
            return alias
        except FileExistsError:
            continue
    raise FileExistsError(f"{alias} keeps reappearing")


def _short_alias(target: Path) -> Path:
    """A stable short symlink to ``target`` in the system temp folder. A stale link, file or folder at that path
    (left by a crashed run) is replaced; one that cannot be removed (another user's) gives way to a name with
    this process's id, so an old crash is never fatal."""
    base = alias_path(target)
    names = [base, *(base.with_name(f"{base.name}-{os.getpid()}-{n}") for n in range(1, _ALIAS_TRIES))]
    problem: OSError | None = None
    for alias in names:
        try:
            return _claim_alias(alias, target)
        except OSError as error:
            problem = error
    raise OSError(f"cannot make a short alias of {target} for Ray's socket paths in {base.parent}: {problem}")


def ray_folders(output_dir: str | os.PathLike) -> dict[str, Path]:
    """Create ``<output_dir>/ray/{tmp,home}``; ``tmp_for_ray`` is the (possibly aliased) path to give Ray."""
    root = Path(output_dir).resolve() / "ray"
    tmp, home = root / "tmp", root / "home"
    tmp.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    tmp_for_ray = tmp if len(str(tmp)) + _RAY_SOCKET_SUFFIX <= _SOCKET_PATH_LIMIT else _short_alias(tmp)
    return {"root": root, "tmp": tmp, "home": home, "tmp_for_ray": tmp_for_ray}


def stop_local_ray() -> None:
    """Stop the Ray this process started (or disconnect from a cluster it joined), waiting for its processes.

    Also after a ``ray.init`` that failed halfway (a runtime_env Ray refuses is checked only after the head
    node's processes are up): Ray then reports itself not initialised while those processes run, and its exit
    hook would stop them only when the interpreter ends, writing into the session folder long after the run
    removed its alias (which is how a real folder came to stand at the alias path). ``ray.shutdown`` stops them
    too, so it is called whether or not Ray says it is initialised.
    """
    ray = sys.modules.get("ray")
    if ray is not None:  # Ray's shutdown stops whatever this process started, and is a no-op when nothing runs
        ray.shutdown(wait_for_processes=True)


@contextmanager
def _no_interrupt() -> Iterator[None]:
    """A second Ctrl-C waits until the block (the cleanup after the first) is done (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def remove_alias(folders: dict[str, Path]) -> None:
    """Remove the short alias of ``ray_folders`` (nothing when Ray was given the run's own folder)."""
    alias = folders["tmp_for_ray"]
    if alias != folders["tmp"] and (alias.is_symlink() or os.path.lexists(alias)):
        try:
            _clear(alias)
        except OSError:
            pass  # the next start replaces it


@contextmanager
def local_ray_session(output_dir: str | os.PathLike, *, shutdown: bool = True,
                      move_home: bool = True) -> Iterator[dict[str, str]]:
    """Environment for a local Ray run inside ``output_dir``; yields extra ``ray.init`` keyword arguments.

    Use around verl's ``run_ppo`` (which calls ``ray.init`` itself) and merge the yielded dict into
    ``ray_kwargs.ray_init`` (it holds ``_temp_dir``). However the block ends (an error, a failed ``ray.init``,
    Ctrl-C), Ray's processes are stopped (with ``shutdown``) before the alias goes.
    """
    folders = ray_folders(output_dir)
    overrides = {"RAY_TMPDIR": str(folders["tmp_for_ray"]), "RAY_AUTH_MODE": "disabled"}
    if move_home:
        overrides["HOME"] = str(folders["home"])
    saved = {key: os.environ.get(key) for key in overrides}
    os.environ.update(overrides)
    try:
        yield {"_temp_dir": str(folders["tmp_for_ray"])}
    finally:
        with _no_interrupt():
            try:
                if shutdown:
                    stop_local_ray()
            finally:
                remove_alias(folders)  # the short alias only lives as long as the session
                for key, value in saved.items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value
