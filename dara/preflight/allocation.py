"""Will the run start on this allocation? verl's own start-up validation, then what verl checks only later.

verl 0.9.1's `validate_config` (and the actor config dataclass's `validate`) checks batch divisibility by the
GPU count only without dynamic micro-batches; with `use_dynamic_bsz` (every GPU cluster here) the first
failure is `assert mini_batch_size % data_parallel_size == 0` in the actor update, after a full generation, and
the rollout's `world_size % (tp * dp * pp)` at worker start. Those and the model-shape and token-budget
conditions are checked here, before anything starts.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf, open_dict

from dara.config import verl_validation_error
from dara.config_checks import divisibility_problems
from dara.preflight.facts import ModelFacts
from dara.preflight.report import Section


def with_allocation(cfg: DictConfig, nodes: int, gpus_per_node: int) -> DictConfig:
    """A copy of the run's config with trainer.nnodes / n_gpus_per_node set to the allocation."""
    copy = cfg.copy()
    with open_dict(copy):
        copy.trainer.nnodes = int(nodes)
        copy.trainer.n_gpus_per_node = int(gpus_per_node)
    return copy


def token_problems(cfg: DictConfig, facts: ModelFacts | None) -> tuple[list[str], list[str]]:
    """(lines, problems) of the token budgets against one full prompt + response, and vLLM's max_model_len."""
    arr = cfg.actor_rollout_ref
    longest = int(cfg.data.max_prompt_length) + int(cfg.data.max_response_length)
    lines = [f"one sequence: prompt {cfg.data.max_prompt_length} + response {cfg.data.max_response_length} = {longest} tokens"]
    problems = []
    budgets = {"actor.ppo_max_token_len_per_gpu": ("actor.use_dynamic_bsz", "actor.ppo_max_token_len_per_gpu"),
               "ref.log_prob_max_token_len_per_gpu": ("ref.log_prob_use_dynamic_bsz", "ref.log_prob_max_token_len_per_gpu"),
               "rollout.log_prob_max_token_len_per_gpu": ("rollout.log_prob_use_dynamic_bsz",
                                                          "rollout.log_prob_max_token_len_per_gpu")}
    for name, (flag, key) in budgets.items():
        if OmegaConf.select(arr, flag, default=False):
            budget = int(OmegaConf.select(arr, key))
            lines.append(f"{name} = {budget} (dynamic micro-batches)")
            if budget < longest:
                problems.append(f"{name} {budget} < one prompt + response {longest}")
    max_model_len = OmegaConf.select(arr, "rollout.max_model_len", default=None)
    limit = facts.max_position_embeddings if facts else None
    if max_model_len is None:
        lines.append(f"rollout.max_model_len unset: vLLM takes the model's maximum ({limit or 'unknown'})")
        max_model_len = limit
    else:
        lines.append(f"rollout.max_model_len = {max_model_len}")
    if max_model_len is not None:
        if int(max_model_len) < longest:
            problems.append(f"rollout.max_model_len {max_model_len} < prompt + response {longest}")
        if limit is not None and int(max_model_len) > limit:
            problems.append(f"rollout.max_model_len {max_model_len} > the model's max_position_embeddings {limit}")
        chunked = OmegaConf.select(arr, "rollout.enable_chunked_prefill", default=True)
        batched = OmegaConf.select(arr, "rollout.max_num_batched_tokens", default=None)
        if not chunked and batched is not None and int(batched) < int(max_model_len):
            lines.append(f"chunked prefill off: vLLM raises max_num_batched_tokens {batched} to {max_model_len}")
    return lines, problems


def check_allocation(cfg: DictConfig, facts: ModelFacts | None, section: Section) -> None:
    world = int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)
    section.line(f"{cfg.trainer.nnodes} node(s) x {cfg.trainer.n_gpus_per_node} GPUs = {world}; "
                 f"mini-batch {cfg.actor_rollout_ref.actor.ppo_mini_batch_size} prompts x n "
                 f"{cfg.actor_rollout_ref.rollout.n}; rollout TP {cfg.actor_rollout_ref.rollout.tensor_model_parallel_size}")
    error = verl_validation_error(cfg)
    section.line("verl validate_config + actor/rollout config dataclasses: " + ("passed" if error is None else "FAILED"))
    if error:
        section.fail(f"verl's start-up validation: {error}")
    for problem in divisibility_problems(cfg):
        section.fail(problem)
    lines, problems = token_problems(cfg, facts)
    section.lines += lines
    for problem in problems:
        section.fail(problem)
