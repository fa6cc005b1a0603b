"""ToolRL reward channels with the original scorer's values (``verl.utils.reward_score.rlla``, compared case by case
in the tests; docs/rewards.md "Rules as implemented"): format in {0, 1}, correctness in [-3, 3], length in {0, 1}
(three-reward study), in linear time: tags are located with str.find / str.count, not the scorer's lazy regex
(quadratic on repeated tags). The protocol lives in ``tasks.toolrl``."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from tasks import toolrl as protocol

FORMAT_CHANNEL, CORRECTNESS_CHANNEL, LENGTH_CHANNEL = "format", "correctness", "length"
MIN_CORRECTNESS, MAX_CORRECTNESS = -3.0, 3.0
THINK_WORD_LIMIT = 16


def format_reward(text: str, ground_truth: str) -> float:
    """1.0 when ``text`` (the stripped assistant text) has the format the ground truth requires, else 0.0."""
    return 1.0 if protocol.matches_format(text, ground_truth) else 0.0


def think_length_reward(text: str, word_limit: int = THINK_WORD_LIMIT) -> float:
    """1.0 if the last think span has at most ``word_limit`` words; 0.0 when longer or a tag is missing."""
    thought = protocol.last_think_span(text)
    return 1.0 if thought is not None and len(thought.split()) <= word_limit else 0.0


def match_score(reference: Sequence[Any], predicted: Sequence[Any]) -> float:
    """1 if the lists are equal, 0 if either is empty, else multiset |A n B| / (|A| + |B| - |A n B|)
    (items compare with Python equality; an unhashable item raises, as in the scorer)."""
    if list(reference) == list(predicted):
        return 1.0
    if not reference or not predicted:
        return 0.0
    overlap = sum((Counter(reference) & Counter(predicted)).values())
    return overlap / (len(reference) + len(predicted) - overlap)


def call_list_reward(reference_calls: list, predicted_calls: list) -> float:
    """Correctness in [-3, 3] of parsed call lists; raises where the scorer raises (the caller scores -3).

    +3 for equal lists. Else score = match(names) + for each ground-truth call, in order, the first best unused
    predicted call of the same name (only a positive value counts), valued match(param keys) + number of equal
    values; reward = 6 * score / S_max - 3, S_max = 1 + sum of (1 + number of params). A predicted call's
    "parameters" is read only when its name equals the ground-truth call's."""
    if reference_calls == predicted_calls:
        return MAX_CORRECTNESS
    score = match_score([c["name"] for c in reference_calls], [c["name"] for c in predicted_calls])
    max_score = 1.0
    used: set[int] = set()
    for reference in reference_calls:
        name, reference_params = reference["name"], reference["parameters"]
        max_score += 1.0 + len(reference_params)
        best_index, best_value = -1, 0.0
        for index, predicted in enumerate(predicted_calls):
            if index in used or predicted["name"] != name:
                continue
            predicted_params = predicted["parameters"]
            value = match_score(list(reference_params.keys()), list(predicted_params.keys()))
            value += sum(1.0 for key, expected in reference_params.items()
                         if key in predicted_params and predicted_params[key] == expected)
            if value > best_value:
                best_index, best_value = index, value
        if best_index >= 0:
            used.add(best_index)
            score += best_value
    return (MAX_CORRECTNESS - MIN_CORRECTNESS) * score / max_score + MIN_CORRECTNESS


def reference_calls(ground_truth: str) -> list:
    """The ground truth's calls (first block, one JSON value per line; [] without a "<tool_call>"). A line that is
    not JSON raises ValueError naming the ground truth: bad data, which the scorer does not survive either."""
    block = protocol.first_call_block(ground_truth, require_close=False)
    if block is None:
        return []
    calls = []
    for line in protocol.block_lines(block):
        try:
            calls.append(json.loads(line))
        except (ValueError, RecursionError) as error:
            raise ValueError(f"ground truth has a tool_call line that is not JSON ({error}): {ground_truth[:200]!r}") from None
    return calls


def correctness_reward(text: str, ground_truth: str) -> float:
    """Correctness channel in [-3, 3] of ``text`` (the stripped assistant text); 0 when the ground truth
    has no tool call. Model output never raises: whatever the scorer would fail on scores -3."""
    if protocol.TOOL_CALL_OPEN not in ground_truth:
        return 0.0
    expected = reference_calls(ground_truth)
    block = protocol.first_call_block(text)
    if block is None:
        return MIN_CORRECTNESS
    try:
        predicted = [json.loads(line) for line in protocol.block_lines(block)]
        return call_list_reward(expected, predicted)
    except Exception:  # the scorer's rule: anything raising while scoring gives the minimum
        return MIN_CORRECTNESS


def channel_names(length_channel: bool = False) -> tuple[str, ...]:
    """The channels `score` returns, in order."""
    return (FORMAT_CHANNEL, CORRECTNESS_CHANNEL, LENGTH_CHANNEL)[: 3 if length_channel else 2]


def score(response: str, ground_truth: str, *, length_channel: bool = False) -> dict[str, float]:
    """{"format", "correctness"[, "length"]} of one decoded response against its ground truth. The
    response is reduced to the scorer's assistant text first (tasks.toolrl.assistant_text)."""
    return score_channels(response, ground_truth, channel_names(length_channel))


def score_channels(response: str, ground_truth: str, channels: Sequence[str]) -> dict[str, float]:
    """`score`'s values of `channels` only (a caller with one function per channel, as TRL's reward
    functions are, scores each channel once rather than all of them in every function)."""
    if not isinstance(response, str) or not isinstance(ground_truth, str):
        raise TypeError(f"response and ground_truth must be str, got {type(response).__name__}, "
                        f"{type(ground_truth).__name__}")
    text = protocol.assistant_text(response)
    return {channel: _CHANNEL_REWARDS[channel](text, ground_truth) for channel in channels}


_CHANNEL_REWARDS = {FORMAT_CHANNEL: format_reward, CORRECTNESS_CHANNEL: correctness_reward,
                    LENGTH_CHANNEL: lambda text, ground_truth: think_length_reward(text)}


def fallback_score(*, length_channel: bool = False) -> dict[str, float]:
    """The channel minimums: what an item scores when its scoring timed out or failed."""
    lows = (0.0, MIN_CORRECTNESS, 0.0)
    return dict(zip(channel_names(length_channel), lows, strict=False))
