"""Config composition, the suite's one module for it (Hydra's compose API, nothing started): every recipe's runs
compose and carry the paper's hyperparameters; the cluster tables; the run.* schema and the run-name rule; every
estimator's batch normalisation on every task; the tool-calling tasks' data and seed settings.

The tables below restate the paper's experiment settings (docs/experiments.md, "The paper's settings"); each
composed run is compared with them key by key in verl's own config keys. Composition costs ~2 s per run (verl's
trainer config), so each group of runs that differ only in the seed is composed once, with its first seed.
"""

from __future__ import annotations

import functools

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from dara.config import CONF_DIR, RunConfig, compose, library_estimator, run_name
from dara.config_checks import check_config
from dara.estimators import ESTIMATOR_NAMES, ESTIMATORS, DaraAlgoConfig
from recipes import RECIPES, load
from recipes.runner import PROJECT_ROOT, seed_groups

# EXPERIMENTS.md "Tool calling (ToolRL setup)", in verl's keys. ppo_mini_batch_size counts prompts in verl
# (x rollout.n responses): 512 responses = 128 prompts x G=4.
TOOLRL = {
    "data.train_batch_size": 512,
    "actor_rollout_ref.rollout.n": 4,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 128,
    "actor_rollout_ref.actor.ppo_epochs": 1,
    "actor_rollout_ref.actor.optim.lr": 1e-6,
    # the authors' updates were all clipped at 1.0 (gradient ~4-4.5x the token mean, grad_norm >= 1.17 on every
    # logged step): a clip below every norm of ours with Adam's eps scaled alike gives the same Adam steps
    "actor_rollout_ref.actor.optim.clip_grad": 0.05,
    "actor_rollout_ref.actor.grad_clip": 0.05,
    "actor_rollout_ref.actor.optim.override_optimizer_config": {"eps": 5e-10},
    "run.expect_clipped_updates": True,
    "actor_rollout_ref.actor.clip_ratio_c": 1e9,  # no dual-clip in the authors' verl (ratio <= e^20 < 1e9)
    "actor_rollout_ref.actor.entropy_coeff": 0.001,
    "actor_rollout_ref.actor.clip_ratio_low": 0.2,
    "actor_rollout_ref.actor.clip_ratio_high": 0.2,
    "actor_rollout_ref.actor.loss_agg_mode": "token-mean",
    "actor_rollout_ref.actor.use_kl_loss": False,
    "algorithm.use_kl_in_reward": True,
    "algorithm.kl_ctrl.kl_coef": 0.001,
    "algorithm.kl_ctrl.type": "fixed",
    "algorithm.filter_groups.enable": False,
    "data.max_prompt_length": 2048,
    "data.max_response_length": 1024,
    "actor_rollout_ref.rollout.temperature": 1.0,
    "actor_rollout_ref.rollout.top_p": 1.0,
    "trainer.total_training_steps": 100,
    "trainer.test_freq": 10,
    "trainer.val_before_train": True,
    "algorithm.dara.batch_norm": "token",
    "algorithm.reward_channels": ["format", "correctness"],
    "trainer.n_gpus_per_node": 4,  # 4 x A100-40GB per run
    "trainer.nnodes": 1,
}
TOOLRL_THREE = {**TOOLRL, "algorithm.reward_channels": ["format", "correctness", "length"],
                "reward.custom_reward_function.reward_kwargs.toolrl_length_channel": True}
# EXPERIMENTS.md "Math reasoning with a length constraint (DeepScaleR setup)".
MATH = {
    "data.train_batch_size": 512,
    "actor_rollout_ref.rollout.n": 16,
    # the authors' rounds (dara.verl.rounds): 768-prompt rounds, the dataloader batch is one round; verl's own
    # replay-buffer filter off; the cap per model is checked in test_math_round_cap_per_model
    "run.dynamic_sampling.mode": "rounds",
    "run.dynamic_sampling.round_prompts": 768,
    "data.gen_batch_size": 768,
    "algorithm.filter_groups.enable": False,
    "algorithm.filter_groups.metric": "reward",
    "trainer.val_before_train": True,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 64,
    "actor_rollout_ref.actor.ppo_epochs": 1,
    "actor_rollout_ref.actor.optim.lr": 1e-6,
    "actor_rollout_ref.actor.clip_ratio_low": 0.2,
    "actor_rollout_ref.actor.clip_ratio_high": 0.28,
    "actor_rollout_ref.actor.loss_agg_mode": "token-mean",
    "actor_rollout_ref.actor.entropy_coeff": 0.0,
    "actor_rollout_ref.actor.grad_clip": 1.0,
    "actor_rollout_ref.actor.optim.clip_grad": 1.0,
    "run.expect_clipped_updates": False,
    "actor_rollout_ref.actor.use_kl_loss": True,
    "actor_rollout_ref.actor.kl_loss_type": "mse",
    "actor_rollout_ref.actor.kl_loss_coef": 5e-4,
    "algorithm.use_kl_in_reward": False,
    "data.max_prompt_length": 1024,
    "data.max_response_length": 8000,
    "actor_rollout_ref.rollout.temperature": 1.0,
    "trainer.total_training_steps": 200,
    "algorithm.dara.batch_norm": "response",
    "algorithm.reward_channels": ["correctness", "length"],
    "reward.custom_reward_function.reward_kwargs.max_response_tokens": 4000,
    "reward.custom_reward_function.reward_kwargs.math_grader": "hendrycks",  # verl's Hendrycks MATH grader
    "trainer.save_freq": 10,  # the authors checkpoint and validate every 10 steps
    "trainer.test_freq": 10,
    "data.val_files": "data/deepscaler/val.parquet",  # the 200-row held-out DeepScaleR split
    "trainer.n_gpus_per_node": 8,  # one 8-GPU node
    "trainer.nnodes": 1,
}
TASK_TABLES = {"toolrl": TOOLRL, "toolrl_three_rewards": TOOLRL_THREE, "deepscaler": MATH}
# Every GPU run: verl's vLLM rollout and FSDP actor/reference, checkpoints every N steps, resume from the latest.
GPU_RUN = {"actor_rollout_ref.rollout.name": "vllm", "actor_rollout_ref.rollout.mode": "async",
           "actor_rollout_ref.actor.strategy": "fsdp", "actor_rollout_ref.ref.strategy": "fsdp",
           "trainer.device": "cuda", "trainer.resume_mode": "auto", "trainer.v1.trainer_mode": "dara_sync"}
# The paper's run sets (EXPERIMENTS.md): recipe -> (models, methods, seeds, runs).
PAPER_RUNS = {
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


@pytest.mark.slow  # composes every run of every recipe (~2 s each)
@pytest.mark.parametrize("recipe", list(RECIPES))
def test_every_run_of_every_recipe_composes_with_its_name_folder_and_checks(recipe):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    for group in seed_groups(load(recipe).runs(load(recipe).DEFAULT_SEEDS)):
        first = group[0]
        cfg = composed(tuple(first.overrides()))
        assert cfg.run.name == first.name and cfg.run.method == first.method
        assert (PROJECT_ROOT / cfg.run.output_dir) == first.output_dir
        assert cfg.run.seed == first.seed == cfg.data.seed
        # tool calling fixes the rollout (vLLM) seed at 0 (EXPERIMENTS.md); math follows the run seed
        rollout_seed = 0 if cfg.run.task.startswith("toolrl") else cfg.run.seed
        assert cfg.actor_rollout_ref.rollout.seed == rollout_seed
        assert cfg.trainer.default_local_dir == f"{cfg.run.output_dir}/checkpoints"
        check_config(cfg)
        if cfg.trainer.device == "cuda":  # verl's own checks (the CPU path is checked by its own run)
            validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
            omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
            omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
        # the other seeds of the group differ in run.seed and the name's seed only
        assert [r.overrides()[:-1] for r in group] == [first.overrides()[:-1]] * len(group)
        assert all(r.name == first.name_for(r.seed) for r in group)


@pytest.mark.slow  # composes every run of every recipe (~2 s each)
@pytest.mark.parametrize("recipe", list(PAPER_RUNS))
def test_recipes_hold_the_papers_runs_and_hyperparameters(recipe):
    models, methods, seeds, count = PAPER_RUNS[recipe]
    module = load(recipe)
    runs = module.runs(module.DEFAULT_SEEDS)
    assert len(runs) == count and len({r.name for r in runs}) == count
    assert {r.model for r in runs} == models and {r.method for r in runs} == methods
    assert {r.seed for r in runs} == seeds
    mismatches = []
    for group in seed_groups(runs):
        cfg = composed(tuple(group[0].overrides()))
        expected = {**TASK_TABLES[cfg.run.task], **GPU_RUN}
        if recipe == "group_size":  # G x prompts = 2,048 responses; mini-batch 512 responses
            for key in ("data.train_batch_size", "actor_rollout_ref.rollout.n",
                        "actor_rollout_ref.actor.ppo_mini_batch_size"):
                expected.pop(key)
            n = cfg.actor_rollout_ref.rollout.n
            assert n in (4, 8, 16, 32)
            assert cfg.data.train_batch_size * n == 2048
            assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size * n == 512
        if recipe == "fixed_weight":
            expected["algorithm.dara.weights"] = [1.0, 5.0]
            expected["algorithm.adv_estimator"] = "static"
        if ESTIMATORS[library_estimator(str(cfg.algorithm.adv_estimator))].batch_norms == ("none",):  # GRPO, DVAO: the method's own
            expected["algorithm.dara.batch_norm"] = None
        if recipe == "instruct_vs_thinking":  # compared at step 100
            expected["trainer.total_training_steps"] = 100
        if cfg.run.method == "gd2po_hard_after":  # the authors' math GD2PO: c_i after the response-level norm
            expected["algorithm.dara.query_weight"] = "after_whiten"
        for key, wanted in expected.items():
            if value(cfg, key) != wanted:
                mismatches.append(f"{cfg.run.name}: {key} = {value(cfg, key)!r}, EXPERIMENTS.md: {wanted!r}")
        assert cfg.trainer.save_freq > 0 and cfg.trainer.total_training_steps % cfg.trainer.save_freq == 0
    assert not mismatches, "\n".join(mismatches)


@pytest.mark.slow  # composes every run of two recipes (~7 s)
def test_group_size_4_shares_the_main_tables_runs():
    """G=4 at 512 prompts is the main table's setting: same runs, same folders (a rerun skips them)."""
    main = {r.name: r for r in load("toolrl_main").runs((0, 1, 2))}
    g4 = [r for r in load("group_size").runs((0, 1, 2)) if not r.variant]
    assert len(g4) == 12 and all(r.name in main for r in g4)
    for run in g4[:: len(g4) // 4]:  # one per method: the composed configs are identical
        assert composed(tuple(run.overrides())) == composed(tuple(main[run.name].overrides()))


# vLLM TP size, memory share and the FSDP token budget per model scale and GPU type (conf/cluster/*.yaml)
@pytest.mark.parametrize("cluster, model, tp, memory", [
    ("a100_40g_x4", "qwen2.5-1.5b-instruct", 1, 0.5),
    ("a100_40g_x4", "qwen2.5-3b-instruct", 1, 0.4),
    ("h100_x8", "deepseek-r1-distill-qwen-1.5b", 1, 0.6),
    ("h100_x8", "deepseek-r1-distill-qwen-7b", 1, 0.55),
    ("a100_80g_x8", "deepseek-r1-distill-qwen-7b", 2, 0.5),
])
def test_cluster_tables_set_rollout_and_fsdp_per_model_and_gpu(cluster, model, tp, memory):
    task = "toolrl" if model.startswith("qwen2.5") else "deepscaler"
    cfg = composed((f"task={task}", f"model={model}", f"cluster={cluster}"))
    rollout, actor = cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.actor
    assert (rollout.tensor_model_parallel_size, rollout.gpu_memory_utilization) == (tp, memory)
    assert cfg.trainer.n_gpus_per_node % rollout.tensor_model_parallel_size == 0
    longest = cfg.data.max_prompt_length + cfg.data.max_response_length
    assert actor.use_dynamic_bsz and actor.ppo_max_token_len_per_gpu >= longest
    assert cfg.actor_rollout_ref.ref.log_prob_max_token_len_per_gpu >= longest
    assert actor.fsdp_config.param_offload == cfg.run.hardware[cfg.run.model_scale].param_offload


# ----------------------------------------------------------------------------- math dynamic sampling
# EXPERIMENTS.md: keep only groups whose summed reward varies, draw further candidate batches until the batch is
# full, log how many were drawn and kept. conf/task/deepscaler.yaml runs the authors' rounds (dara.verl.rounds,
# tests/test_verl_rounds.py; real CPU training: tests/test_smoke_math.py); run.dynamic_sampling.mode=replay runs
# verl 0.9.1's own group filter (algorithm.filter_groups, v1 replay buffer): the buffer dara_sync builds for it
# here, its sample and step on verl's objects in tests/test_verl_prefilter.py.
ROUND_CAPS = {"deepseek-r1-distill-qwen-1.5b": 2, "deepseek-r1-distill-qwen-7b": 4, "qwen3-4b-instruct-2507": 4,
              "qwen3-4b-thinking-2507": 4}  # the authors' README: 2 for 1.5B, 4 for the 4B models (and 7B)


@pytest.mark.parametrize("model, cap", list(ROUND_CAPS.items()))
def test_math_round_cap_per_model(model, cap):
    cfg = composed(("task=deepscaler", f"model={model}", "cluster=h100_x8"))
    assert cfg.run.dynamic_sampling.max_rounds == cap and cfg.run.dynamic_sampling.mode == "rounds"


def test_replay_mode_turns_on_verls_filter_and_leaves_the_dataloader_alone():
    cfg = composed(("task=deepscaler", "model=deepseek-r1-distill-qwen-1.5b", "cluster=h100_x8",
                    "run.dynamic_sampling.mode=replay"))
    assert cfg.algorithm.filter_groups.enable is True and cfg.data.gen_batch_size is None
    assert composed(()).algorithm.filter_groups.enable is False  # tool calling: no dynamic sampling


def math_filter_overrides() -> list[str]:
    """The math task's filter in verl's replay mode, for the CPU smoke task."""
    block = OmegaConf.load(CONF_DIR / "task" / "deepscaler.yaml").algorithm.filter_groups
    return ["run.dynamic_sampling.mode=replay",
            *(f"algorithm.filter_groups.{key}={block[key]}" for key in ("metric", "max_inflight_gen_batches"))]


def test_dara_sync_builds_verls_synchronous_dapo_replay_buffer():
    """verl's base trainer branches on trainer_mode == "sync": dara_sync must get the sync DAPO replay buffer
    (drain in-flight requests, discard the surplus), exactly as verl's own sync trainer builds it."""
    from verl.trainer.ppo.v1 import PPOTrainerSync
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    from dara.verl.trainer import DaraTrainer

    cfg = composed(tuple(math_filter_overrides()))
    check_config(cfg)  # as dara.train does: the reward's channels fill algorithm.reward_channels
    stock = PPOTrainerSync(OmegaConf.merge(cfg, {"trainer": {"v1": {"trainer_mode": "sync"}}})).replay_buffer
    ours = DaraTrainer(cfg.copy()).replay_buffer
    assert type(stock) is ReplayBuffer and stock.filter_groups_metric == "reward"
    assert (stock.train_batch_size, stock.gen_batch_size, stock.max_inflight_gen_batches) == (8, 1, 2)
    assert type(ours).__mro__[1:].count(type(stock)) == 1  # verl's buffer with pre-filter recording mixed in
    assert {k: v for k, v in vars(ours).items() if k != "refill_fn" and not k.startswith("_prefilter")
            and k != "prefilter_channels"} == {
        k: v for k, v in vars(stock).items() if k not in ("refill_fn", "trainer_mode")} | {"trainer_mode": "sync"}


def test_dara_sync_builds_the_rounds_sampler_for_the_math_tasks():
    from dara.config_checks import check_config
    from dara.verl.prefilter import PrefilterRoundsReplayBuffer
    from dara.verl.rounds import RoundsSettings
    from dara.verl.trainer import DaraTrainer

    cfg = composed(("task=smoke_math",))
    check_config(cfg)  # as dara.train does before Ray: fills algorithm.reward_channels from the reward's declaration
    trainer = DaraTrainer(cfg.copy())
    buffer = trainer.replay_buffer
    assert type(buffer) is PrefilterRoundsReplayBuffer and buffer.prefilter_channels == ("correctness", "length")
    assert buffer.settings == RoundsSettings(round_prompts=8, max_rounds=20, metric="reward")
    assert cfg.data.gen_batch_size == 8 and cfg.algorithm.filter_groups.enable is False
    assert trainer.prepare_step() == {}  # the sampler submits each round itself


def test_toolrl_main_keeps_the_hf_weights_of_every_15b_checkpoint():
    """The authors' BFCL dynamics figure scores the 1.5B models every 10 steps: those runs keep every save's HF
    weights (the 3B runs keep the evaluated steps only)."""
    runs = {r.model: r for r in load("toolrl_main").runs((0,)) if r.estimator == "dara_asym"}
    small = composed(tuple(runs["qwen2.5-1.5b-instruct"].overrides()))
    large = composed(tuple(runs["qwen2.5-3b-instruct"].overrides()))
    assert list(small.run.checkpoint.keep_hf_steps) == list(range(10, 101, 10))
    assert small.trainer.save_freq == 10 and "hf_model" in small.actor_rollout_ref.actor.checkpoint.save_contents
    assert list(large.run.checkpoint.keep_hf_steps) == [50, 60, 100]


# ----------------------------------------------------------------------------- the run.* schema, names, batch norms
TASKS = sorted(path.stem for path in (CONF_DIR / "task").glob("*.yaml"))
ESTIMATOR_FILES = sorted(path.stem for path in (CONF_DIR / "estimator").glob("*.yaml"))


def test_gd2po_takes_the_math_tasks_response_level_like_every_method_without_its_own():
    for estimator in ("gd2po_snr", "gd2po_hard", "dara_asym"):
        dara = compose(["task=deepscaler", f"estimator={estimator}"], resolve=False).algorithm.dara
        assert dara.batch_norm == "response"
        assert DaraAlgoConfig.from_mapping(dara).resolved_batch_norm(estimator) == "response"


@pytest.mark.slow  # 60 compositions (~5 s per task)
@pytest.mark.parametrize("task", TASKS)
def test_every_estimator_on_every_task_normalises_as_its_definition_says(task):
    """A method that defines one normalisation (grpo, dvao: none) applies it; every other method takes the task's
    level (token for tool calling, response for math), gd2po_snr included, and --cfg job shows that level."""
    task_level = compose([f"task={task}"], resolve=False).algorithm.dara.batch_norm
    assert task_level in ("token", "response")
    for estimator_file in ESTIMATOR_FILES:
        cfg = compose([f"task={task}", f"estimator={estimator_file}"], resolve=False)
        name = library_estimator(str(cfg.algorithm.adv_estimator))
        own = ESTIMATORS[name].batch_norms
        resolved = DaraAlgoConfig.from_mapping(cfg.algorithm.dara).resolved_batch_norm(name)
        expected = own[0] if len(own) == 1 else task_level
        assert resolved == expected, f"task={task} estimator={estimator_file}: {resolved}, expected {expected}"
        if len(own) != 1:
            assert cfg.algorithm.dara.batch_norm == task_level, estimator_file


def test_every_run_node_of_conf_fits_the_schema():
    schema = OmegaConf.structured(RunConfig)
    nodes = 0
    for path in sorted(CONF_DIR.rglob("*.yaml")):
        node = OmegaConf.load(path)
        if "run" in node:
            OmegaConf.merge(schema, node.run)  # what Hydra does: an unknown key or a wrong type raises
            nodes += 1
    assert nodes >= 15
    with pytest.raises(ConfigKeyError, match="sed"):
        OmegaConf.merge(schema, {"sed": 1})
    with pytest.raises(ValidationError, match="keep_last"):
        OmegaConf.merge(schema, {"checkpoint": {"keep_last": "two"}})


def test_the_run_name_rule_is_one_function_for_the_config_and_the_recipes():
    assert run_name("toolrl", "m", "gdpo", 3) == "toolrl-m-gdpo-s3"
    assert run_name("toolrl", "m", "gdpo", 3, "g8") == "toolrl-m-gdpo-g8-s3"
    module = load("group_size")
    with_variant = next(run for run in module.runs((2,)) if run.variant)
    assert compose(with_variant.overrides()).run.name == with_variant.name
    plain = load("smoke").runs((5,))[0]
    assert compose(plain.overrides()).run.name == plain.name == "smoke-tiny-dara_asym-s5"


def test_library_estimator_maps_verls_names_back():
    assert all(library_estimator(name) == name for name in ESTIMATOR_NAMES)
    assert library_estimator("dara_grpo") == "grpo" and library_estimator("dara_gdpo") == "gdpo"
    assert library_estimator("gae") is None and library_estimator("dara_nope") is None


def test_a_cluster_file_of_ones_own_without_a_signal_lead_gets_the_sbatch_default(tmp_path):
    """A user's cluster file (own folder, hydra.searchpath) that leaves out run.hardware.signal_lead_minutes:
    the schema's default reaches the batch script's environment instead of "None"."""
    from hydra.errors import ConfigCompositionException

    from recipes.slurm import job_env

    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "my_cluster.yaml").write_text(
        "# @package _global_\nrun:\n  cluster: my_cluster\n  hardware:\n    gpu: my-gpu\n    job_time_limit_minutes: 90\n")
    cfg = compose([f"hydra.searchpath=[file://{tmp_path}]", "cluster=my_cluster", "task=smoke", "model=tiny"])
    assert cfg.run.hardware.job_time_limit_minutes == 90
    assert job_env(cfg)["SIGNAL_LEAD_MINUTES"] == "5.0"
    with pytest.raises(ConfigCompositionException, match="signal_lead_minutes"):
        compose(["run.hardware.signal_lead_minutes=null"])


# ----------------------------------------------------------------------------- the tool-calling tasks' data and seeds
@pytest.mark.parametrize("task", ["toolrl", "toolrl_three_rewards"])
@pytest.mark.parametrize("seed", [0, 4])
def test_toolrl_data_and_seeds(task, seed):
    cfg = compose([f"task={task}", "model=qwen2.5-1.5b-instruct", "cluster=a100_40g_x4", f"run.seed={seed}"])
    assert cfg.data.filter_overlong_prompts is False and cfg.data.truncation == "left"
    assert cfg.data.max_prompt_length == cfg.actor_rollout_ref.rollout.prompt_length == 2048
    assert cfg.actor_rollout_ref.rollout.seed == 0
    assert cfg.data.seed == cfg.actor_rollout_ref.actor.data_loader_seed == seed
    assert cfg.run.name.endswith(f"-s{seed}")


def test_other_tasks_keep_the_run_seed_for_the_rollout():
    cfg = compose(["task=smoke", "run.seed=3"])
    assert cfg.actor_rollout_ref.rollout.seed == 3


@pytest.mark.parametrize("cluster", ["cpu", "a100_40g_x4"])
def test_every_cluster_keeps_the_root_logger_at_warning_where_vllm_is_imported(cluster):
    """vLLM's dependency model_hosting_container_standards sets the root logger of every process importing vLLM
    to SAGEMAKER_CONTAINER_LOG_LEVEL (ERROR by default), which would hide every warning of verl and the project."""
    env = compose([f"cluster={cluster}"]).ray_kwargs.ray_init.runtime_env.env_vars
    assert env.SAGEMAKER_CONTAINER_LOG_LEVEL == "WARNING"
