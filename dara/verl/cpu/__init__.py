"""verl 0.9.1's own trainer on a CPU-only machine (extends verl, edits none of it): the platform "cpu"
(`platform`), verl's vLLM server on vLLM's CPU build with its weight sync (`vllm_weights`), gloo trainer ranks
(`workers`) and a local Ray inside the run folder (`ray_local`)."""

from __future__ import annotations

from dara.verl.cpu.platform import PLATFORM_NAME, PlatformCPU
from dara.verl.cpu.ray_local import local_ray_session

__all__ = ["PLATFORM_NAME", "PlatformCPU", "local_ray_session", "use_cpu_platform"]


def use_cpu_platform() -> PlatformCPU:
    """Make verl's platform of this process the CPU platform (a driver, before verl's `auto_set_device`)."""
    from verl.plugin.platform import get_platform, set_platform

    if not isinstance(get_platform(), PlatformCPU):
        set_platform(PlatformCPU())
    return get_platform()
