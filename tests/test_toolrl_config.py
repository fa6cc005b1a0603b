"""The tool-calling task configs as the authors ran them: all rows kept with left truncation at 2,048
tokens, the rollout seed fixed at 0 while the data order follows the run seed."""

from __future__ import annotations

import pytest

from dara.config import compose


def composed(*overrides: str):
    return compose(overrides)


@pytest.mark.parametrize("task", ["toolrl", "toolrl_three_rewards"])
@pytest.mark.parametrize("seed", [0, 4])
def test_toolrl_data_and_seeds(task, seed):
    cfg = composed(f"task={task}", "model=qwen2.5-1.5b-instruct", "cluster=a100_40g_x4", f"run.seed={seed}")
    assert cfg.data.filter_overlong_prompts is False and cfg.data.truncation == "left"
    assert cfg.data.max_prompt_length == cfg.actor_rollout_ref.rollout.prompt_length == 2048
    assert cfg.actor_rollout_ref.rollout.seed == 0
    assert cfg.data.seed == cfg.actor_rollout_ref.actor.data_loader_seed == seed
    assert cfg.run.name.endswith(f"-s{seed}")


def test_other_tasks_keep_the_run_seed_for_the_rollout():
    cfg = composed("task=smoke", "run.seed=3")
    assert cfg.actor_rollout_ref.rollout.seed == 3
