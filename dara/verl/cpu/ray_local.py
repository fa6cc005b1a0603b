"""A local Ray whose files stay inside the run's output folder: `$RAY_TMPDIR` (and with `move_home`, `$HOME`,
where Ray keeps its auth token) point into `<output_dir>/ray`. Unix socket paths are limited to 107 bytes: a long
output path reaches Ray through a short symlink in the system temp folder, removed after Ray stopped."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, suppress
from pathlib import Path

_RAY_SOCKET_SUFFIX = 72  # len("/session_<date>_<pid>/sockets/plasma_store") rounded up, plus "/ray"
_SOCKET_PATH_LIMIT = 107
ALIAS_PREFIX = "dara-ray-"


def alias_path(target: str | os.PathLike) -> Path:
    """The stable short alias path of `target` in the system temp folder (/tmp/dara-ray-<hash>)."""
    return Path(tempfile.gettempdir()) / f"{ALIAS_PREFIX}{hashlib.sha1(str(target).encode()).hexdigest()[:10]}"


def _clear(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _short_alias(target: Path) -> Path:
    """A short symlink to `target`: the stable name, else (one that cannot be cleared) names with this pid."""
    base = alias_path(target)
    problem: OSError | None = None
    for alias in [base, *(base.with_name(f"{base.name}-{os.getpid()}-{n}") for n in range(1, 4))]:
        for _ in range(2):  # once more if something appears between the clearing and the link
            try:
                if not (alias.is_symlink() and os.readlink(alias) == str(target)):
                    _clear(alias)
                    alias.symlink_to(target, target_is_directory=True)
                return alias
            except OSError as error:
                problem = error
                if not isinstance(error, FileExistsError):
                    break
    raise OSError(f"cannot make a short alias of {target} for Ray's socket paths in {base.parent}: {problem}")


def ray_folders(output_dir: str | os.PathLike) -> dict[str, Path]:
    """Create `<output_dir>/ray/{tmp,home}`; `tmp_for_ray` is the (possibly aliased) path to give Ray."""
    root = Path(output_dir).resolve() / "ray"
    tmp, home = root / "tmp", root / "home"
    for folder in (tmp, home):
        folder.mkdir(parents=True, exist_ok=True)
    tmp_for_ray = tmp if len(str(tmp)) + _RAY_SOCKET_SUFFIX <= _SOCKET_PATH_LIMIT else _short_alias(tmp)
    return {"root": root, "tmp": tmp, "home": home, "tmp_for_ray": tmp_for_ray}


def stop_local_ray() -> None:
    """Stop the Ray this process started and wait for its processes, also after a `ray.init` that failed halfway."""
    if (ray := sys.modules.get("ray")) is not None:
        ray.shutdown(wait_for_processes=True)


@contextmanager
def _no_interrupt() -> Iterator[None]:
    """A second Ctrl-C waits until the cleanup after the first is done."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def local_ray_session(output_dir: str | os.PathLike, *, shutdown: bool = True,
                      move_home: bool = True) -> Iterator[dict[str, str]]:
    """Environment for a local Ray inside `output_dir`; yields extra `ray.init` keyword arguments. However the
    block ends, Ray is stopped (with `shutdown`) before the alias goes."""
    folders = ray_folders(output_dir)
    overrides = {"RAY_TMPDIR": str(folders["tmp_for_ray"]), "RAY_AUTH_MODE": "disabled"}
    if move_home:
        overrides["HOME"] = str(folders["home"])
    saved = {key: os.environ.get(key) for key in overrides}
    os.environ.update(overrides)
    try:
        yield {"_temp_dir": str(folders["tmp_for_ray"])}
    finally:
        with _no_interrupt() if threading.current_thread() is threading.main_thread() else nullcontext():
            try:
                if shutdown:
                    stop_local_ray()
            finally:
                if folders["tmp_for_ray"] != folders["tmp"]:
                    with suppress(OSError):  # the next start replaces it
                        _clear(folders["tmp_for_ray"])
                for key, value in saved.items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value
