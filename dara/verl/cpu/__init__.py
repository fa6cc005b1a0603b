"""Run verl 0.9.1's own trainer on a CPU-only machine (extends verl; edits none of it).

Importing this package registers, in the importing process:
- the verl platform ``"cpu"`` (:class:`~dara.verl.cpu.platform.PlatformCPU`: device cpu, gloo, no IPC);
- the rollout backend ``"hf"``: a replica in verl's ``RolloutReplicaRegistry`` and a server adapter in verl's
  rollout registry (transformers ``generate`` in a Ray actor; token ids and log-probs out; trainer weights in).

conf/cluster/cpu.yaml names this package in ``VERL_USE_EXTERNAL_MODULES`` of every Ray worker's runtime_env, so
each process verl starts imports it with ``verl`` and resolves the same platform (``VERL_PLATFORM=cpu``).

Public surface:
- :func:`register` -- the registrations above (idempotent; done on import);
- :func:`use_cpu_platform` -- make the current process use the CPU platform (e.g. a driver before verl's
  ``auto_set_device``);
- :func:`local_ray_session` -- context manager: Ray's temp files and HOME inside an output folder, Ray stopped on
  exit; yields extra ``ray.init`` arguments;
- :class:`CPUWorkersMixin` -- put before verl's trainer class so its trainer ranks join a gloo process group when
  ``trainer.device=cpu`` (needed by any v1 trainer on CPU); ``CPU_SYNC_TRAINER`` (``"cpu_sync"``) is verl's stock
  sync trainer with it, and :data:`CPUTaskRunner` verl's ``TaskRunnerV1`` that registers it. These three import
  verl's trainer and are loaded on first access.
"""

from __future__ import annotations

from typing import Any

from dara.verl.cpu.platform import PLATFORM_NAME, PlatformCPU
from dara.verl.cpu.ray_local import local_ray_session

ROLLOUT_NAME = "hf"
_ADAPTER_PATH = "dara.verl.cpu.hf_rollout.HFServerAdapter"
_LAZY = {"CPUWorkersMixin", "CPU_SYNC_TRAINER", "CPUTaskRunner"}

__all__ = [
    "PLATFORM_NAME",
    "ROLLOUT_NAME",
    "CPUTaskRunner",
    "CPUWorkersMixin",
    "CPU_SYNC_TRAINER",
    "PlatformCPU",
    "local_ray_session",
    "register",
    "use_cpu_platform",
]


def _load_hf_replica():
    from dara.verl.cpu.hf_rollout import HFReplica

    return HFReplica


def register() -> None:
    """Register the "hf" rollout with verl (the platform registers itself when its module is imported)."""
    from verl.workers.rollout.base import _ROLLOUT_REGISTRY
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    RolloutReplicaRegistry.register(ROLLOUT_NAME, _load_hf_replica)
    _ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = _ADAPTER_PATH


def use_cpu_platform() -> PlatformCPU:
    """Make verl's platform singleton of this process the CPU platform (returns it)."""
    from verl.plugin.platform import get_platform, set_platform

    current = get_platform() if _platform_resolved() else None
    if isinstance(current, PlatformCPU):
        return current
    platform = PlatformCPU()
    set_platform(platform)
    return platform


def _platform_resolved() -> bool:
    from verl.plugin.platform import platform_manager

    return platform_manager._current_platform is not None


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from dara.verl.cpu import workers

        return getattr(workers, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


register()
