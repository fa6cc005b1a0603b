"""The GPU locks (constraints/gpu-cu130.txt, gpu-cu129.txt) against the project's dependencies and verl 0.9.1's pins
(the installed verl's metadata, read with `packaging`), and `make install GPU=1` (scripts/install_gpu.sh with
DRY_RUN=1: commands printed, nothing installed): the CUDA line from the driver, the order, flash-attn, offline wheels."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from dara.preflight.environment import FLASH_ATTN_BUILD, MIN_DRIVER
from recipes.runner import PROJECT_ROOT

# verl's extras that make up its FSDP + vLLM stack (flash-attn comes through [fsdp]'s flash-attn extra)
VERL_EXTRAS = ("verl-core", "vllm", "flash-attn-cu130torch211")
LINES = {"cu130": "", "cu129": "+cu129"}  # each line's local version label of the CUDA builds
CUDA_BUILDS = {"torch", "torchvision", "torchaudio", "vllm"}


def lock(line: str) -> dict[str, str]:
    texts = (PROJECT_ROOT / "constraints" / f"gpu-{line}.txt").read_text().splitlines()
    reqs = [Requirement(text.split("#")[0]) for text in texts if text.split("#")[0].strip()]
    specs = [next(iter(req.specifier)) for req in reqs]
    assert all(len(r.specifier) == 1 and s.operator == "==" and not r.marker for r, s in zip(reqs, specs, strict=True))
    pins = {canonicalize_name(req.name): spec.version for req, spec in zip(reqs, specs, strict=True)}
    assert len(pins) == len(reqs), "a package pinned twice"
    return pins


def verl_requirements() -> list[Requirement]:
    reqs = [Requirement(text) for text in importlib.metadata.requires("verl")]
    return [r for r in reqs if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in VERL_EXTRAS)]


@pytest.mark.parametrize("line", list(LINES))
def test_lock_holds_verls_own_pins_in_one_cuda_build_and_satisfies_every_requirement(line):
    pins = lock(line)
    assert importlib.metadata.version("verl") == pins["verl"] == "0.9.1"
    exact = {canonicalize_name(r.name): next(iter(r.specifier)).version for r in verl_requirements()
             if r.marker is not None and len(r.specifier) == 1 and next(iter(r.specifier)).operator == "=="}
    assert {"torch", "vllm", "transformers", "flash-attn"} <= set(exact)
    for name, version in exact.items():
        assert Version(pins[name]).public == version, f"verl pins {name}=={version}, the {line} lock {pins[name]}"
    # torch and vLLM of one line are the same CUDA build (vLLM documents binary incompatibility across builds)
    assert {name: Version(pins[name]).local for name in CUDA_BUILDS} == dict.fromkeys(CUDA_BUILDS, LINES[line][1:] or None)
    assert not any(name.startswith("cupy") for name in pins)  # verl's [fsdp] cupy pin is CUDA 13 only
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    ours = [Requirement(t) for t in project["dependencies"] + project["optional-dependencies"]["gpu"]]
    checked = [req for req in ours + verl_requirements() if canonicalize_name(req.name) in pins]
    for req in checked:
        assert req.specifier.contains(pins[canonicalize_name(req.name)], prereleases=True), f"{req} excludes the lock"
    assert len(checked) >= 8  # verl, transformers (project and verl), vllm, torch, ...


def dry_install(tmp_path, driver: str | None = None, **env: str) -> subprocess.CompletedProcess:
    """scripts/install_gpu.sh with DRY_RUN=1; `driver` is what an nvidia-smi on PATH reports."""
    path = ":".join(p for p in os.environ["PATH"].split(":") if not os.path.exists(os.path.join(p, "nvidia-smi")))
    if driver is not None:
        smi = tmp_path / "bin" / "nvidia-smi"
        smi.parent.mkdir(exist_ok=True)
        smi.write_text(f"#!/bin/sh\necho {driver}\n")
        smi.chmod(0o755)
        path = f"{smi.parent}:{path}"
    return subprocess.run(["bash", "scripts/install_gpu.sh", "install"], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PATH": path, "DRY_RUN": "1", **env})


def pip_lines(result) -> list[str]:
    return [line for line in result.stdout.splitlines() if line.startswith("+ ") and " pip install " in line]


@pytest.mark.parametrize("driver, cuda, line, message", [
    ("575.51.03", "", "cu129", "NVIDIA driver 575.51.03 -> CUDA line 12.9"),
    ("580.65.06", "", "cu130", "NVIDIA driver 580.65.06 -> CUDA line 13.0"),
    ("575.51.03", "13.0", "cu130", "CUDA line 13.0 (CUDA=13.0)"),  # CUDA= overrides the detection
    (None, "", None, "no NVIDIA driver visible (nvidia-smi): run on a GPU node, or choose the line with CUDA=12.9"),
    ("470.82.01", "", None, "NVIDIA driver 470.82.01 is older than 525"),
])
def test_driver_picks_the_cuda_line(tmp_path, driver, cuda, line, message):
    result = dry_install(tmp_path, driver=driver, **({"CUDA": cuda} if cuda else {}))
    assert message in result.stdout and result.returncode == (0 if line else 1), result.stdout + result.stderr
    if line is None:
        return
    torch, vllm, project = pip_lines(result)[1:4]
    assert torch.endswith(" torch torchvision torchaudio") and vllm.endswith(" vllm")
    assert project.endswith(" -e .[verl,dev,gpu]")
    for text in (torch, vllm, project):
        assert f"-c constraints/gpu-{line}.txt" in text
        assert ("--extra-index-url https://download.pytorch.org/whl/cu129 --extra-index-url "
                "https://wheels.vllm.ai/0.24.0/cu129" in text) == (line == "cu129")
    assert MIN_DRIVER == {13: 580, 12: 525}  # the environment check's thresholds are the install's


def test_without_flash_attn_the_install_goes_on_and_names_the_build_and_its_cost(tmp_path):
    result = dry_install(tmp_path, CUDA="12.9", MAX_JOBS="")
    assert result.returncode == 0
    assert pip_lines(result)[-1].endswith("--no-deps bfcl-eval==2026.3.23")  # installed whatever flash-attn did
    assert "flash-attn 2.8.3: NOT INSTALLED: needed by every paper run (make flash-attn)" in result.stdout
    # the compile jobs this machine's RAM carries at about 9 GB each (GB = 10^9 B), at most one per core (nproc)
    kilobytes = int(next(line for line in open("/proc/meminfo") if line.startswith("MemTotal:")).split()[1])
    cores = int(subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout)
    tail, jobs = result.stdout.split("flash-attn is NOT installed")[1], max(1, min(cores, kilobytes // 1_000_000 // 9))
    assert tail.startswith(": no paper run can start without it") and FLASH_ATTN_BUILD == "make flash-attn"
    for fragment in ("--set run.attention=sdpa names those that do", "reported 40-90 min at MAX_JOBS=32",
                     f"about 9 GB of RAM per job, {9 * jobs} GB at MAX_JOBS={jobs}",
                     f"CUDA_HOME=<CUDA 12.x toolkit> MAX_JOBS={jobs} {FLASH_ATTN_BUILD}",
                     "make install GPU=1 CUDA=12.9 FLASH_ATTN_WHEEL=FILE|URL"):
        assert fragment in tail, fragment
    assert "27 GB at MAX_JOBS=3):" in dry_install(tmp_path, CUDA="12.9", MAX_JOBS="3").stdout  # the user's MAX_JOBS
    # the CUDA 13.0 line tries a prebuilt wheel (verl's wheelhouse) only: never a source build here
    (flash,) = [line for line in pip_lines(dry_install(tmp_path, CUDA="13.0")) if "flash-attn" in line]
    assert "--only-binary flash-attn" in flash and "--no-build-isolation" in flash
    assert "verl-wheelhouse" in flash and "flash-attn==2.8.3" in flash
    given = dry_install(tmp_path, CUDA="12.9", FLASH_ATTN_WHEEL="/wheels/flash_attn-2.8.3+cu128torch2.11.whl")
    (flash,) = [line for line in pip_lines(given) if "flash-attn" in line or "flash_attn" in line]
    assert flash.endswith("/wheels/flash_attn-2.8.3+cu128torch2.11.whl")


def test_an_unreachable_index_names_the_wheels_to_download(tmp_path):
    closed = "http://127.0.0.1:9"
    result = dry_install(tmp_path, CUDA="12.9", PROBE="1", PYPI_INDEX=f"{closed}/pypi",
                         TORCH_INDEX_CU129=f"{closed}/torch", VLLM_INDEX_CU129=f"{closed}/vllm")
    assert result.returncode == 1
    (line,) = [line for line in result.stdout.splitlines() if "ERROR" in line]
    assert f"cannot reach {closed}/pypi/pip/ {closed}/torch/torch/ {closed}/vllm/vllm/" in line
    assert "torch==2.11.0+cu129 torchvision==0.26.0+cu129 torchaudio==2.11.0+cu129 vllm==0.24.0+cu129" in line
    assert line.endswith("make install GPU=1 CUDA=12.9 WHEELS=wheels")
    offline = dry_install(tmp_path, CUDA="12.9", PROBE="1", WHEELS="/wheels", PYPI_INDEX=f"{closed}/pypi")
    assert offline.returncode == 0 and all("--find-links /wheels" in line for line in pip_lines(offline)[1:4])


def test_makefile_runs_the_gpu_script_and_keeps_the_cpu_install():
    def make(*args):
        return subprocess.run(["make", "-n", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True).stdout

    gpu = make("-B", "install", "GPU=1", "CUDA=12.9")
    assert "CUDA=12.9" in gpu and "bash scripts/install_gpu.sh install" in gpu and ".installed-gpu" in gpu
    assert "bash scripts/install_gpu.sh flash-attn" in make("flash-attn")
    cpu = [line for line in make("-B", "install").splitlines() if "pip install" in line]
    pip, cpu_torch = ".venv/bin/python -m pip install -q", "-c constraints/cpu.txt torch==2.13.0"
    assert [line for line in cpu if line.startswith(".venv/")] == [
        f"{pip} --upgrade pip setuptools wheel", f"{pip} {cpu_torch}", f'{pip} -c constraints/cpu.txt -e ".[verl,dev]"',
        f"{pip} --no-deps bfcl-eval==2026.3.23"]
    # the TRL environment beside it (docs/trl.md): CPU torch, then the project through its trl extra (no verl)
    trl = [line.replace(".venv-trl/", ".venv/") for line in cpu if line.startswith(".venv-trl/")]
    assert len(trl) == 3 and trl[1] == f"{pip} {cpu_torch}"
    assert trl[2].startswith(f'{pip} -c constraints/cpu.txt -e ".[trl]"')
