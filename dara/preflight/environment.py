"""Is the Python environment the run will use able to run it? Each missing piece names the command that fixes it."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
import subprocess

from omegaconf import DictConfig

from dara.preflight.report import Section

GPU_INSTALL = "make install GPU=1"
FLASH_ATTN_INSTALL = ".venv/bin/python -m pip install --no-build-isolation -c constraints/gpu.txt flash-attn==2.8.3"
# torch 2.11's default PyPI build is CUDA 13.0: NVIDIA driver 580 or newer
MIN_DRIVER = 580


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def driver_version() -> str | None:
    """The NVIDIA driver version from nvidia-smi, or None where no GPU is visible."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.split()
    return lines[0] if out.returncode == 0 and lines else None


def check_environment(cfg: DictConfig, section: Section, *, find_spec=importlib.util.find_spec,
                      driver=driver_version) -> None:
    section.line(f"torch {_version('torch')}, transformers {_version('transformers')}, verl {_version('verl')}")
    if cfg.trainer.device != "cuda":
        section.line(f"trainer.device={cfg.trainer.device}: no GPU packages needed")
        return
    attn = str(cfg.actor_rollout_ref.model.get("override_config", {}).get("attn_implementation", "flash_attention_2"))
    if attn == "flash_attention_2" and find_spec("flash_attn") is None:
        section.fail(f"flash_attn is not importable (verl's FSDP actor uses attn_implementation=flash_attention_2); "
                     f"fix: {FLASH_ATTN_INSTALL} (or {GPU_INSTALL})")
    if cfg.actor_rollout_ref.rollout.name == "vllm" and find_spec("vllm") is None:
        section.fail(f"vllm is not importable (rollout.name=vllm); fix: {GPU_INSTALL}")
    version = driver()
    if version is None:
        section.note("no GPU visible here (nvidia-smi): driver not checked; a node needs driver >= "
                     f"{MIN_DRIVER} for torch's CUDA 13 build")
    else:
        section.line(f"NVIDIA driver {version}")
        if int(version.split(".")[0]) < MIN_DRIVER:
            section.fail(f"NVIDIA driver {version} < {MIN_DRIVER}, which the CUDA 13 build of torch 2.11 needs; fix: "
                         "update the node's driver, or install a torch build for the node's CUDA")
