"""constraints/gpu.txt is consistent with the project's own dependencies and verl 0.9.1's pins, read from the
installed verl's metadata and pyproject.toml with `packaging` (no CUDA wheel is downloaded), and the Makefile's
GPU install uses it in the order flash-attn needs."""

from __future__ import annotations

import importlib.metadata
import subprocess
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from dara.preflight.environment import FLASH_ATTN_INSTALL
from recipes.runner import PROJECT_ROOT

# verl's extras that make up its FSDP + vLLM stack (flash-attn comes through [fsdp]'s flash-attn extra)
VERL_EXTRAS = ("verl-core", "vllm", "flash-attn-cu130torch211")


def lock() -> dict[str, str]:
    pins = {}
    for line in (PROJECT_ROOT / "constraints" / "gpu.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        req = Requirement(line)
        (spec,) = req.specifier
        assert spec.operator == "==" and not req.marker, f"not a pin: {line}"
        name = canonicalize_name(req.name)
        assert name not in pins, f"{name} pinned twice"
        pins[name] = spec.version
    return pins


def verl_requirements() -> list[Requirement]:
    found = []
    for text in importlib.metadata.requires("verl"):
        req = Requirement(text)
        if req.marker is None or any(req.marker.evaluate({"extra": extra}) for extra in VERL_EXTRAS):
            found.append(req)
    return found


def project_requirements() -> list[Requirement]:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(t) for t in project["dependencies"] + project["optional-dependencies"]["gpu"]]


def test_lock_holds_verls_own_pins_of_its_vllm_and_flash_attn_extras():
    pins = lock()
    assert importlib.metadata.version("verl") == pins["verl"] == "0.9.1"
    exact = {canonicalize_name(r.name): next(iter(r.specifier)).version for r in verl_requirements()
             if r.marker is not None and len(r.specifier) == 1 and next(iter(r.specifier)).operator == "=="}
    assert {"torch", "vllm", "transformers", "flash-attn"} <= set(exact)
    for name, version in exact.items():
        assert pins.get(name) == version, f"verl pins {name}=={version}, the lock {pins.get(name)}"


def test_every_locked_version_satisfies_the_project_and_verl():
    pins = lock()
    checked = 0
    for req in project_requirements() + verl_requirements():
        version = pins.get(canonicalize_name(req.name))
        if version is not None:
            assert req.specifier.contains(version, prereleases=True), f"{req} excludes the locked {version}"
            checked += 1
    assert checked >= 8  # verl, transformers (project and verl), vllm, torch, ...


def test_makefile_gpu_install_uses_the_lock_torch_first_then_flash_attn_without_build_isolation():
    out = subprocess.run(["make", "-n", "-B", "install", "GPU=1"], cwd=PROJECT_ROOT, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    pip = [line for line in out if "pip install" in line]
    torch = next(i for i, line in enumerate(pip) if " torch " in f"{line} ")
    project = next(i for i, line in enumerate(pip) if '-e ".[dev,gpu]"' in line)
    flash = next(i for i, line in enumerate(pip) if "flash-attn" in line)
    assert torch < project < flash
    assert all("-c constraints/gpu.txt" in pip[i] for i in (torch, project, flash))
    assert "--no-build-isolation" in pip[flash]
    assert f"flash-attn=={lock()['flash-attn']}" in FLASH_ATTN_INSTALL
    cpu = subprocess.run(["make", "-n", "-B", "install"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                         check=True).stdout
    assert "torch==2.13.0" in cpu and "gpu.txt" not in cpu and "flash-attn" not in cpu
