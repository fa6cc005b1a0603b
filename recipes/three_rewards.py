"""Three-reward study: the ToolRL setup with a third, think-length channel (conf/task/toolrl_three_rewards.yaml).

Channels format, correctness, length (1 if the think block has <= 16 words); Qwen2.5-1.5B-Instruct,
methods GRPO, GDPO, DARA-Asym, DARA-Sym, seeds {0, 1, 2}.
"""

from __future__ import annotations

from recipes.runner import Run

DESCRIPTION = "Three-reward study: format + correctness + think length, 4 methods x 3 seeds"
DEFAULT_SEEDS = (0, 1, 2)
ESTIMATORS = ("grpo", "gdpo", "dara_asym", "dara_sym")
MODEL = "qwen2.5-1.5b-instruct"
CLUSTER = "a100_40g_x4"


def runs(seeds=DEFAULT_SEEDS) -> list[Run]:
    return [Run(task="toolrl_three_rewards", model=MODEL, estimator=estimator, cluster=CLUSTER, seed=seed)
            for estimator in ESTIMATORS for seed in seeds]
