"""The scorers of the project's tasks, as the task registry names them (`tasks.registry.TaskSpec.reward`).

A `TaskReward` declares its channels with their ranges BY NAME (`channels(options)`: the one place a range is
written; `algorithm.dara.reward_ranges` is derived from it), scores one item (`score`) and says what an item
scores when its scoring timed out or failed (`fallback`). `rewards.verl_entry` finds the scorer of a row by
its data_source through the registry; `options` is a `rewards.verl_entry.RewardOptions`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from rewards import toolrl
from tasks import math as math_task

Ranges = dict[str, tuple[float, float]]


class TaskReward(Protocol):
    """in_process: scored where compute_score is called (cheap string work); else in the hard-time-limit pool."""

    in_process: bool

    def channels(self, options) -> Ranges: ...

    def score(self, solution_str: str, ground_truth: Any, response_tokens: int | None, options) -> dict[str, float]: ...

    def fallback(self, response_tokens: int | None, options) -> dict[str, float]: ...


class ToolRLReward:
    """ToolRL's format and correctness (+ the think-length channel of the three-reward study)."""

    in_process = True
    RANGES: Ranges = {toolrl.FORMAT_CHANNEL: (0.0, 1.0),
                      toolrl.CORRECTNESS_CHANNEL: (toolrl.MIN_CORRECTNESS, toolrl.MAX_CORRECTNESS),
                      toolrl.LENGTH_CHANNEL: (0.0, 1.0)}

    def channels(self, options) -> Ranges:
        return {name: self.RANGES[name] for name in toolrl.channel_names(options.toolrl_length_channel)}

    def score(self, solution_str, ground_truth, response_tokens, options) -> dict[str, float]:
        return toolrl.score(solution_str, _ground_truth_text(ground_truth),
                            length_channel=options.toolrl_length_channel)

    def fallback(self, response_tokens, options) -> dict[str, float]:
        return toolrl.fallback_score(length_channel=options.toolrl_length_channel)


class MathReward:
    """Correctness by a grader and the length budget (DeepScaleR setup); verification runs in the pool."""

    in_process = False
    RANGES: Ranges = {math_task.CORRECTNESS_CHANNEL: (0.0, 1.0), math_task.LENGTH_CHANNEL: (0.0, 1.0)}

    def channels(self, options) -> Ranges:
        return {name: self.RANGES[name] for name in math_task.CHANNELS}

    def score(self, solution_str, ground_truth, response_tokens, options) -> dict[str, float]:
        from rewards import math as math_reward

        scorer = math_reward.score_conditioned if options.math_length_conditioned else math_reward.score
        return scorer(solution_str, ground_truth, response_tokens, options.max_response_tokens,
                      grader=options.math_grader, max_answer_digits=options.max_answer_digits)

    def fallback(self, response_tokens, options) -> dict[str, float]:
        from rewards import math as math_reward

        return math_reward.fallback_score(response_tokens, options.max_response_tokens,
                                          conditioned=options.math_length_conditioned)


def _ground_truth_text(ground_truth: Any) -> str:
    if isinstance(ground_truth, Mapping):  # a whole reward_model entry
        ground_truth = ground_truth["ground_truth"]
    if not isinstance(ground_truth, str):
        raise TypeError(f"a ToolRL ground truth must be a string, got {type(ground_truth).__name__}")
    return ground_truth


TOOLRL = ToolRLReward()
MATH = MathReward()
