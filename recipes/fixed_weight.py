"""Fixed-weight ablation: GDPO-style static weights, correctness 1 and length 5, in the Sym and Asym forms.

EXPERIMENTS.md: the math setting (DeepSeek-R1-Distill-Qwen-1.5B, DeepScaleR, 200 steps); compare with the
math table's DARA runs of the same model.
"""

from __future__ import annotations

from recipes.runner import Run

DESCRIPTION = "Fixed-weight ablation: static weights [correctness 1, length 5], Sym and Asym forms"
DEFAULT_SEEDS = (0,)
MODEL = "deepseek-r1-distill-qwen-1.5b"
CLUSTER = "h100_x8"
WEIGHTS = "algorithm.dara.weights=[1.0,5.0]"  # in the task's channel order: correctness, length


def runs(seeds=DEFAULT_SEEDS) -> list[Run]:
    return [Run(task="deepscaler", model=MODEL, estimator="static", static_form=form, cluster=CLUSTER, seed=seed,
                extra=(WEIGHTS,))
            for form in ("sym", "asym") for seed in seeds]
