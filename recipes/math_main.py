"""Math table: DeepScaleR training with a length constraint, evaluated at steps 50 and 100.

EXPERIMENTS.md "Math reasoning": DeepSeek-R1-Distill-Qwen-1.5B and -7B, Qwen3-4B-Instruct-2507, 200 steps,
one 8-GPU node per run; methods GRPO, GDPO, DVAO, GD2PO-Hard, DARA-Asym, DARA-Sym; one seed by default (--seeds
for more). GD2PO-Hard runs as the authors ran it in math: the query weight applied after the normalisation
(`gd2po_hard_after`), which under the task's `batch_norm: response` is over the kept responses.
"""

from __future__ import annotations

from recipes.runner import Run

DESCRIPTION = "Math table: 3 models x 6 methods, DeepScaleR, 200 steps (tables at steps 50 and 100)"
DEFAULT_SEEDS = (0,)
MODELS = ("deepseek-r1-distill-qwen-1.5b", "deepseek-r1-distill-qwen-7b", "qwen3-4b-instruct-2507")
ESTIMATORS = ("grpo", "gdpo", "dvao", "gd2po_hard_after", "dara_asym", "dara_sym")
CLUSTER = "h100_x8"


def runs(seeds=DEFAULT_SEEDS) -> list[Run]:
    return [Run(task="deepscaler", model=model, estimator=estimator, cluster=CLUSTER, seed=seed)
            for model in MODELS for estimator in ESTIMATORS for seed in seeds]
