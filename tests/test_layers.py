"""The layers: tasks < rewards < data_prep < dara < results < recipes < scripts, examples; no import runs upward.

A lower layer names a higher layer's part by import path (`tasks.registry.load_ref`), never by importing it,
so a cycle between packages cannot form. Checked twice: every import statement of every module (functions'
bodies included) by its parsed syntax tree, and in a fresh interpreter that imports every module layer by
layer, bottom up, and records which packages each layer's imports brought in. Within a layer no two modules
import each other, directly or through others (the same statements, a deferred import in a function too).
"""

from __future__ import annotations

import ast
import graphlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["tasks", "rewards", "data_prep", "dara", "results", "recipes", "scripts", "examples"]
LEVEL = {package: index for index, package in enumerate(LAYERS)}


def modules_of(package: str) -> list[Path]:
    return sorted(path for path in (ROOT / package).rglob("*.py") if ".venv" not in path.parts)


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """(project package, line) of every absolute import in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        found |= {(name.split(".")[0], node.lineno) for name in names if name.split(".")[0] in LEVEL}
    return found


def test_no_import_statement_runs_upward():
    upward = []
    for package in LAYERS:
        for path in modules_of(package):
            upward += [f"{path.relative_to(ROOT)}:{line} imports {target}"
                       for target, line in imported_packages(path) if LEVEL[target] > LEVEL[package]]
    assert not upward, "imports that run up a layer:\n" + "\n".join(sorted(upward))
    assert sum(len(modules_of(p)) for p in ("tasks", "rewards", "data_prep", "dara", "results")) > 80


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


def test_no_import_cycle_among_the_projects_modules():
    graph = import_graph()
    assert {"dara.preflight", "dara.config_checks", "dara.estimators.registry"} <= set(graph)
    assert "dara.preflight" in graph["dara.train"]  # the package's __init__ counts (dara.train imports a module of it)
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        pytest.fail("an import cycle: " + " -> ".join(error.args[1]))


PROBE = """
import importlib, json, pkgutil, sys
layers, skipped = json.loads(sys.argv[1]), tuple(json.loads(sys.argv[2]))
report = {}
for package in layers:
    root = importlib.import_module(package)
    modules = pkgutil.walk_packages(root.__path__, package + ".", onerror=lambda name: None)
    names = [m.name for m in modules if not m.name.endswith("__main__") and not m.name.startswith(skipped)]
    for name in names:
        importlib.import_module(name)
    report[package] = sorted({m.split(".")[0] for m in sys.modules} & set(layers))
print(json.dumps(report))
"""


@pytest.mark.slow  # imports every module of five packages, verl and torch included (~25 s)
def test_importing_a_layer_brings_in_no_higher_layer():
    import importlib.util

    layers = ["tasks", "rewards", "data_prep", "dara", "results"]
    # dara.trl imports trl, which lives in the TRL environment only (docs/trl.md): left out where trl is missing
    skipped = [] if importlib.util.find_spec("trl") else ["dara.trl"]
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(layers), json.dumps(skipped)],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    for index, package in enumerate(layers):
        assert set(report[package]) == set(layers[: index + 1]), (package, report[package])
