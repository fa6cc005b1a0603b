"""ToolRL reward channels: format, correctness and the optional think-length channel.

Implements the "Tool calling (ToolRL setup)" rules of EXPERIMENTS.md:

- format in {0, 1}: the required pattern is chosen by the ground truth (tool call only, response only,
  both, neither); DOTALL match on the stripped assistant text, and every required tag appears exactly once.
- correctness in [-3, 3]: 0 when the ground truth has no tool call; -3 on any parse failure of the
  predicted block; +3 for identical call lists; else 6 * score / S_max - 3 with the name / key matching
  score and S_max = 1 + sum over ground-truth calls of (1 + number of parameters).
- length in {0, 1} (three-reward study): 1 if the think block has at most 16 whitespace-separated words.

Values compare with strict equality: equal JSON values of the same JSON type (1 != 1.0, 1 != true,
"1" != 1); dictionaries compare regardless of key order.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

FORMAT_CHANNEL = "format"
CORRECTNESS_CHANNEL = "correctness"
LENGTH_CHANNEL = "length"

MAX_CORRECTNESS = 3.0
MIN_CORRECTNESS = -3.0
THINK_WORD_LIMIT = 16

# Stripped (repeatedly) from the end of the assistant text before scoring.
END_OF_TURN_MARKERS = ("<|im_end|>", "<|endoftext|>")

_THINK = r"<think>.*?</think>"
_TOOL_CALL_BLOCK = r"<tool_call>\n.*?\n</tool_call>"
_RESPONSE_BLOCK = r"<response>.*?</response>"

# Required pattern per ground-truth kind, keyed by (has tool call, has response).
_FORMAT_PATTERNS = {
    (True, False): re.compile(rf"^{_THINK}\n{_TOOL_CALL_BLOCK}$", re.DOTALL),
    (False, True): re.compile(rf"^{_THINK}\n{_RESPONSE_BLOCK}$", re.DOTALL),
    (True, True): re.compile(rf"^{_THINK}\n{_TOOL_CALL_BLOCK}\n{_RESPONSE_BLOCK}$", re.DOTALL),
    (False, False): re.compile(rf"^{_THINK}$", re.DOTALL),
}
_THINK_TAGS = ("<think>", "</think>")
_TOOL_CALL_TAGS = ("<tool_call>", "</tool_call>")
_RESPONSE_TAGS = ("<response>", "</response>")


class MalformedToolCalls(ValueError):
    """A tool_call block that is missing or does not hold one {"name", "parameters": {...}} per line."""


def strip_assistant_text(text: str) -> str:
    """Remove surrounding whitespace and any trailing end-of-turn markers (repeated ones too)."""
    stripped = text.strip()
    while True:
        for marker in END_OF_TURN_MARKERS:
            if stripped.endswith(marker):
                stripped = stripped[: -len(marker)].rstrip()
                break
        else:
            return stripped


def after_think(text: str) -> str:
    """The text after the first </think> (all of it when there is none): where the tool_call and
    response blocks belong. A think block that merely mentions "<tool_call>" or "<response>" must not
    decide the ground-truth kind or be parsed as the call block."""
    return text.split("</think>", 1)[1] if "</think>" in text else text


def ground_truth_kind(ground_truth: str) -> tuple[bool, bool]:
    """(has tool call, has response) of a ground-truth assistant text."""
    answer = after_think(ground_truth)
    return "<tool_call>" in answer, "<response>" in answer


def format_reward(response: str, ground_truth: str) -> float:
    """1.0 when the stripped response matches the pattern the ground truth requires, with each
    required tag exactly once; else 0.0."""
    text = strip_assistant_text(response)
    has_tool_call, has_response = ground_truth_kind(ground_truth)
    required_tags = list(_THINK_TAGS)
    if has_tool_call:
        required_tags += _TOOL_CALL_TAGS
    if has_response:
        required_tags += _RESPONSE_TAGS
    if any(text.count(tag) != 1 for tag in required_tags):
        return 0.0
    return 1.0 if _FORMAT_PATTERNS[(has_tool_call, has_response)].match(text) else 0.0


def think_length_reward(response: str, word_limit: int = THINK_WORD_LIMIT) -> float:
    """1.0 if the (first) think block has at most `word_limit` whitespace-separated words; 0.0 when
    it is longer or there is no closed think block."""
    thought = first_block(strip_assistant_text(response), "<think>", "</think>")
    if thought is None:
        return 0.0
    return 1.0 if len(thought.split()) <= word_limit else 0.0


def first_block(text: str, opening: str, closing: str) -> str | None:
    """The text between the first `opening` and the first `closing` after it (what a lazy
    `opening(.*?)closing` search finds), in linear time: a regex search rescans the rest of the text
    for every unclosed opening tag, and degenerate outputs repeat tags thousands of times."""
    start = text.find(opening)
    if start < 0:
        return None
    end = text.find(closing, start + len(opening))
    return None if end < 0 else text[start + len(opening) : end]


def parse_tool_calls(text: str) -> list[dict[str, Any]]:
    """The calls of the first <tool_call> block after the think block: one JSON object per line, each
    with a "name" and an object "parameters". Raises MalformedToolCalls naming the problem."""
    block = first_block(after_think(text), "<tool_call>", "</tool_call>")
    if block is None:
        raise MalformedToolCalls("no <tool_call> ... </tool_call> block")
    calls = []
    for line_number, line in enumerate(block.strip().split("\n"), start=1):
        try:
            call = json.loads(line)
        except (ValueError, RecursionError) as error:
            raise MalformedToolCalls(f"line {line_number} is not JSON: {error}") from None
        if not isinstance(call, dict) or "name" not in call:
            raise MalformedToolCalls(f"line {line_number} has no 'name'")
        if not isinstance(call.get("parameters"), dict):
            raise MalformedToolCalls(f"line {line_number}: 'parameters' is not an object")
        calls.append(call)
    return calls


def canonical(value: Any) -> str:
    """A string that two JSON values share exactly when they are strictly equal (same JSON types,
    same values, object keys in any order)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=True)


def match_score(reference: Sequence[Any], predicted: Sequence[Any]) -> float:
    """match(A, B) of EXPERIMENTS.md: 1 if equal, 0 if either is empty, else the multiset
    |A n B| / (|A| + |B| - |A n B|)."""
    reference_keys = [canonical(item) for item in reference]
    predicted_keys = [canonical(item) for item in predicted]
    if reference_keys == predicted_keys:
        return 1.0
    if not reference_keys or not predicted_keys:
        return 0.0
    overlap = sum((Counter(reference_keys) & Counter(predicted_keys)).values())
    return overlap / (len(reference_keys) + len(predicted_keys) - overlap)


def call_list_score(reference_calls: list[dict], predicted_calls: list[dict]) -> float:
    """Correctness in [-3, 3] of a parsed predicted call list against the ground-truth calls.

    score = match(names) + for each ground-truth call, in order, the best not-yet-used predicted call of
    the same name valued match(param keys) + number of strictly equal parameter values (the first best
    one is taken, and only when its value is positive, as in ToolRL's reference code);
    reward = 6 * score / S_max - 3, S_max = 1 + sum over ground-truth calls of (1 + number of params).
    """
    if canonical(reference_calls) == canonical(predicted_calls):
        return MAX_CORRECTNESS
    score = match_score([c["name"] for c in reference_calls], [c["name"] for c in predicted_calls])
    max_score = 1.0
    used: set[int] = set()
    for reference in reference_calls:
        reference_params = reference["parameters"]
        max_score += 1.0 + len(reference_params)
        best_index, best_value = -1, 0.0
        for index, predicted in enumerate(predicted_calls):
            if index in used or canonical(predicted["name"]) != canonical(reference["name"]):
                continue
            predicted_params = predicted["parameters"]
            value = match_score(list(reference_params), list(predicted_params))
            value += sum(
                1.0
                for key, expected in reference_params.items()
                if key in predicted_params and canonical(predicted_params[key]) == canonical(expected)
            )
            if value > best_value:
                best_index, best_value = index, value
        if best_index >= 0:
            used.add(best_index)
            score += best_value
    return (MAX_CORRECTNESS - MIN_CORRECTNESS) * score / max_score + MIN_CORRECTNESS


def correctness_reward(response: str, ground_truth: str) -> float:
    """Correctness channel in [-3, 3]; 0 when the ground truth has no tool call.

    A ground truth whose own tool_call block is malformed raises ValueError (a data error); a malformed
    or missing predicted block scores -3 (model output never raises)."""
    if not ground_truth_kind(ground_truth)[0]:
        return 0.0
    try:
        reference_calls = parse_tool_calls(ground_truth)
    except MalformedToolCalls as error:
        raise ValueError(
            f"ground truth has a malformed tool_call block ({error}): {ground_truth[:200]!r}"
        ) from None
    try:
        predicted_calls = parse_tool_calls(strip_assistant_text(response))
    except MalformedToolCalls:
        return MIN_CORRECTNESS
    return call_list_score(reference_calls, predicted_calls)


def channel_names(length_channel: bool = False) -> tuple[str, ...]:
    """The channels `score` returns, in order."""
    base = (FORMAT_CHANNEL, CORRECTNESS_CHANNEL)
    return (*base, LENGTH_CHANNEL) if length_channel else base


def score(response: str, ground_truth: str, *, length_channel: bool = False) -> dict[str, float]:
    """{"format", "correctness"[, "length"]} of one assistant response against its ground truth."""
    if not isinstance(response, str) or not isinstance(ground_truth, str):
        raise TypeError(
            f"response and ground_truth must be str, got {type(response).__name__}, {type(ground_truth).__name__}"
        )
    channels = {
        FORMAT_CHANNEL: format_reward(response, ground_truth),
        CORRECTNESS_CHANNEL: correctness_reward(response, ground_truth),
    }
    if length_channel:
        channels[LENGTH_CHANNEL] = think_length_reward(response)
    return channels


def fallback_score(*, length_channel: bool = False) -> dict[str, float]:
    """The channel minimums: what an item scores when its scoring timed out or failed."""
    channels = {FORMAT_CHANNEL: 0.0, CORRECTNESS_CHANNEL: MIN_CORRECTNESS}
    if length_channel:
        channels[LENGTH_CHANNEL] = 0.0
    return channels
