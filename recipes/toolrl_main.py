"""Main tool-calling table (the paper's Table 1: BFCL v4 after 100 training steps).

EXPERIMENTS.md "Tool calling": Qwen2.5-1.5B-Instruct and -3B-Instruct, 100 steps, seeds {0, 1, 2, 4, 5},
4 x A100-40GB per run. Methods: the paper's comparison (GRPO, GDPO, DVAO, GD2PO-Hard as the DARA authors ran
it, i.e. query weight after whitening) and both DARA forms.
"""

from __future__ import annotations

from recipes.runner import Run

DESCRIPTION = "Table 1: tool calling, 2 models x 6 methods x 5 seeds (BFCL v4 at step 100)"
DEFAULT_SEEDS = (0, 1, 2, 4, 5)
MODELS = ("qwen2.5-1.5b-instruct", "qwen2.5-3b-instruct")
ESTIMATORS = ("grpo", "gdpo", "dvao", "gd2po_hard_after", "dara_sym", "dara_asym")
CLUSTER = "a100_40g_x4"


def runs(seeds=DEFAULT_SEEDS) -> list[Run]:
    return [Run(task="toolrl", model=model, estimator=estimator, cluster=CLUSTER, seed=seed)
            for model in MODELS for estimator in ESTIMATORS for seed in seeds]
