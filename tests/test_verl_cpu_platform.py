"""verl's external platform "cpu" (dara.verl.cpu), the seams of verl it relies on (checked through verl's own
helpers in a fresh interpreter configured as conf/cluster/cpu.yaml configures Ray workers), the local Ray."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
import torch
from verl.plugin.platform import PlatformRegistry

from dara.verl.cpu.platform import CPU_DEVICE_MODULE, PlatformCPU
from dara.verl.cpu.ray_local import local_ray_session, ray_folders


def test_registered_under_cpu_after_verls_own_platforms_and_answers_verls_cuda_style_calls():
    """The calls verl's own helpers make (their answers through verl: the probe below)."""
    assert PlatformRegistry.get("cpu") is PlatformCPU
    assert PlatformRegistry.registered_names()[-1] == "cpu"  # probed last: only where no accelerator answers
    platform, module = PlatformCPU(), CPU_DEVICE_MODULE
    assert platform.is_available() and platform.is_platform_available(use_smi_check=True)
    assert platform.ray_resource_name() == "GPU" and platform.ray_resource_options(1) == {"num_gpus": 1}
    assert not platform.is_ipc_supported() and platform.device_module is module and module.device_count() == 1
    with platform.nvtx_range("no-op"):
        module.empty_cache(), module.synchronize()
    free, total = module.mem_get_info()
    assert 0 < free <= total and module.max_memory_allocated() == 0
    state, first = module.get_rng_state(), torch.rand(3)
    module.set_rng_state(state)
    assert torch.equal(first, torch.rand(3))


PROBE = """
import json, torch
import verl
from verl.utils.device import auto_set_device, get_device_name, get_nccl_backend, get_torch_device
from verl.utils.distributed import initialize_global_process_group_ray
from verl.workers.engine import EngineRegistry
from omegaconf import OmegaConf

cfg = OmegaConf.create({"trainer": {"device": "cpu"}})
auto_set_device(cfg)
report = {"device": [get_device_name(), get_nccl_backend(), get_torch_device().memory_reserved(),
                     get_torch_device().get_device_name(), cfg.trainer.device,
                     EngineRegistry.get_engine_cls("language_model", "fsdp2").__name__]}
try:  # verl's own process-group call names the device twice on a CPU
    initialize_global_process_group_ray()
    report["verl_join"] = "ok"
except ValueError as error:
    report["verl_join"] = str(error).split("\\n")[0]
from dara.verl.cpu.workers import join_gloo_process_group
report["joined"] = join_gloo_process_group()
initialize_global_process_group_ray()  # a no-op once a group exists
value = torch.ones(2)
torch.distributed.all_reduce(value)
report["group"] = [torch.distributed.get_backend(), value.tolist()]
torch.distributed.destroy_process_group()
print("PROBE" + json.dumps(report))
"""


@pytest.mark.slow  # a Ray worker importing verl (~11 s)
@pytest.mark.starts
def test_verl_uses_the_cpu_platform_when_configured_like_a_ray_worker(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "VERL_PLATFORM"}
    env.update({"VERL_ENGINE_DEVICE": "cuda",  # no VERL_PLATFORM: no accelerator here, the plugin's "cpu" is found
                "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29517"})
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.startswith("PROBE")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    report = json.loads(lines[-1][len("PROBE"):])
    assert report["device"] == ["cpu", "gloo", 0, "CPU", "cpu", "FSDPEngineWithLMHead"]
    # the seam dara.verl.cpu.workers exists for: if verl stops naming the device twice, it can go
    assert "Duplicate device type cpu" in report["verl_join"]
    assert report["joined"] is True and report["group"] == ["gloo", [1.0, 1.0]]


def test_local_ray_session_keeps_ray_files_in_the_output_folder():
    """A short output path is given to Ray as it is (a long one gets an alias: tests/test_failed_starts.py)."""
    root = tempfile.mkdtemp(prefix="r", dir="/tmp")  # short enough for Ray's socket paths
    folders = ray_folders(root)
    assert folders["tmp_for_ray"] == folders["tmp"] and folders["home"].is_dir()
    before = {key: os.environ.get(key) for key in ("RAY_TMPDIR", "HOME", "RAY_AUTH_MODE")}
    with local_ray_session(root, shutdown=False) as ray_init:
        assert ray_init == {"_temp_dir": str(folders["tmp"])} and os.environ["RAY_AUTH_MODE"] == "disabled"
        assert os.environ["RAY_TMPDIR"] == str(folders["tmp"]) and os.environ["HOME"] == str(folders["home"])
    with local_ray_session(root, shutdown=False, move_home=False):  # a GPU run keeps the user's caches
        assert os.environ.get("HOME") == before["HOME"]
    assert {key: os.environ.get(key) for key in before} == before
    shutil.rmtree(root)
