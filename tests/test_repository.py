"""The repository stands alone (its data folders list every file with its sha256, no tracked file reads a folder
beside the checkout, the licence files exist) and its layers, tasks < rewards < data_prep < dara < results < recipes
< scripts, examples, import only downward, without a cycle: checked on every import statement of every module
(functions' bodies included) by its parsed syntax tree. A lower layer names a higher layer's part by import path
(`tasks.registry.load_ref`), never by importing it."""

from __future__ import annotations

import ast
import graphlib
import hashlib
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from dara import AUTHORS_REFERENCE, PROJECT_ROOT, SAMPLE_DATA

DATA_FOLDERS = {SAMPLE_DATA: "README.md", AUTHORS_REFERENCE: "SOURCE.md"}
SHA_ROW = re.compile(r"^\| `([^`]+)` \| `([0-9a-f]{64})` \|$", re.MULTILINE)
# the folder beside the checkout that the repository must never read, spelled in pieces so this file does not name it
SHARED = "shared"
OUTSIDE = re.compile("|".join([r"\.\./" + SHARED, "/work/" + SHARED, SHARED + "/(data|reference|paper|notes)"]))
LAYERS = ["tasks", "rewards", "data_prep", "dara", "results", "recipes", "scripts", "examples"]
LEVEL = {package: index for index, package in enumerate(LAYERS)}


@pytest.mark.parametrize("folder", list(DATA_FOLDERS), ids=lambda p: p.name)
def test_every_data_file_is_listed_with_its_sha256(folder: Path):
    readme = folder / DATA_FOLDERS[folder]
    listed = dict(SHA_ROW.findall(readme.read_text()))
    files = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and p != readme}
    assert files and set(listed) == files, f"{readme}: unlisted {files - set(listed)}, missing {set(listed) - files}"
    for name, digest in listed.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, f"{folder / name}: sha256 differs"


def test_no_tracked_file_reads_a_folder_beside_the_checkout():
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=PROJECT_ROOT, capture_output=True, check=True).stdout
    offenders = []
    for name in filter(None, tracked.decode().split("\0")):
        path = PROJECT_ROOT / name
        if path.suffix in {".parquet", ".csv"} or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                offenders.append(f"{name}:{number}")
    assert not offenders, f"tracked lines that read outside the repository: {offenders[:10]}"


def test_licence_notice_and_citation():
    assert "Apache License" in (PROJECT_ROOT / "LICENSE").read_text().splitlines()[0]
    notice = (PROJECT_ROOT / "NOTICE").read_text()
    assert "reference/dara_authors" in notice and "zhaihaotian/DARA" in notice
    citation = yaml.safe_load((PROJECT_ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and citation["license"] == "Apache-2.0"
    assert any("arXiv:2610.00574" == i["value"] for ref in citation["references"] for i in ref.get("identifiers", []))


def modules_of(package: str) -> list[Path]:
    return sorted(path for path in (PROJECT_ROOT / package).rglob("*.py") if ".venv" not in path.parts)


def module_name(path: Path) -> str:
    parts = path.relative_to(PROJECT_ROOT).with_suffix("").parts
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
