"""The scorers of the project's tasks (`tasks.registry.TaskSpec.reward`). A `TaskReward` declares its channels with
their ranges BY NAME (`channels(options)`: the one place a range is written; `algorithm.dara.reward_ranges` derives
from it), scores one item and gives the fallback of a timed-out or failed one; `options`: a `RewardOptions`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from rewards import math as math_reward
from rewards import toolrl
from tasks import math as math_task

Ranges = dict[str, tuple[float, float]]


class TaskReward(Protocol):
    def channels(self, options) -> Ranges: ...

    def score(self, solution_str: str, ground_truth: Any, response_tokens: int | None, options) -> dict[str, float]: ...

    def fallback(self, response_tokens: int | None, options) -> dict[str, float]: ...


class ToolRLReward:
    """ToolRL's format and correctness (+ the think-length channel of the three-reward study)."""

    RANGES: Ranges = {toolrl.FORMAT_CHANNEL: (0.0, 1.0),
                      toolrl.CORRECTNESS_CHANNEL: (toolrl.MIN_CORRECTNESS, toolrl.MAX_CORRECTNESS),
                      toolrl.LENGTH_CHANNEL: (0.0, 1.0)}

    def channels(self, options) -> Ranges:
        return {name: self.RANGES[name] for name in toolrl.channel_names(options.toolrl_length_channel)}

    def score(self, solution_str, ground_truth, response_tokens, options) -> dict[str, float]:
        if isinstance(ground_truth, Mapping):  # a whole reward_model entry
            ground_truth = ground_truth["ground_truth"]
        if not isinstance(ground_truth, str):
            raise TypeError(f"a ToolRL ground truth must be a string, got {type(ground_truth).__name__}")
        return toolrl.score(solution_str, ground_truth, length_channel=options.toolrl_length_channel)

    def fallback(self, response_tokens, options) -> dict[str, float]:
        return toolrl.fallback_score(length_channel=options.toolrl_length_channel)


class MathReward:
    """Correctness by verl's Hendrycks grader and the length budget (DeepScaleR setup)."""

    RANGES: Ranges = {math_task.CORRECTNESS_CHANNEL: (0.0, 1.0), math_task.LENGTH_CHANNEL: (0.0, 1.0)}

    def channels(self, options) -> Ranges:
        return {name: self.RANGES[name] for name in math_task.CHANNELS}

    def score(self, solution_str, ground_truth, response_tokens, options) -> dict[str, float]:
        if response_tokens is None:
            raise ValueError("the math length reward needs the rollout's response token count in "
                             "extra_info['response_tokens'] (the dara_parallel reward manager passes it; verl's "
                             "naive manager does not)")
        scorer = math_reward.score_conditioned if options.math_length_conditioned else math_reward.score
        return scorer(solution_str, ground_truth, response_tokens, options.max_response_tokens,
                      grader=options.math_grader)

    def fallback(self, response_tokens, options) -> dict[str, float]:
        return math_reward.fallback_score(response_tokens, options.max_response_tokens,
                                          conditioned=options.math_length_conditioned)


TOOLRL = ToolRLReward()
MATH = MathReward()
