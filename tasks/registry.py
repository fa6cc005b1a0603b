"""The task registry: one `TaskSpec` per task, looked up by name or by a row's `data_source`. Tasks are the bottom
layer (tasks < rewards, data_prep < dara < results): a task names its parts in higher layers by import path
("package.module:attribute"), loaded by their users (`load_ref`); docs/own_experiment.md registers one."""

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
PARTS = ("datasets", "assets", "evaluations")


@dataclass(frozen=True)
class TaskSpec:
    """One task.

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
        for part in PARTS:
            object.__setattr__(self, part, MappingProxyType(dict(getattr(self, part))))


_lock = threading.RLock()
_tasks: dict[str, TaskSpec] = {}


def register_task(spec: TaskSpec) -> TaskSpec:
    """Add a task (idempotent for an equal spec); a name, data_source or part name another task holds is an error
    naming both."""
    with _lock:
        if spec.name in _tasks:
            if _tasks[spec.name] == spec:
                return spec
            raise ValueError(f"task {spec.name!r} is already registered with another spec")
        for other in _tasks.values():
            for part in ("data_sources", *PARTS):
                if clash := set(getattr(spec, part)) & set(getattr(other, part)):
                    raise ValueError(f"task {spec.name!r}: {part} {sorted(clash)} already belong to task {other.name!r}")
        _tasks[spec.name] = spec
        return spec


def unregister_task(name: str) -> None:
    """Remove a task (a plugin's, or a test's); the project's own tasks are kept."""
    if name in BUILTIN:
        raise ValueError(f"task {name!r} is one of the project's own")
    with _lock:
        _tasks.pop(name, None)


def task_specs() -> dict[str, TaskSpec]:
    """Every registered task by name (the project's own first, in `BUILTIN` order)."""
    for module in BUILTIN.values():
        importlib.import_module(module)
    with _lock:
        return {name: _tasks[name] for name in [*BUILTIN, *(n for n in _tasks if n not in BUILTIN)]}


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


def datasets() -> dict[str, str]:  # `data_prep` dataset name -> module path, over every task
    return _part("datasets")


def asset_builders() -> dict[str, str]:  # `run.assets` name -> builder import path
    return _part("assets")


def evaluations() -> dict[str, str]:  # evaluation bench name -> bench import path
    return _part("evaluations")


def load_module_file(path: str | Path) -> ModuleType:
    """A Python file as a module: an importable module's file (on sys.path) is imported under its own name (one
    module, not a copy); any other file is loaded once as `dara_file_<hash of its resolved path>`."""
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    for entry in sys.path:
        parts = path.with_suffix("").parts
        root = Path(entry or ".").resolve().parts
        if parts[:len(root)] != root or not all(p.isidentifier() for p in parts[len(root):]):
            continue
        dotted = ".".join(parts[len(root):-1] if parts[-1] == "__init__" else parts[len(root):])
        try:
            found = dotted and importlib.util.find_spec(dotted)
        except (ImportError, ValueError):
            continue
        if found and found.origin and Path(found.origin).resolve() == path:
            return importlib.import_module(dotted)
    name = "dara_file_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    with _lock:
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, path)
            sys.modules[name] = module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[name]
                raise
        return sys.modules[name]


def load_ref(ref: str) -> Any:
    """The object an import path names: "package.module:attr.sub", "package.module" (the module) or
    "/path/to/file.py:attr" (`load_module_file`). A bad path is an error naming it."""
    if not isinstance(ref, str) or not ref.strip():
        raise ValueError(f"an import path must be a non-empty string, got {ref!r}")
    target, _, attribute = ref.strip().rpartition(":") if ":" in ref else (ref.strip(), "", "")
    try:
        value = load_module_file(target) if target.endswith(".py") or "/" in target else importlib.import_module(target)
    except (ImportError, OSError) as error:
        raise ValueError(f"cannot load {ref!r}: {error}") from None
    for name in filter(None, attribute.split(".")):
        if not hasattr(value, name):
            raise ValueError(f"cannot load {ref!r}: {getattr(value, '__name__', value)!s} has no attribute {name!r}")
        value = getattr(value, name)
    return value
