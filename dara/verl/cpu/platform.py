"""verl's external platform "cpu": lets verl's trainer run on a machine without an accelerator.

verl resolves its platform once per process (``verl.plugin.platform.get_platform``): the ``VERL_PLATFORM``
variable names it, otherwise the first registered platform whose probe succeeds wins. The project's verl plugin
registers this class as "cpu" in every process, after verl's own platforms, so ``VERL_PLATFORM=cpu``
(conf/cluster/cpu.yaml gives it to every Ray worker) or a machine without an accelerator makes every process
agree on: device ``cpu``, collective backend ``gloo``, Ray resource ``GPU`` (one logical GPU per trainer rank,
see conf/cluster/cpu.yaml), no IPC.

``device_module`` is what verl calls ``get_torch_device()``: verl calls CUDA-style functions on it
(``memory_reserved``, ``mem_get_info``, ``get_device_name``, ``set_device``, ...), most of which
``torch.cpu`` lacks, so it is a small namespace that answers them for host memory.
"""

from __future__ import annotations

import os
import types
from contextlib import contextmanager
from typing import Any

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

PLATFORM_NAME = "cpu"


def _host_memory() -> tuple[int, int]:
    """(available, total) bytes of host memory, from /proc/meminfo (Linux) or sysconf."""
    try:
        fields = {}
        with open("/proc/meminfo") as f:
            for line in f:
                key, value = line.split(":", 1)
                fields[key] = int(value.split()[0]) * 1024
        return fields.get("MemAvailable", fields["MemFree"]), fields["MemTotal"]
    except (OSError, KeyError, ValueError):
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return total, total


def _build_device_module() -> types.ModuleType:
    """A ``torch.cpu`` look-alike that also answers the CUDA-style calls verl makes on its device module.

    Memory counters are 0: there is no separate device memory to account for on the host (verl only logs them).
    """
    module = types.ModuleType("dara.verl.cpu.device", "torch.cpu plus the CUDA-style calls verl makes")
    for name in ("Event", "Stream", "StreamContext", "current_stream", "stream", "synchronize", "amp"):
        setattr(module, name, getattr(torch.cpu, name))
    zero = lambda *args, **kwargs: 0  # noqa: E731
    nothing = lambda *args, **kwargs: None  # noqa: E731
    module.is_available = lambda: True
    module.device_count = lambda: 1
    module.current_device = lambda: PLATFORM_NAME
    module.set_device = nothing
    module.get_device_name = lambda *args, **kwargs: "CPU"
    module.empty_cache = nothing
    module.ipc_collect = nothing
    module.reset_peak_memory_stats = nothing
    module.set_per_process_memory_fraction = nothing
    module.memory_allocated = zero
    module.memory_reserved = zero
    module.max_memory_allocated = zero
    module.max_memory_reserved = zero
    module.mem_get_info = lambda *args, **kwargs: _host_memory()
    module.manual_seed = torch.manual_seed
    module.manual_seed_all = torch.manual_seed
    module.get_rng_state = lambda *args, **kwargs: torch.get_rng_state()
    module.set_rng_state = lambda state, *args, **kwargs: torch.set_rng_state(state)
    return module


CPU_DEVICE_MODULE = _build_device_module()


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformCPU(PlatformBase):
    """Host CPU as verl's device: torch device ``cpu``, collectives over ``gloo``."""

    @property
    def device_name(self) -> str:
        return PLATFORM_NAME

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return CPU_DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # verl probes the registered platforms in order and this one registers after verl's own (cuda, npu,
        # rocm): it answers only where none of them did, instead of verl's fallback "nvidia" (which fails there)
        return True

    def current_device(self) -> str:
        # verl passes this to Tensor.to() and torch.device(): the device string, not an index.
        return PLATFORM_NAME

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: Any) -> None:
        return None

    def synchronize(self, device_index: Any = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[None, None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # Ray sets this for actors holding a (logical) GPU; on the CPU path it selects nothing.
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        # Trainer ranks are placed on logical Ray GPUs (ray_init.num_gpus in conf/cluster/cpu.yaml).
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> None:
        return None
