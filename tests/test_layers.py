"""The layers: tasks < rewards < data_prep < dara < results < recipes < scripts, examples; no import runs upward.

A lower layer names a higher layer's part by import path (`tasks.registry.load_ref`), never by importing it.
Checked on every import statement of every module (functions' bodies included) by its parsed syntax tree: none runs
up a layer, and no two modules import each other, directly or through others.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["tasks", "rewards", "data_prep", "dara", "results", "recipes", "scripts", "examples"]
LEVEL = {package: index for index, package in enumerate(LAYERS)}


def modules_of(package: str) -> list[Path]:
    return sorted(path for path in (ROOT / package).rglob("*.py") if ".venv" not in path.parts)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """{module: the project's modules its import statements (anywhere in it) run}. Importing `a.b.c` from
    outside package `a.b` runs `a.b`'s __init__ too, so it counts as importing `a.b`."""
    paths = {module_name(path): path for package in LAYERS for path in modules_of(package)}

    def known(name: str) -> str | None:  # the module itself, or the package a name imported from it lies in
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{parent}.{base}".rstrip(".")
                targets |= {f"{base}.{alias.name}" for alias in node.names} | {base}
        edges = set()
        for target in filter(None, map(known, targets)):
            parts = target.split(".")
            edges |= {p for p in (".".join(parts[:i]) for i in range(1, len(parts) + 1))
                      if p in paths and not f"{name}.".startswith(f"{p}.")}
        graph[name] = edges
    return graph


def test_no_import_runs_upward_and_none_forms_a_cycle():
    graph = import_graph()
    level = {name: LEVEL[name.split(".")[0]] for name in graph}
    upward = sorted(f"{name} imports {target}" for name, targets in graph.items() for target in targets
                    if level[target] > level[name])
    assert not upward, "imports that run up a layer:\n" + "\n".join(upward)
    assert sum(name.split(".")[0] in ("tasks", "rewards", "data_prep", "dara", "results") for name in graph) > 80
    assert {"dara.preflight", "dara.config_checks", "dara.estimators.registry"} <= set(graph)
    assert "dara.preflight" in graph["dara.train"]  # the package's __init__ counts (dara.train imports a module of it)
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        pytest.fail("an import cycle: " + " -> ".join(error.args[1]))
