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
that points into the output folder (the files still live there).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# len("/session_2026-11-29_23-30-30_123456_1234567/sockets/plasma_store") rounded up, plus "/ray" Ray appends
_RAY_SOCKET_SUFFIX = 72
_SOCKET_PATH_LIMIT = 107


def _short_alias(target: Path) -> Path:
    """A stable short symlink to ``target`` in the system temp folder (replaced if it points elsewhere)."""
    digest = hashlib.sha1(str(target).encode()).hexdigest()[:10]
    alias = Path(tempfile.gettempdir()) / f"dara-ray-{digest}"
    if alias.is_symlink() and Path(os.readlink(alias)) == target:
        return alias
    if alias.is_symlink() or alias.exists():
        alias.unlink()
    alias.symlink_to(target, target_is_directory=True)
    return alias


def ray_folders(output_dir: str | os.PathLike) -> dict[str, Path]:
    """Create ``<output_dir>/ray/{tmp,home}``; ``tmp_for_ray`` is the (possibly aliased) path to give Ray."""
    root = Path(output_dir).resolve() / "ray"
    tmp, home = root / "tmp", root / "home"
    tmp.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    tmp_for_ray = tmp if len(str(tmp)) + _RAY_SOCKET_SUFFIX <= _SOCKET_PATH_LIMIT else _short_alias(tmp)
    return {"root": root, "tmp": tmp, "home": home, "tmp_for_ray": tmp_for_ray}


@contextmanager
def local_ray_session(output_dir: str | os.PathLike, *, shutdown: bool = True,
                      move_home: bool = True) -> Iterator[dict[str, str]]:
    """Environment for a local Ray run inside ``output_dir``; yields extra ``ray.init`` keyword arguments.

    Use around verl's ``run_ppo`` (which calls ``ray.init`` itself) and merge the yielded dict into
    ``ray_kwargs.ray_init`` (it holds ``_temp_dir``).
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
        try:
            if shutdown:
                import ray

                if ray.is_initialized():
                    ray.shutdown()
        finally:
            if folders["tmp_for_ray"] != folders["tmp"] and folders["tmp_for_ray"].is_symlink():
                folders["tmp_for_ray"].unlink()  # the short alias only lives as long as the session
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
