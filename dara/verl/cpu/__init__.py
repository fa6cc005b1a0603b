"""Run verl 0.9.1's own trainer on a CPU-only machine (extends verl; edits none of it).

- the verl platform ``"cpu"`` (:class:`~dara.verl.cpu.platform.PlatformCPU`: device cpu, gloo, no IPC), registered
  by the project's verl plugin (dara.verl.plugin) in every process that imports verl; verl resolves it with
  ``VERL_PLATFORM=cpu`` (conf/cluster/cpu.yaml gives every Ray worker that variable) or, on a machine where no
  accelerator answers verl's probes, as the last one it tries;
- the rollout is verl's own vLLM server on vLLM's CPU build, with the weight sync of
  :mod:`dara.verl.cpu.vllm_weights`;
- the trainer ranks join a gloo process group (:mod:`dara.verl.cpu.workers`, chosen by the project's trainer);
- :func:`local_ray_session`: Ray's temp files and HOME inside an output folder, Ray stopped on exit.
"""

from __future__ import annotations

from dara.verl.cpu.platform import PLATFORM_NAME, PlatformCPU
from dara.verl.cpu.ray_local import local_ray_session

__all__ = ["PLATFORM_NAME", "PlatformCPU", "local_ray_session", "use_cpu_platform"]


def use_cpu_platform() -> PlatformCPU:
    """Make verl's platform of this process the CPU platform (a driver, before verl's `auto_set_device`)."""
    from verl.plugin.platform import get_platform, set_platform

    current = get_platform()
    if isinstance(current, PlatformCPU):
        return current
    platform = PlatformCPU()
    set_platform(platform)
    return platform
