"""Main tool-calling table (the paper's Table 1: BFCL v4 after 100 training steps).

EXPERIMENTS.md "Tool calling": Qwen2.5-1.5B-Instruct and -3B-Instruct, 100 steps, seeds {0, 1, 2, 4, 5},
4 x A100-40GB per run. Methods: the paper's comparison (GRPO, GDPO, DVAO, GD2PO-Hard as the DARA authors ran
it, i.e. query weight after whitening) and both DARA forms.

The 1.5B runs keep the HF weights of every checkpoint (steps 10, 20, ..., 100): the authors' BFCL dynamics
figure scores the 1.5B models at steps 0-100 every 10 (step 0 is the base model). The cluster config already
exports them (`actor.checkpoint.save_contents` holds `hf_model`); `run.checkpoint.keep_hf_steps` keeps them
after verl rotates the checkpoints, and the preflight's disk plan counts them.
"""

from __future__ import annotations

from recipes.runner import Run

DESCRIPTION = "Table 1: tool calling, 2 models x 6 methods x 5 seeds (BFCL v4 at step 100)"
DEFAULT_SEEDS = (0, 1, 2, 4, 5)
MODELS = ("qwen2.5-1.5b-instruct", "qwen2.5-3b-instruct")
ESTIMATORS = ("grpo", "gdpo", "dvao", "gd2po_hard_after", "dara_sym", "dara_asym")
CLUSTER = "a100_40g_x4"
DYNAMICS_MODEL = "qwen2.5-1.5b-instruct"
DYNAMICS_STEPS = tuple(range(10, 101, 10))


def extra_for(model: str) -> tuple[str, ...]:
    if model != DYNAMICS_MODEL:
        return ()
    return (f"run.checkpoint.keep_hf_steps=[{','.join(str(s) for s in DYNAMICS_STEPS)}]",)


def runs(seeds=DEFAULT_SEEDS) -> list[Run]:
    return [Run(task="toolrl", model=model, estimator=estimator, cluster=CLUSTER, seed=seed, extra=extra_for(model))
            for model in MODELS for estimator in ESTIMATORS for seed in seeds]
