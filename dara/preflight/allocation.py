"""Will the run start on this allocation? verl's own start-up validation, what verl asserts only after Ray started
(`dara.config_checks.divisibility_problems`) and the token budgets."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf, open_dict

from dara.config import verl_validation_error
from dara.config_checks import divisibility_problems
from dara.preflight.facts import ModelFacts
from dara.preflight.report import Section


def with_allocation(cfg: DictConfig, nodes: int, gpus_per_node: int) -> DictConfig:
    copy = cfg.copy()
    with open_dict(copy):
        copy.trainer.nnodes, copy.trainer.n_gpus_per_node = int(nodes), int(gpus_per_node)
    return copy


def check_allocation(cfg: DictConfig, facts: ModelFacts | None, section: Section) -> None:
    arr = cfg.actor_rollout_ref
    world = int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)
    section.line(f"{cfg.trainer.nnodes} node(s) x {cfg.trainer.n_gpus_per_node} GPUs = {world}; mini-batch "
                 f"{arr.actor.ppo_mini_batch_size} prompts x n {arr.rollout.n}; rollout TP "
                 f"{arr.rollout.tensor_model_parallel_size}")
    error = verl_validation_error(cfg)
    section.line("verl validate_config + actor/rollout config dataclasses: " + ("passed" if error is None else "FAILED"))
    section.problems += [f"verl's start-up validation: {error}"] * (error is not None) + divisibility_problems(cfg)
    longest = int(cfg.data.max_prompt_length) + int(cfg.data.max_response_length)
    section.line(f"one sequence: prompt {cfg.data.max_prompt_length} + response {cfg.data.max_response_length} = "
                 f"{longest} tokens")
    for flag, key in (("actor.use_dynamic_bsz", "actor.ppo_max_token_len_per_gpu"),
                      ("ref.log_prob_use_dynamic_bsz", "ref.log_prob_max_token_len_per_gpu"),
                      ("rollout.log_prob_use_dynamic_bsz", "rollout.log_prob_max_token_len_per_gpu")):
        if OmegaConf.select(arr, flag, default=False):
            budget = int(OmegaConf.select(arr, key))
            section.line(f"{key} = {budget} (dynamic micro-batches)")
            if budget < longest:
                section.fail(f"{key} {budget} < one prompt + response {longest}")
    max_model_len = OmegaConf.select(arr, "rollout.max_model_len", default=None)
    limit = facts.max_position_embeddings if facts else None
    section.line(f"rollout.max_model_len = {max_model_len}" if max_model_len is not None else
                 f"rollout.max_model_len unset: vLLM takes the model's maximum ({limit or 'unknown'})")
    max_model_len = max_model_len if max_model_len is not None else limit
    if max_model_len is not None and int(max_model_len) < longest:
        section.fail(f"rollout.max_model_len {max_model_len} < prompt + response {longest}")
    if max_model_len is not None and limit is not None and int(max_model_len) > limit:
        section.fail(f"rollout.max_model_len {max_model_len} > the model's max_position_embeddings {limit}")
