"""Can this node's Python environment run the run? Each problem names the command that fixes it: torch's build
against the driver, vLLM's build (its version label: `+cu129`, `+cpu`; no label: CUDA 13.0) against torch's,
flash_attn for `run.attention=flash_attention_2`. It runs in the preflight and first in every Slurm job.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import subprocess
import sys
from dataclasses import dataclass

from omegaconf import DictConfig

from dara.preflight.memory import attention_of
from dara.preflight.report import Section
from dara.preflight.rollout import check_vllm_install, installed_version

GPU_INSTALL = "make install GPU=1"
FLASH_ATTN_BUILD = "make flash-attn"
MIN_DRIVER = {13: 580, 12: 525}  # the oldest driver of each CUDA major (12.x through minor-version compatibility)


@dataclass(frozen=True)
class Environment:
    torch: str | None  # torch.__version__, None when torch is missing
    torch_cuda: str | None  # torch.version.cuda: None for a CPU build
    vllm: str | None
    flash_attn: str | None  # None when it imports; else why not
    driver: str | None  # None where no GPU is visible
    transformers: str | None = None
    verl: str | None = None


def driver_version() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.split()[0] if out.returncode == 0 and out.stdout.split() else None


def _flash_attn_problem() -> str | None:
    if importlib.util.find_spec("flash_attn") is None:
        return "not installed"
    try:
        import flash_attn  # noqa: F401
    except Exception as error:  # noqa: BLE001 -- an ABI mismatch raises ImportError or OSError: name it
        return f"does not import ({type(error).__name__}: {str(error).splitlines()[0][:160]})"
    return None


@functools.cache
def probe_environment() -> Environment:
    try:
        import torch

        torch_version, torch_cuda = torch.__version__, torch.version.cuda
    except ImportError:
        torch_version = torch_cuda = None
    return Environment(torch_version, torch_cuda, installed_version("vllm"), _flash_attn_problem(),
                       driver_version(), installed_version("transformers"), installed_version("verl"))


def is_cpu_vllm(version: str | None) -> bool:
    return version is not None and version.partition("+")[2].split(".")[0] == "cpu"


def vllm_cuda(version: str) -> str | None:
    """The CUDA version of a vLLM build: its label (+cu129 -> 12.9), None for the CPU build, else 13.0."""
    label = version.partition("+")[2]
    if is_cpu_vllm(version):
        return None
    return f"{label[2:-1]}.{label[-1]}" if label.startswith("cu") and label[2:].isdigit() else "13.0"


def describe(env: Environment) -> str:
    build = "missing" if env.torch is None else (f"CUDA {env.torch_cuda} build" if env.torch_cuda else "CPU build")
    vllm = "missing" if env.vllm is None else env.vllm + (" (CPU build)" if is_cpu_vllm(env.vllm) else "")
    return (f"torch {env.torch} ({build}), vllm {vllm}, flash_attn {env.flash_attn or 'ok'}, transformers "
            f"{env.transformers}, verl {env.verl}; "
            + (f"NVIDIA driver {env.driver}" if env.driver else "no GPU visible (nvidia-smi)"))


def problems(env: Environment, *, rollout: str = "vllm", attention: str = "flash_attention_2") -> list[str]:
    """What stops a GPU run in this environment, each with its fix."""
    if env.torch is None:
        return [f"torch is not installed; fix: {GPU_INSTALL}"]
    found = []
    if env.torch_cuda is None:
        found.append(f"torch {env.torch} is a CPU build and this is a GPU run (trainer.device=cuda); fix: "
                     f"{GPU_INSTALL} on a GPU node (it picks the CUDA line from the driver; CUDA=12.9|13.0 to choose)")
    elif env.driver is not None:
        major = int(env.torch_cuda.split(".")[0])
        if int(env.driver.split(".")[0]) < MIN_DRIVER.get(major, 0):
            found.append(f"torch {env.torch} is a CUDA {env.torch_cuda} build, newer than NVIDIA driver {env.driver} "
                         f"runs (CUDA {major} needs >= {MIN_DRIVER[major]}); fix: {GPU_INSTALL} CUDA=12.9 (or a "
                         f"driver >= {MIN_DRIVER[major]})")
    if rollout == "vllm" and env.vllm is None:
        found.append(f"vllm is not installed (rollout.name=vllm); fix: {GPU_INSTALL}")
    elif rollout == "vllm" and is_cpu_vllm(env.vllm):
        found.append(f"vllm {env.vllm} is vLLM's CPU build and this is a GPU run (trainer.device=cuda); fix: "
                     f"{GPU_INSTALL} on a GPU node")
    elif rollout == "vllm" and env.torch_cuda and vllm_cuda(env.vllm).split(".")[0] != env.torch_cuda.split(".")[0]:
        found.append(f"vllm {env.vllm} (CUDA {vllm_cuda(env.vllm)}) and torch {env.torch} (CUDA {env.torch_cuda}) are "
                     f"different CUDA builds; fix: {GPU_INSTALL} CUDA={'13.0' if int(env.torch_cuda.split('.')[0]) >= 13 else '12.9'}")
    if attention == "flash_attention_2" and env.flash_attn is not None:
        found.append(f"flash_attn {env.flash_attn} and run.attention=flash_attention_2; fix: {FLASH_ATTN_BUILD} "
                     "(builds it against this torch); run.attention=sdpa runs without it only at the smaller token "
                     "budget per GPU that the preflight's memory section names")
    return found


def check_environment(cfg: DictConfig, section: Section, *, probe=probe_environment, vllm_install=None) -> None:
    env = probe()
    section.line(describe(env))
    if cfg.trainer.device != "cuda":
        if cfg.trainer.device == "cpu" and str(cfg.actor_rollout_ref.rollout.name) == "vllm":
            (vllm_install or check_vllm_install)(section)
        return
    section.problems += problems(env, rollout=str(cfg.actor_rollout_ref.rollout.name), attention=attention_of(cfg)[0])
    if env.driver is None:
        section.note("no GPU visible here: the driver is checked on the compute node, in the job's first step")


def main(argv: list[str] | None = None) -> int:
    top = argparse.ArgumentParser(prog="python -m dara.preflight.environment",
                                  description="Can this node's environment run a GPU run? (imports torch)")
    top.add_argument("--attention", choices=("flash_attention_2", "sdpa"), default="flash_attention_2")
    args = top.parse_args(argv)
    env = probe_environment()
    found = problems(env, attention=args.attention)
    print("\n".join([f"[environment] {describe(env)}", *(f"[environment] PROBLEM: {p}" for p in found),
                     f"[environment] {f'{len(found)} problem(s)' if found else 'ready for GPU runs'} "
                     f"(run.attention={args.attention})"]))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
