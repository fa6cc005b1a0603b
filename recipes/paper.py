"""The paper's runs, one recipe per table or figure (docs/experiments.md, "Runs per recipe"). GD2PO-Hard runs as the
DARA authors ran it (`gd2po_hard_after`: the query weight after the normalisation); the 1.5B tool-calling runs keep
the HF weights of steps 10, 20, ..., 100 for the BFCL dynamics figure; the group-size study keeps 2,048 responses a
step and PPO mini-batches of 512 responses (512 / G prompts: verl counts prompts), its G = 4 being Table 1's run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from recipes.runner import Run

TOOL_MODEL, TOOL_CLUSTER, MATH_CLUSTER = "qwen2.5-1.5b-instruct", "a100_40g_x4", "h100_x8"
PAPER_TOOL = ("grpo", "gdpo", "dvao", "gd2po_hard_after", "dara_sym", "dara_asym")
FOUR = ("grpo", "gdpo", "dara_asym", "dara_sym")
KEEP_HF = (f"run.checkpoint.keep_hf_steps=[{','.join(str(s) for s in range(10, 101, 10))}]",)
RESPONSES_PER_STEP, MINI_BATCH_RESPONSES = 2048, 512


def grid(task: str, models: Sequence[str], methods: Sequence[str], cluster: str, seeds: Sequence[int],
         **fields) -> list[Run]:
    """Every model x method x seed, in that order; a method static_<form> is the static estimator in that form."""
    return [Run(task=task, model=model, estimator="static" if method.startswith("static_") else method,
                static_form=method.removeprefix("static_") if method.startswith("static_") else "sym",
                cluster=cluster, seed=seed, **fields) for model in models for method in methods for seed in seeds]


def toolrl_main(seeds) -> list[Run]:
    return [run for model in (TOOL_MODEL, "qwen2.5-3b-instruct")
            for run in grid("toolrl", [model], PAPER_TOOL, TOOL_CLUSTER, seeds,
                            extra=KEEP_HF if model == TOOL_MODEL else ())]


def group_size(seeds) -> list[Run]:
    runs = []
    for g in (4, 8, 16, 32):
        extra = (f"data.train_batch_size={RESPONSES_PER_STEP // g}", f"actor_rollout_ref.rollout.n={g}",
                 f"actor_rollout_ref.actor.ppo_mini_batch_size={MINI_BATCH_RESPONSES // g}")
        base = g == 4  # the ToolRL task's own G: the main table's run, with its settings (its HF steps kept)
        runs += grid("toolrl", [TOOL_MODEL], FOUR, TOOL_CLUSTER, seeds, variant="" if base else f"g{g}",
                     extra=extra + KEEP_HF if base else extra)
    return runs


@dataclass(frozen=True)
class Recipe:
    DESCRIPTION: str
    DEFAULT_SEEDS: tuple[int, ...]
    make: Callable[[Sequence[int]], list[Run]]

    def runs(self, seeds: Sequence[int] | None = None) -> list[Run]:
        return self.make(self.DEFAULT_SEEDS if seeds is None else seeds)


MATH_MODELS = ("deepseek-r1-distill-qwen-1.5b", "deepseek-r1-distill-qwen-7b", "qwen3-4b-instruct-2507")
RECIPES = {
    "toolrl_main": Recipe("Table 1: tool calling, 2 models x 6 methods x 5 seeds (BFCL v4 at step 100)",
                          (0, 1, 2, 4, 5), toolrl_main),
    "group_size": Recipe("Group-size study: G in {4,8,16,32} at 2,048 responses per step, 4 methods x 3 seeds",
                         (0, 1, 2), group_size),
    "three_rewards": Recipe(
        "Three-reward study: format + correctness + think length, 4 methods x 3 seeds", (0, 1, 2),
        lambda seeds: grid("toolrl_three_rewards", [TOOL_MODEL], FOUR, TOOL_CLUSTER, seeds)),
    "math_main": Recipe(
        "Math table: 3 models x 6 methods, DeepScaleR, 200 steps (tables at steps 50 and 100)", (0,),
        lambda seeds: grid("deepscaler", MATH_MODELS, ("grpo", "gdpo", "dvao", "gd2po_hard_after", "dara_asym",
                                                       "dara_sym"), MATH_CLUSTER, seeds)),
    "instruct_vs_thinking": Recipe(
        "Instruct vs Thinking: DARA-Asym on Qwen3-4B-Thinking-2507, DeepScaleR, 100 steps", (0,),
        lambda seeds: grid("deepscaler", ["qwen3-4b-thinking-2507"], ["dara_asym"], MATH_CLUSTER, seeds,
                           total_steps=100)),
    "fixed_weight": Recipe(
        "Fixed-weight ablation: static weights [correctness 1, length 5], Sym and Asym forms", (0,),
        lambda seeds: grid("deepscaler", [MATH_MODELS[0]], ("static_sym", "static_asym"), MATH_CLUSTER, seeds,
                           extra=("algorithm.dara.weights=[1.0,5.0]",))),  # the task's channel order
    "extra_baselines": Recipe(
        "Extra tool-calling baselines: SAW, SA-MRPO, GD2PO-Hard, GD2PO-SNR x 3 seeds", (0, 1, 2),
        lambda seeds: grid("toolrl", [TOOL_MODEL], ("saw", "sa_mrpo", "gd2po_hard", "gd2po_snr"), TOOL_CLUSTER,
                           seeds)),
    "rvpo": Recipe("RVPO (the authors' published extra baseline): 1.5B tool calling x 3 seeds", (0, 1, 2),
                   lambda seeds: grid("toolrl", [TOOL_MODEL], ["rvpo"], TOOL_CLUSTER, seeds)),
    "smoke": Recipe("CPU smoke: 3 DARA-Asym steps of the tiny offline model (cluster cpu)", (0,),
                    lambda seeds: grid("smoke", ["tiny"], ["dara_asym"], "cpu", seeds)),
}
