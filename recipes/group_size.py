"""Group-size study: G in {4, 8, 16, 32} at a fixed 2,048 responses per step.

EXPERIMENTS.md: 512/256/128/64 prompts x G, methods GRPO, GDPO, DARA-Asym, DARA-Sym, seeds {0, 1, 2};
Qwen2.5-1.5B-Instruct, otherwise the ToolRL setup. The PPO mini-batch stays 512 responses (4 updates per
step), i.e. 512 / G prompts (verl counts mini-batches in prompts). G = 4 is the main table's setting and
shares its runs (same name and folder); the others carry the variant "g<G>" in their names.
"""

from __future__ import annotations

from recipes.runner import Run
from recipes.toolrl_main import extra_for

DESCRIPTION = "Group-size study: G in {4,8,16,32} at 2,048 responses per step, 4 methods x 3 seeds"
DEFAULT_SEEDS = (0, 1, 2)
RESPONSES_PER_STEP = 2048
MINI_BATCH_RESPONSES = 512
GROUP_SIZES = (4, 8, 16, 32)
ESTIMATORS = ("grpo", "gdpo", "dara_asym", "dara_sym")
MODEL = "qwen2.5-1.5b-instruct"
CLUSTER = "a100_40g_x4"
BASE_GROUP_SIZE = 4  # the ToolRL task's own setting (conf/task/toolrl.yaml)


def settings(group_size: int) -> tuple[str, tuple[str, ...]]:
    """(variant, overrides) of one group size."""
    if RESPONSES_PER_STEP % group_size or MINI_BATCH_RESPONSES % group_size:
        raise ValueError(f"G={group_size} does not divide {RESPONSES_PER_STEP} and {MINI_BATCH_RESPONSES}")
    overrides = (f"data.train_batch_size={RESPONSES_PER_STEP // group_size}",
                 f"actor_rollout_ref.rollout.n={group_size}",
                 f"actor_rollout_ref.actor.ppo_mini_batch_size={MINI_BATCH_RESPONSES // group_size}")
    if group_size == BASE_GROUP_SIZE:  # the main table's run, with its settings (its HF checkpoints kept)
        return "", overrides + extra_for(MODEL)
    return f"g{group_size}", overrides


def runs(seeds=DEFAULT_SEEDS) -> list[Run]:
    result = []
    for group_size in GROUP_SIZES:
        variant, overrides = settings(group_size)
        result += [Run(task="toolrl", model=MODEL, estimator=estimator, cluster=CLUSTER, seed=seed,
                       variant=variant, extra=overrides)
                   for estimator in ESTIMATORS for seed in seeds]
    return result
