"""Math reward channels (docs/rewards.md "Math"): correctness in {0, 1} by verl's Hendrycks MATH grader on the
whole text against the answer's graded string (tasks.math_answers), length in {0, 1}: at most ``max_tokens``
response tokens; `score_conditioned` counts length only when the answer is correct."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import numbers
import sys
from pathlib import Path
from typing import Any

from tasks import math as task
from tasks.math_answers import reference_answer

CORRECTNESS_CHANNEL = task.CORRECTNESS_CHANNEL
LENGTH_CHANNEL = task.LENGTH_CHANNEL
DEFAULT_MAX_TOKENS = task.LENGTH_LIMIT
DEFAULT_GRADER = task.DEFAULT_GRADER
VERL_GRADER_MODULE = "verl.utils.reward_score.math_reward"


def length_reward(response_tokens: int, max_tokens: int = DEFAULT_MAX_TOKENS) -> float:
    """1.0 if the response has at most `max_tokens` tokens."""
    if isinstance(response_tokens, bool) or not isinstance(response_tokens, numbers.Integral) or response_tokens < 0:
        raise ValueError(f"response_tokens must be a non-negative integer, got {response_tokens!r}")
    return 1.0 if int(response_tokens) <= max_tokens else 0.0


@functools.cache
def verl_hendrycks_grader():
    """verl's own `math_reward` module (verl 0.9.1), the grader the authors trained with. It imports nothing,
    so unless verl is loaded it is loaded standalone from verl's installed file (the same code, not a copy):
    importing the `verl` package would cost every reward worker seconds (Ray, torch)."""
    if "verl" in sys.modules:
        return importlib.import_module(VERL_GRADER_MODULE)
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("verl is not installed: the Hendrycks grader is verl's math_reward module")
    path = Path(spec.submodule_search_locations[0]) / "utils" / "reward_score" / "math_reward.py"
    module_spec = importlib.util.spec_from_file_location("_verl_math_reward", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def correctness(response: str, answer: Any, *, grader: str = DEFAULT_GRADER) -> float:
    """1.0 when verl's Hendrycks grader accepts the response against the answer's first accepted form."""
    task.check_grader(grader)
    return 1.0 if verl_hendrycks_grader().compute_score(response, reference_answer(answer)) >= 1.0 else 0.0


def score(response: str, answer: Any, response_tokens: int, max_tokens: int = DEFAULT_MAX_TOKENS, *,
          grader: str = DEFAULT_GRADER) -> dict[str, float]:
    """{"correctness", "length"} of one response."""
    if not isinstance(response, str):
        raise TypeError(f"response must be str, got {type(response).__name__}")
    length = length_reward(response_tokens, max_tokens)
    return {CORRECTNESS_CHANNEL: correctness(response, answer, grader=grader), LENGTH_CHANNEL: length}


def score_conditioned(response: str, answer: Any, response_tokens: int, max_tokens: int = DEFAULT_MAX_TOKENS, *,
                      grader: str = DEFAULT_GRADER) -> dict[str, float]:
    """Like `score`, but the length reward counts only when the answer is correct."""
    channels = score(response, answer, response_tokens, max_tokens, grader=grader)
    channels[LENGTH_CHANNEL] *= channels[CORRECTNESS_CHANNEL]
    return channels


def fallback_score(response_tokens: int, max_tokens: int = DEFAULT_MAX_TOKENS, *, conditioned: bool = False):
    """Score of an item whose scoring timed out or failed: wrong, and the length channel from the token count
    (which needs no grading); 0 under the conditioned variant."""
    length = 0.0 if conditioned else length_reward(response_tokens, max_tokens)
    return {CORRECTNESS_CHANNEL: 0.0, LENGTH_CHANNEL: length}
