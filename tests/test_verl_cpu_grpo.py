"""verl 0.9.1's own trainer config with the project's CPU cluster file (the project's CPU path, dara.verl.cpu).

The config is verl's ``ppo_trainer`` composed with Hydra's compose API plus the project's
``conf/cluster/cpu.yaml``: the keys the CPU path needs reach verl, and verl's own worker selection swaps in the
CPU workers only when ``trainer.device=cpu``. Real training on this path: tests/test_training.py.
"""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
STEPS = 2
FORMAT_REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """0.5 for opening with <think>, 0.5 for closing it: varies within a group for the warm-started model."""
    text = solution_str.strip()
    return 0.5 * text.startswith("<think>") + 0.5 * ("</think>" in text)
'''


def compose_cpu_grpo_config(assets: dict, run_dir: Path):
    """verl's ppo_trainer + conf/cluster/cpu.yaml + a 2-step stock-GRPO run of the tiny model."""
    import verl.trainer.config
    from hydra import compose, initialize_config_dir

    reward_file = run_dir / "format_reward.py"
    reward_file.write_text(FORMAT_REWARD)
    overrides = [
        f"hydra.searchpath=[file://{PROJECT_ROOT / 'conf'}]",
        "+cluster=cpu",
        "trainer.v1.trainer_mode=dara_sync",
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=false",
        f"data.train_files={assets['train']}",
        f"data.val_files={assets['test']}",
        "data.train_batch_size=4",
        "data.max_prompt_length=192",
        "data.max_response_length=32",
        "data.seed=0",
        f"actor_rollout_ref.model.path={assets['model_dir']}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.actor.use_kl_loss=false",
        # large enough that a missed weight sync would show up as a rollout/trainer log-prob gap at step 2
        "actor_rollout_ref.actor.optim.lr=5e-3",
        "actor_rollout_ref.actor.checkpoint.save_contents=[model,hf_model]",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
        f"reward.custom_reward_function.path={reward_file}",
        "reward.custom_reward_function.name=compute_score",
        f"trainer.total_training_steps={STEPS}",
        "trainer.total_epochs=1",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        f"trainer.save_freq={STEPS}",
        "trainer.logger=[console,file]",
        "trainer.project_name=cpu_test",
        "trainer.experiment_name=grpo",
        f"trainer.default_local_dir={run_dir / 'checkpoints'}",
        f"+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH={run_dir / 'metrics.jsonl'}",
    ]
    with initialize_config_dir(config_dir=os.path.dirname(verl.trainer.config.__file__), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


# composing reads the asset paths only: the config tests need no smoke build
UNBUILT_ASSETS = {"train": "/unbuilt/train.parquet", "test": "/unbuilt/test.parquet", "model_dir": "/unbuilt/model"}


def test_cluster_config_reaches_verl_keys(tmp_path):
    """conf/cluster/cpu.yaml composes onto verl's own config and sets what the CPU path needs."""
    cfg = compose_cpu_grpo_config(UNBUILT_ASSETS, tmp_path)
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
