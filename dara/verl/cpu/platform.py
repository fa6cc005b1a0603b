"""verl's external platform "cpu" (docs/cpu.md): device `cpu`, backend `gloo`, Ray resource `GPU` (one logical
GPU per rank), no IPC; registered after verl's own platforms, so it answers only where none did."""

from __future__ import annotations

import types
from contextlib import contextmanager

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

PLATFORM_NAME = "cpu"


def _host_memory() -> tuple[int, int]:  # (available, total) bytes; vLLM's CPU build is Linux-only
    with open("/proc/meminfo") as f:
        fields = {key: int(value.split()[0]) * 1024 for key, value in (line.split(":", 1) for line in f)}
    return fields["MemAvailable"], fields["MemTotal"]


def _build_device_module() -> types.ModuleType:
    """`torch.cpu` plus the CUDA-style calls verl makes; memory counters are 0 (no separate device memory)."""
    module = types.ModuleType("dara.verl.cpu.device", "torch.cpu plus the CUDA-style calls verl makes")
    for name in ("Event", "Stream", "StreamContext", "current_stream", "stream", "synchronize", "amp"):
        setattr(module, name, getattr(torch.cpu, name))
    for name in ("set_device", "empty_cache", "ipc_collect", "reset_peak_memory_stats",
                 "set_per_process_memory_fraction"):
        setattr(module, name, lambda *args, **kwargs: None)
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
        setattr(module, name, lambda *args, **kwargs: 0)
    vars(module).update(
        is_available=lambda: True, device_count=lambda: 1, current_device=lambda: PLATFORM_NAME,
        get_device_name=lambda *args, **kwargs: "CPU", mem_get_info=lambda *args, **kwargs: _host_memory(),
        manual_seed=torch.manual_seed, manual_seed_all=torch.manual_seed,
        get_rng_state=lambda *args, **kwargs: torch.get_rng_state(),
        set_rng_state=lambda state, *args, **kwargs: torch.set_rng_state(state))
    return module


CPU_DEVICE_MODULE = _build_device_module()


def _returns(value):
    return lambda self, *args, **kwargs: value


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformCPU(PlatformBase):
    device_name = vendor_name = property(_returns(PLATFORM_NAME))
    device_module = property(_returns(CPU_DEVICE_MODULE))
    # registered after verl's own (cuda, npu, rocm): answers only where none did, instead of verl's "nvidia"
    is_available = is_platform_available = _returns(True)
    is_ipc_supported = _returns(False)
    current_device = _returns(PLATFORM_NAME)
    device_count = _returns(1)
    set_device = synchronize = set_allocator_settings = empty_cache = _returns(None)
    profiler_start = profiler_stop = cudart = _returns(None)
    get_device_capability = _returns((None, None))
    communication_backend_name = _returns("gloo")
    visible_devices_envvar = _returns("CUDA_VISIBLE_DEVICES")  # Ray sets it for a (logical) GPU: selects nothing
    ray_resource_name = _returns("GPU")  # trainer ranks on logical Ray GPUs (conf/cluster/cpu.yaml)

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    def ray_noset_envvars(self) -> list[str]:
        return []

    @contextmanager
    def nvtx_range(self, msg: str):
        yield
