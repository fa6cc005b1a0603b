"""The task registry: one `TaskSpec` per task, looked up by name or by a row's `data_source`.

A task names the `data_source` values of its rows, the reward that scores them, the `data_prep` datasets, the
offline asset builders (`run.assets`) and its evaluation benches. Tasks are the bottom layer (tasks < rewards,
data_prep < dara < results): parts in higher layers are import paths ("package.module:attribute") loaded by
their users (`load_ref`). The project's tasks register in their protocol modules (`BUILTIN`); another task
registers with `register_task(TaskSpec(...))` (docs/own_experiment.md).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

# the project's tasks and their protocol modules, imported (and so registered) on the first lookup
BUILTIN = {"toolrl": "tasks.toolrl", "math": "tasks.math"}


@dataclass(frozen=True)
class TaskSpec:
    """One task. Parts in higher layers are import paths ("module:attribute"), loaded by their users.

    name: the task's name ("toolrl", "math").
    data_sources: the `data_source` values of its rows; each belongs to one task.
    reward: the scorer of its rows (`rewards.task_rewards.TaskReward`: channels with ranges, score, fallback).
    datasets: `python -m data_prep <name>` -> the data_prep module that builds it.
    assets: `run.assets` name -> builder `fn(assets_dir, output_root)` of offline assets (`dara.assets`).
    evaluations: `python -m results.evaluation <bench>` -> the bench (`results.evaluation.benches.Bench`).
    """

    name: str
    data_sources: tuple[str, ...]
    reward: str
    datasets: Mapping[str, str] = field(default_factory=dict)
    assets: Mapping[str, str] = field(default_factory=dict)
    evaluations: Mapping[str, str] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        if not self.name or not self.data_sources:
            raise ValueError(f"a task needs a name and at least one data_source, got {self.name!r}, "
                             f"{self.data_sources!r}")
        object.__setattr__(self, "data_sources", tuple(self.data_sources))
        for part in ("datasets", "assets", "evaluations"):
            object.__setattr__(self, part, MappingProxyType(dict(getattr(self, part))))


_lock = threading.RLock()
_tasks: dict[str, TaskSpec] = {}
_builtins_loaded = False


def register_task(spec: TaskSpec) -> TaskSpec:
    """Add a task (idempotent for an equal spec); a name, data_source or part name another task already
    holds is an error naming both."""
    with _lock:
        existing = _tasks.get(spec.name)
        if existing is not None:
            if existing == spec:
                return existing
            raise ValueError(f"task {spec.name!r} is already registered with another spec")
        for other in _tasks.values():
            for part in ("data_sources", "datasets", "assets", "evaluations"):
                clash = set(getattr(spec, part)) & set(getattr(other, part))
                if clash:
                    raise ValueError(f"task {spec.name!r}: {part} {sorted(clash)} already belong to task {other.name!r}")
        _tasks[spec.name] = spec
        return spec


def unregister_task(name: str) -> None:
    """Remove a task (a plugin's, or a test's); the project's own tasks are kept."""
    if name in BUILTIN:
        raise ValueError(f"task {name!r} is one of the project's own")
    with _lock:
        _tasks.pop(name, None)


def _load_builtins() -> None:
    global _builtins_loaded
    with _lock:
        if _builtins_loaded:
            return
        _builtins_loaded = True
        for module in BUILTIN.values():
            importlib.import_module(module)


def task_specs() -> dict[str, TaskSpec]:
    """Every registered task by name (the project's own first, in `BUILTIN` order)."""
    _load_builtins()
    with _lock:
        order = [*BUILTIN, *(name for name in _tasks if name not in BUILTIN)]
        return {name: _tasks[name] for name in order if name in _tasks}


def task_for_source(data_source: str) -> TaskSpec:
    """The task whose rows carry `data_source`; an unknown source is an error listing the known ones."""
    for spec in task_specs().values():
        if data_source in spec.data_sources:
            return spec
    raise ValueError(f"unknown data_source {data_source!r}: the registered tasks score "
                     f"{sorted(data_sources())} (a reward of your own: reward.custom_reward_function.path)")


def data_sources() -> frozenset[str]:
    return frozenset(source for spec in task_specs().values() for source in spec.data_sources)


def _part(part: str) -> dict[str, str]:
    return {name: ref for spec in task_specs().values() for name, ref in getattr(spec, part).items()}


def datasets() -> dict[str, str]:
    """`data_prep` dataset name -> module path, over every task."""
    return _part("datasets")


def asset_builders() -> dict[str, str]:
    """`run.assets` name -> builder import path, over every task."""
    return _part("assets")


def evaluations() -> dict[str, str]:
    """Evaluation bench name -> bench import path, over every task."""
    return _part("evaluations")


# ----------------------------------------------------------------------------- import paths
def load_module_file(path: str | Path) -> ModuleType:
    """A Python file as a module. A file that is an importable module's (on sys.path) is imported under its
    own name, so it is one module, not a copy; any other file is loaded once under a name derived from its
    resolved path (`dara_file_<hash>`) and kept in sys.modules."""
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    dotted = _importable_name(path)
    if dotted is not None:
        return importlib.import_module(dotted)
    name = "dara_file_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    with _lock:
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
        return module


def _importable_name(path: Path) -> str | None:
    """The dotted name under which `path` is imported from sys.path, or None."""
    for entry in sys.path:
        root = Path(entry or ".").resolve()
        try:
            relative = path.relative_to(root)
        except ValueError:
            continue
        parts = relative.with_suffix("").parts
        if not parts or not all(part.isidentifier() for part in parts):
            continue
        dotted = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        try:
            found = importlib.util.find_spec(dotted)
        except (ImportError, ValueError):
            continue
        if found is not None and found.origin and Path(found.origin).resolve() == path:
            return dotted
    return None


def load_ref(ref: str) -> Any:
    """The object an import path names: "package.module:attr.sub", "package.module" (the module) or
    "/path/to/file.py:attr" (a file loaded by `load_module_file`). A bad path is an error naming it."""
    if not isinstance(ref, str) or not ref.strip():
        raise ValueError(f"an import path must be a non-empty string, got {ref!r}")
    target, _, attribute = ref.strip().rpartition(":") if ":" in ref else (ref.strip(), "", "")
    try:
        if target.endswith(".py") or "/" in target:
            module = load_module_file(target)
        else:
            module = importlib.import_module(target)
    except (ImportError, OSError) as error:
        raise ValueError(f"cannot load {ref!r}: {error}") from None
    value: Any = module
    for name in filter(None, attribute.split(".")):
        if not hasattr(value, name):
            raise ValueError(f"cannot load {ref!r}: {getattr(value, '__name__', value)!s} has no attribute {name!r}")
        value = getattr(value, name)
    return value
