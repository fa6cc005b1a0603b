"""Config composition (Hydra's compose API, nothing started): the paper's runs carry its hyperparameters
(docs/experiments.md, "The paper's settings"), the cluster tables, the run.* schema and names, every estimator's
batch normalisation, the tool-calling tasks' data and seeds."""

from __future__ import annotations

import functools

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from dara.config import CONF_DIR, RunConfig, compose, library_estimator, run_name
from dara.config_checks import check_config
from dara.estimators import ESTIMATOR_NAMES, ESTIMATORS, DaraAlgoConfig
from recipes import load
from recipes.runner import PROJECT_ROOT, seed_groups

ARR = "actor_rollout_ref"
# "Tool calling (ToolRL setup)": mini-batch 128 prompts x G=4 = 512 responses. The authors' updates were all
# clipped at 1.0 (grad_norm >= 1.17 on every logged step): a clip below every norm of ours with Adam's eps scaled
# alike gives the same Adam steps; no dual-clip in the authors' verl (ratio <= e^20 < 1e9).
TOOLRL = {
    "data.train_batch_size": 512, f"{ARR}.rollout.n": 4, f"{ARR}.actor.ppo_mini_batch_size": 128,
    f"{ARR}.actor.ppo_epochs": 1, f"{ARR}.actor.optim.lr": 1e-6, f"{ARR}.actor.optim.clip_grad": 0.05,
    f"{ARR}.actor.grad_clip": 0.05, f"{ARR}.actor.optim.override_optimizer_config": {"eps": 5e-10},
    "run.expect_clipped_updates": True, f"{ARR}.actor.clip_ratio_c": 1e9, f"{ARR}.actor.entropy_coeff": 0.001,
    f"{ARR}.actor.clip_ratio_low": 0.2, f"{ARR}.actor.clip_ratio_high": 0.2, f"{ARR}.actor.loss_agg_mode": "token-mean",
    f"{ARR}.actor.use_kl_loss": False, "algorithm.use_kl_in_reward": True, "algorithm.kl_ctrl.kl_coef": 0.001,
    "algorithm.kl_ctrl.type": "fixed", "algorithm.filter_groups.enable": False, "data.max_prompt_length": 2048,
    "data.max_response_length": 1024, f"{ARR}.rollout.temperature": 1.0, f"{ARR}.rollout.top_p": 1.0,
    "trainer.total_training_steps": 100, "trainer.test_freq": 10, "trainer.val_before_train": True,
    "algorithm.dara.batch_norm": "token", "algorithm.reward_channels": ["format", "correctness"],
    "trainer.n_gpus_per_node": 4, "trainer.nnodes": 1,  # 4 x A100-40GB per run
}
TOOLRL_THREE = {**TOOLRL, "algorithm.reward_channels": ["format", "correctness", "length"],
                "reward.custom_reward_function.reward_kwargs.toolrl_length_channel": True}
# "Math reasoning with a length constraint (DeepScaleR setup)": the authors' rounds of 768 prompts (dara.verl.rounds)
MATH = {
    "data.train_batch_size": 512, f"{ARR}.rollout.n": 16, "run.dynamic_sampling.mode": "rounds",
    "run.dynamic_sampling.round_prompts": 768, "data.gen_batch_size": 768, "algorithm.filter_groups.enable": False,
    "algorithm.filter_groups.metric": "reward", "trainer.val_before_train": True,
    f"{ARR}.actor.ppo_mini_batch_size": 64, f"{ARR}.actor.ppo_epochs": 1, f"{ARR}.actor.optim.lr": 1e-6,
    f"{ARR}.actor.clip_ratio_low": 0.2, f"{ARR}.actor.clip_ratio_high": 0.28, f"{ARR}.actor.loss_agg_mode": "token-mean",
    f"{ARR}.actor.entropy_coeff": 0.0, f"{ARR}.actor.grad_clip": 1.0, f"{ARR}.actor.optim.clip_grad": 1.0,
    "run.expect_clipped_updates": False, f"{ARR}.actor.use_kl_loss": True, f"{ARR}.actor.kl_loss_type": "mse",
    f"{ARR}.actor.kl_loss_coef": 5e-4, "algorithm.use_kl_in_reward": False, "data.max_prompt_length": 1024,
    "data.max_response_length": 8000, f"{ARR}.rollout.temperature": 1.0, "trainer.total_training_steps": 200,
    "algorithm.dara.batch_norm": "response", "algorithm.reward_channels": ["correctness", "length"],
    "reward.custom_reward_function.reward_kwargs.max_response_tokens": 4000,
    "reward.custom_reward_function.reward_kwargs.math_grader": "hendrycks",  # verl's Hendrycks MATH grader
    "trainer.save_freq": 10, "trainer.test_freq": 10,  # the authors checkpoint and validate every 10 steps
    "data.val_files": "data/deepscaler/val.parquet",  # the 200-row held-out DeepScaleR split
    "trainer.n_gpus_per_node": 8, "trainer.nnodes": 1,
}
TASK_TABLES = {"toolrl": TOOLRL, "toolrl_three_rewards": TOOLRL_THREE, "deepscaler": MATH}
GPU_RUN = {f"{ARR}.rollout.name": "vllm", f"{ARR}.rollout.mode": "async", f"{ARR}.actor.strategy": "fsdp",
           f"{ARR}.ref.strategy": "fsdp", "trainer.device": "cuda", "trainer.resume_mode": "auto",
           "trainer.v1.trainer_mode": "dara_sync"}
PAPER_RUNS = {  # recipe -> (models, methods, seeds, runs)
    "toolrl_main": ({"qwen2.5-1.5b-instruct", "qwen2.5-3b-instruct"},
                    {"grpo", "gdpo", "dvao", "gd2po_hard_after", "dara_sym", "dara_asym"}, {0, 1, 2, 4, 5}, 60),
    "group_size": ({"qwen2.5-1.5b-instruct"}, {"grpo", "gdpo", "dara_asym", "dara_sym"}, {0, 1, 2}, 48),
    "three_rewards": ({"qwen2.5-1.5b-instruct"}, {"grpo", "gdpo", "dara_asym", "dara_sym"}, {0, 1, 2}, 12),
    "math_main": ({"deepseek-r1-distill-qwen-1.5b", "deepseek-r1-distill-qwen-7b", "qwen3-4b-instruct-2507"},
                  {"grpo", "gdpo", "dvao", "gd2po_hard_after", "dara_asym", "dara_sym"}, {0}, 18),
    "instruct_vs_thinking": ({"qwen3-4b-thinking-2507"}, {"dara_asym"}, {0}, 1),
    "fixed_weight": ({"deepseek-r1-distill-qwen-1.5b"}, {"static_sym", "static_asym"}, {0}, 2),
}


@functools.cache
def composed(overrides: tuple[str, ...]):
    return compose(overrides)


def value(cfg, key):
    found = OmegaConf.select(cfg, key, throw_on_missing=True)
    return OmegaConf.to_container(found) if OmegaConf.is_config(found) else found


@pytest.mark.slow  # composes every run of every paper recipe (~2 s each)
@pytest.mark.parametrize("recipe", list(PAPER_RUNS))
def test_recipes_hold_the_papers_runs_and_hyperparameters(recipe):
    models, methods, seeds, count = PAPER_RUNS[recipe]
    runs = load(recipe).runs(load(recipe).DEFAULT_SEEDS)
    assert len(runs) == count == len({r.name for r in runs}) and {r.seed for r in runs} == seeds
    assert {r.model for r in runs} == models and {r.method for r in runs} == methods
    mismatches = []
    for group in seed_groups(runs):  # the other seeds differ only in the seed
        first = group[0]
        assert [r.overrides()[:-1] for r in group] == [first.overrides()[:-1]] * len(group)
        assert all(r.name == first.name_for(r.seed) for r in group)
        cfg = composed(tuple(first.overrides()))
        check_config(cfg)  # as dara.train does: fills algorithm.reward_channels from the reward's declaration
        # the name, folder and seed the recipe knows without composing are Hydra's
        assert (cfg.run.name, cfg.run.method, cfg.run.seed, cfg.data.seed) == (first.name, first.method,
                                                                                first.seed, first.seed)
        assert PROJECT_ROOT / cfg.run.output_dir == first.output_dir
        assert cfg.actor_rollout_ref.rollout.seed == (0 if cfg.run.task.startswith("toolrl") else first.seed)
        assert cfg.trainer.default_local_dir == f"{cfg.run.output_dir}/checkpoints"
        expected = {**TASK_TABLES[cfg.run.task], **GPU_RUN}
        if recipe == "group_size":  # G x prompts = 2,048 responses; mini-batch 512 responses
            n = cfg.actor_rollout_ref.rollout.n
            assert n in (4, 8, 16, 32) and cfg.data.train_batch_size * n == 2048
            assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size * n == 512
            expected = {k: v for k, v in expected.items() if k not in (
                "data.train_batch_size", f"{ARR}.rollout.n", f"{ARR}.actor.ppo_mini_batch_size")}
        if recipe == "fixed_weight":
            expected |= {"algorithm.dara.weights": [1.0, 5.0], "algorithm.adv_estimator": "static"}
        if ESTIMATORS[library_estimator(str(cfg.algorithm.adv_estimator))].batch_norms == ("none",):  # GRPO, DVAO
            expected["algorithm.dara.batch_norm"] = None
        if recipe == "instruct_vs_thinking":  # compared at step 100
            expected["trainer.total_training_steps"] = 100
        if cfg.run.method == "gd2po_hard_after":  # the authors' math GD2PO: c_i after the response-level norm
            expected["algorithm.dara.query_weight"] = "after_whiten"
        mismatches += [f"{cfg.run.name}: {key} = {value(cfg, key)!r}, EXPERIMENTS.md: {wanted!r}"
                       for key, wanted in expected.items() if value(cfg, key) != wanted]
        assert cfg.trainer.save_freq > 0 and cfg.trainer.total_training_steps % cfg.trainer.save_freq == 0
    assert not mismatches, "\n".join(mismatches)


@pytest.mark.parametrize("cluster, model, tp, memory", [  # conf/cluster/*.yaml: per model scale and GPU type
    ("a100_40g_x4", "qwen2.5-1.5b-instruct", 1, 0.5), ("a100_40g_x4", "qwen2.5-3b-instruct", 1, 0.4),
    ("h100_x8", "deepseek-r1-distill-qwen-1.5b", 1, 0.6), ("h100_x8", "deepseek-r1-distill-qwen-7b", 1, 0.55),
    ("a100_80g_x8", "deepseek-r1-distill-qwen-7b", 2, 0.5),
])
def test_cluster_tables_set_rollout_and_fsdp_per_model_and_gpu(cluster, model, tp, memory):
    cfg = composed((f"task={'toolrl' if model.startswith('qwen2.5') else 'deepscaler'}", f"model={model}",
                    f"cluster={cluster}"))
    rollout, actor = cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.actor
    assert (rollout.tensor_model_parallel_size, rollout.gpu_memory_utilization) == (tp, memory)
    longest = cfg.data.max_prompt_length + cfg.data.max_response_length
    assert actor.use_dynamic_bsz and actor.ppo_max_token_len_per_gpu >= longest
    assert cfg.actor_rollout_ref.ref.log_prob_max_token_len_per_gpu >= longest
    assert actor.fsdp_config.param_offload == cfg.run.hardware[cfg.run.model_scale].param_offload


# the authors' README: at most 2 rounds a step for 1.5B, 4 for the 4B models (and 7B); "replay" is verl's own filter
@pytest.mark.parametrize("model, mode, cap", [
    ("deepseek-r1-distill-qwen-1.5b", "rounds", 2), ("deepseek-r1-distill-qwen-7b", "rounds", 4),
    ("qwen3-4b-instruct-2507", "rounds", 4), ("qwen3-4b-thinking-2507", "rounds", 4),
    ("deepseek-r1-distill-qwen-1.5b", "replay", 2)])
def test_math_dynamic_sampling_per_model_and_mode(model, mode, cap):
    cfg = composed(("task=deepscaler", f"model={model}", "cluster=h100_x8", f"run.dynamic_sampling.mode={mode}"))
    assert cfg.run.dynamic_sampling.max_rounds == cap
    assert cfg.algorithm.filter_groups.enable is (mode == "replay")  # replay leaves the dataloader alone
    assert cfg.data.gen_batch_size == (768 if mode == "rounds" else None)


def test_toolrl_main_keeps_the_hf_weights_of_every_15b_checkpoint():
    """The authors' BFCL dynamics figure scores the 1.5B models every 10 steps (the 3B runs: the evaluated steps)."""
    runs = {r.model: r for r in load("toolrl_main").runs((0,)) if r.estimator == "dara_asym"}
    small = composed(tuple(runs["qwen2.5-1.5b-instruct"].overrides()))
    assert list(small.run.checkpoint.keep_hf_steps) == list(range(10, 101, 10)) and small.trainer.save_freq == 10
    assert "hf_model" in small.actor_rollout_ref.actor.checkpoint.save_contents
    assert list(composed(tuple(runs["qwen2.5-3b-instruct"].overrides())).run.checkpoint.keep_hf_steps) == [50, 60, 100]


@pytest.mark.slow  # 60 compositions (~5 s per task)
@pytest.mark.parametrize("task", sorted(path.stem for path in (CONF_DIR / "task").glob("*.yaml")))
def test_every_estimator_on_every_task_normalises_as_its_definition_says(task):
    """A method that defines one normalisation (grpo, dvao: none) applies it; every other takes the task's level
    (token for tool calling, response for math), gd2po_snr included, and --cfg job shows that level."""
    task_level = compose([f"task={task}"], resolve=False).algorithm.dara.batch_norm
    assert task_level in ("token", "response")
    for estimator_file in sorted(path.stem for path in (CONF_DIR / "estimator").glob("*.yaml")):
        cfg = compose([f"task={task}", f"estimator={estimator_file}"], resolve=False)
        name = library_estimator(str(cfg.algorithm.adv_estimator))
        own = ESTIMATORS[name].batch_norms
        resolved = DaraAlgoConfig.from_mapping(cfg.algorithm.dara).resolved_batch_norm(name)
        assert resolved == (own[0] if len(own) == 1 else task_level), f"task={task} estimator={estimator_file}"
        assert len(own) == 1 or cfg.algorithm.dara.batch_norm == task_level, estimator_file


def test_the_run_schema_and_the_run_name_rule():  # an unknown run.* key: test_train_entry.py
    schema = OmegaConf.structured(RunConfig)
    nodes = [OmegaConf.load(path) for path in sorted(CONF_DIR.rglob("*.yaml"))]
    assert sum(OmegaConf.merge(schema, node.run) is not None for node in nodes if "run" in node) >= 15  # as Hydra
    with pytest.raises(ValidationError, match="keep_last"):
        OmegaConf.merge(schema, {"checkpoint": {"keep_last": "two"}})
    with_variant = next(run for run in load("group_size").runs((2,)) if run.variant)
    assert compose(with_variant.overrides()).run.name == with_variant.name == "toolrl-qwen2.5-1.5b-instruct-grpo-g8-s2"
    plain = load("smoke").runs((5,))[0]
    assert compose(plain.overrides()).run.name == plain.name == run_name("smoke", "tiny", "dara_asym", 5) == (
        "smoke-tiny-dara_asym-s5")
    assert all(library_estimator(name) == name for name in ESTIMATOR_NAMES)
    assert library_estimator("dara_gdpo") == "gdpo" and library_estimator("gae") is None


def test_a_cluster_file_of_ones_own_without_a_signal_lead_gets_the_sbatch_default(tmp_path):  # not "None"
    from hydra.errors import ConfigCompositionException

    from recipes.slurm import job_env

    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "my_cluster.yaml").write_text(
        "# @package _global_\nrun:\n  cluster: my_cluster\n  hardware:\n    gpu: my-gpu\n    job_time_limit_minutes: 90\n")
    cfg = compose([f"hydra.searchpath=[file://{tmp_path}]", "cluster=my_cluster", "task=smoke", "model=tiny"])
    assert cfg.run.hardware.job_time_limit_minutes == 90 and job_env(cfg)["SIGNAL_LEAD_MINUTES"] == "5.0"
    with pytest.raises(ConfigCompositionException, match="signal_lead_minutes"):
        compose(["run.hardware.signal_lead_minutes=null"])


@pytest.mark.parametrize("task, seed, rollout_seed", [("toolrl", 0, 0), ("toolrl", 4, 0),
                                                      ("toolrl_three_rewards", 4, 0), ("smoke", 3, 3)])
def test_tool_calling_fixes_the_rollout_seed_and_other_tasks_follow_the_run_seed(task, seed, rollout_seed):
    cfg = compose([f"task={task}", "model=qwen2.5-1.5b-instruct", "cluster=a100_40g_x4", f"run.seed={seed}"]
                  if task != "smoke" else [f"task={task}", f"run.seed={seed}"])
    # both clusters (cpu, a100_40g_x4) keep the root logger at WARNING where vLLM is imported (vLLM's own: ERROR)
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.SAGEMAKER_CONTAINER_LOG_LEVEL == "WARNING"
    assert cfg.actor_rollout_ref.rollout.seed == rollout_seed and cfg.run.name.endswith(f"-s{seed}")
    assert cfg.data.seed == cfg.actor_rollout_ref.actor.data_loader_seed == seed
    if task != "smoke":
        assert cfg.data.filter_overlong_prompts is False and cfg.data.truncation == "left"
        assert cfg.data.max_prompt_length == cfg.actor_rollout_ref.rollout.prompt_length == 2048

