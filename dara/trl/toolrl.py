"""The project's ToolRL channels (rewards.toolrl) as TRL reward functions, one per channel.

Each function is named after its channel (`format`, `correctness`, `length`), so TRL's reward names, the
estimator's channels and the verl path's `reward/<c>/mean` keys agree. The dataset needs a `ground_truth`
column (the verl rows' `reward_model.ground_truth`; `toolrl_dataset` builds it).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from rewards import toolrl
from rewards.task_rewards import ToolRLReward


def completion_text(completion) -> str:
    """The text of a TRL completion: a string, or (conversational) the assistant messages' contents joined."""
    if isinstance(completion, str):
        return completion
    return "".join(str(message.get("content") or "") for message in completion if message.get("role") == "assistant")


def toolrl_reward_funcs(length_channel: bool = False) -> list[Callable]:
    """[format, correctness(, length)] reward functions with rewards.toolrl's semantics (the ToolRL scorer's)."""

    def channel_func(channel: str) -> Callable:
        def reward(completions, ground_truth, **kwargs) -> list[float]:
            return [toolrl.score_channels(completion_text(completion), truth, (channel,))[channel]
                    for completion, truth in zip(completions, ground_truth, strict=True)]
        reward.__name__ = reward.__qualname__ = channel
        reward.__doc__ = f"ToolRL {channel} channel (rewards.toolrl.score_channels)"
        return reward
    return [channel_func(channel) for channel in toolrl.channel_names(length_channel)]


def toolrl_reward_ranges(length_channel: bool = False) -> dict[str, list[float]]:
    """{function name: [min, max]} of `toolrl_reward_funcs`, as the ToolRL reward declares them
    (rewards.task_rewards), for `DaraGRPOConfig.reward_ranges`."""
    return {channel: list(ToolRLReward.RANGES[channel]) for channel in toolrl.channel_names(length_channel)}


def toolrl_dataset(parquet: str | os.PathLike):
    """A TRL prompt dataset (`prompt` chat messages, `ground_truth`) from a verl ToolRL parquet file."""
    from datasets import Dataset
    rows = Dataset.from_parquet(str(parquet))
    return Dataset.from_dict({"prompt": rows["prompt"],
                              "ground_truth": [row["ground_truth"] for row in rows["reward_model"]]})
