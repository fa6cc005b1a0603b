"""verl 0.9.1's own v1 trainer runs 2 GRPO steps on a CPU (the project's CPU path, dara.verl.cpu).

The config is verl's ``ppo_trainer`` composed with Hydra's compose API plus the project's
``conf/cluster/cpu.yaml``; training goes through verl's ``run_ppo`` with its TaskRunnerV1 (``CPUTaskRunner``)
and its stock synchronous trainer (``cpu_sync``). The tiny model and the ToolRL-format data come from
``data_prep.smoke``; the reward is a small format reward written next to the run.

Asserts that training happened: 2 steps logged through verl's file logger, a non-zero policy gradient, the
actor's saved weights differ from the initial ones, and the rollout's log-probs equal the trainer's (at step 2
too, which needs the step-1 weights to have reached the rollout server). Prints the run time and the peak
memory of the run's process tree.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
import torch

PROJECT_ROOT = Path(__file__).resolve().parent.parent
STEPS = 2
LOGPROB_TOLERANCE = 1e-3
FORMAT_REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """0.5 for opening with <think>, 0.5 for closing it: varies within a group for the warm-started model."""
    text = solution_str.strip()
    return 0.5 * text.startswith("<think>") + 0.5 * ("</think>" in text)
'''


class ProcessTreeMemory:
    """Samples the summed RSS and PSS of this process and all its descendants (Ray's processes) once a second."""

    def __init__(self, interval_s: float = 1.0):
        self.interval_s = interval_s
        self.peak_rss = self.peak_pss = 0
        self.peak_processes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _children() -> dict[int, list[int]]:
        tree: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(parent, []).append(int(entry))
        return tree

    @staticmethod
    def _memory_kb(pid: int) -> tuple[int, int]:
        rss = pss = 0
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Rss:"):
                        rss = int(line.split()[1])
                    elif line.startswith("Pss:"):
                        pss = int(line.split()[1])
        except OSError:
            pass
        return rss, pss

    def sample(self) -> None:
        tree, pending, pids = self._children(), [os.getpid()], []
        while pending:
            pid = pending.pop()
            pids.append(pid)
            pending.extend(tree.get(pid, []))
        totals = [self._memory_kb(pid) for pid in pids]
        self.peak_rss = max(self.peak_rss, sum(r for r, _ in totals) * 1024)
        self.peak_pss = max(self.peak_pss, sum(p for _, p in totals) * 1024)
        self.peak_processes = max(self.peak_processes, len(pids))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def compose_cpu_grpo_config(assets: dict, run_dir: Path):
    """verl's ppo_trainer + conf/cluster/cpu.yaml + a 2-step stock-GRPO run of the tiny model."""
    import verl.trainer.config
    from hydra import compose, initialize_config_dir

    reward_file = run_dir / "format_reward.py"
    reward_file.write_text(FORMAT_REWARD)
    overrides = [
        f"hydra.searchpath=[file://{PROJECT_ROOT / 'conf'}]",
        "+cluster=cpu",
        "trainer.v1.trainer_mode=cpu_sync",
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
    assert env.VERL_USE_EXTERNAL_MODULES == "dara.verl.cpu" and env.VERL_PLATFORM == "cpu"
    assert cfg.trainer.device == "cpu" and cfg.trainer.n_gpus_per_node == 1 and cfg.trainer.nnodes == 1
    assert cfg.ray_kwargs.ray_init.num_gpus == 1
    assert cfg.actor_rollout_ref.rollout.name == "hf" and cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == 1
    assert cfg.actor_rollout_ref.actor.strategy == "fsdp2" and cfg.actor_rollout_ref.ref.strategy == "fsdp2"
    assert cfg.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    assert cfg.transfer_queue.backend.SimpleStorage.num_data_storage_units == 1


def test_cpu_workers_mixin_swaps_verl_workers_only_on_cpu(tmp_path):
    """verl's own _init_resource_pool_mgr picks the workers; the mixin swaps in the gloo ones when device=cpu."""
    from omegaconf import open_dict
    from verl.workers.engine_workers import ActorRolloutRefWorker

    from dara.verl.cpu.workers import CPUActorRolloutRefWorker, CPUPPOTrainerSync

    cfg = compose_cpu_grpo_config(UNBUILT_ASSETS, tmp_path)
    for device, expected in (("cpu", CPUActorRolloutRefWorker), ("cuda", ActorRolloutRefWorker)):
        with open_dict(cfg):
            cfg.trainer.device = device
        trainer = object.__new__(CPUPPOTrainerSync)  # only the config is read by this step
        trainer.config = cfg
        trainer._init_resource_pool_mgr()
        classes = [worker.__ray_actor_class__ for worker in trainer.role_worker_mapping.values()]
        assert classes and all(cls is expected for cls in classes), (device, classes)


@pytest.mark.slow
def test_verl_grpo_two_steps_on_cpu(smoke_assets, tmp_path):
    import ray
    from omegaconf import open_dict
    from transformers import AutoModelForCausalLM
    from verl.trainer.main_ppo import run_ppo

    import dara.verl.cpu as cpu

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cfg = compose_cpu_grpo_config(smoke_assets, run_dir)
    start = time.perf_counter()
    with ProcessTreeMemory() as memory, cpu.local_ray_session(run_dir) as ray_init:
        with open_dict(cfg):
            cfg.ray_kwargs.ray_init.update(ray_init)
        run_ppo(cfg, task_runner_class=cpu.CPUTaskRunner)
        memory.sample()
    seconds = time.perf_counter() - start
    assert not ray.is_initialized(), "local_ray_session must stop Ray"
    print(
        f"\n[cpu grpo] {STEPS} verl GRPO steps on CPU: {seconds:.1f}s wall, peak process-tree RSS "
        f"{memory.peak_rss / 2**30:.2f} GiB (PSS {memory.peak_pss / 2**30:.2f} GiB, {memory.peak_processes} processes)"
    )

    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert any(r["data"]["actor/grad_norm"] > 0.0 for r in records)  # the policy was trained
    for record in records:
        data = record["data"]
        if data["critic/advantages/max"] == data["critic/advantages/min"] == 0.0:
            assert data["actor/grad_norm"] == 0.0  # every group's reward constant: no policy gradient
        else:
            assert data["actor/grad_norm"] > 0.0
        assert data["response_length/mean"] > 0.0
        assert data["training/rollout_probs_diff_valid"] == 1.0
        assert data["training/rollout_probs_diff_max"] < LOGPROB_TOLERANCE, data["training/rollout_probs_diff_max"]
        assert 0.0 <= data["critic/score/mean"] <= 1.0

    trained_dir = run_dir / "checkpoints" / f"global_step_{STEPS}" / "actor" / "huggingface"
    trained = AutoModelForCausalLM.from_pretrained(trained_dir, dtype=torch.float32).state_dict()
    initial = AutoModelForCausalLM.from_pretrained(smoke_assets["model_dir"], dtype=torch.float32).state_dict()
    assert trained.keys() == initial.keys()
    changed = [name for name in initial if not torch.equal(initial[name], trained[name])]
    assert len(changed) >= len(initial) // 2, f"only {len(changed)}/{len(initial)} tensors changed"

    ray_files = list((run_dir / "ray" / "tmp").rglob("*"))
    assert ray_files, "Ray's session files belong inside the run folder"
