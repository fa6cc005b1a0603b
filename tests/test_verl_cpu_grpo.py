"""verl 0.9.1's own `ppo_trainer` config composed with the project's conf/cluster/cpu.yaml: the keys the CPU path
needs reach verl (training on this path: tests/test_training.py)."""

from __future__ import annotations

import os
from pathlib import Path

CONF = Path(__file__).resolve().parent.parent / "conf"


def test_cluster_config_reaches_verl_keys():
    import verl.trainer.config
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=os.path.dirname(verl.trainer.config.__file__), version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=[f"hydra.searchpath=[file://{CONF}]", "+cluster=cpu"])
    env = cfg.ray_kwargs.ray_init.runtime_env.env_vars
    assert env.VERL_PLATFORM == "cpu" and "VERL_USE_EXTERNAL_MODULES" not in env  # the plugin registers it
    assert cfg.trainer.device == "cpu" and cfg.trainer.n_gpus_per_node == 1 and cfg.trainer.nnodes == 1
    assert cfg.ray_kwargs.ray_init.num_gpus == 1
    rollout = cfg.actor_rollout_ref.rollout
    assert rollout.name == "vllm" and rollout.tensor_model_parallel_size == 1 and rollout.enforce_eager
    assert not rollout.enable_sleep_mode and not rollout.free_cache_engine  # both need CUDA
    assert rollout.engine_kwargs.vllm.worker_extension_cls == "dara.verl.cpu.vllm_weights.CPUWeightSyncExtension"
    assert rollout.engine_kwargs.vllm.kv_cache_memory_bytes == 128 * 2**20  # not VLLM_CPU_KVCACHE_SPACE's 1 GiB
    assert env.VLLM_TARGET_DEVICE == "cpu" and env.VLLM_CPU_OMP_THREADS_BIND == "nobind"
    assert all(isinstance(value, str) for value in env.values())  # Ray takes strings only
    assert cfg.actor_rollout_ref.actor.strategy == "fsdp2" and cfg.actor_rollout_ref.ref.strategy == "fsdp2"
    assert cfg.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    assert cfg.transfer_queue.backend.SimpleStorage.num_data_storage_units == 1
