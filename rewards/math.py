"""Math reward channels (docs/rewards.md "Math"): correctness in {0, 1} by a grader and length in {0, 1}.

- "hendrycks" (default, the paper's reward): verl's own Hendrycks MATH grader on the whole text against the
  answer's one graded string (tasks.math_answers.reference_answer);
- "math_verify" (an option): the last complete \\boxed{...} after the last </think>, equivalent to any listed
  form of the reference by math-verify, whose own (signal-based) timeouts are disabled: the hard per-item
  limit is a killed worker (rewards.pool); answers needing more than ``max_answer_digits`` exact digits are
  scored wrong without evaluation;
- length: 1 if the rollout's response token count is at most ``max_tokens``; `score_conditioned` counts it
  only when the answer is correct.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import math as _math
import numbers
import re
import sys
from pathlib import Path
from typing import Any

import sympy
from math_verify import parse, verify

from tasks import math as task
from tasks.math_answers import answer_alternatives, reference_answer

logger = logging.getLogger(__name__)

CORRECTNESS_CHANNEL = task.CORRECTNESS_CHANNEL
LENGTH_CHANNEL = task.LENGTH_CHANNEL
DEFAULT_MAX_TOKENS = task.LENGTH_LIMIT
DEFAULT_GRADER = task.DEFAULT_GRADER
# No benchmark answer needs more digits than this; see `exact_digits_bound`.
DEFAULT_MAX_ANSWER_DIGITS = 10_000
# The longest benchmark answer has 204 characters; a boxed text 10x longer is not an answer.
MAX_ANSWER_CHARS = 2_000

_BOXED_COMMANDS = ("\\boxed", "\\fbox")
_HUGE = float("inf")

# math-verify warns once per process that its timeout is disabled: the time limit is ours (see above).
logging.getLogger("math_verify.parser").setLevel(logging.ERROR)
logging.getLogger("math_verify.grader").setLevel(logging.ERROR)


# ----------------------------------------------------------------------------- answer extraction
def final_answer_region(response: str) -> str | None:
    """The part of the response that may hold the final answer: after the last </think>; None when a
    <think> block is opened and never closed (the model never produced an answer)."""
    if "</think>" in response:
        return response.rsplit("</think>", 1)[1]
    if "<think>" in response:
        return None
    return response


_BRACE = re.compile(r"[{}]")
_BARE_ARGUMENT = re.compile(r"[^\s$]+")


def _closing_braces(text: str) -> dict[int, int]:
    """The index of the matching "}" of every "{" that closes: one pass over the braces, so a response
    with thousands of unclosed boxes costs linear time, not a scan to the end per box."""
    open_indices: list[int] = []
    closing: dict[int, int] = {}
    for match in _BRACE.finditer(text):
        if match.group() == "{":
            open_indices.append(match.start())
        elif open_indices:
            closing[open_indices.pop()] = match.start()
    return closing


def _boxed_at(text: str, start: int, command: str, closing: dict[int, int]) -> str | None:
    """Argument of the \\boxed command starting at `start`: a brace group, or the `\\boxed 5` form."""
    index = start + len(command)
    if index < len(text) and text[index].isalpha():
        return None  # a longer command name, e.g. \boxedfoo
    while index < len(text) and text[index] == " ":
        index += 1
    if index >= len(text):
        return None
    if text[index] == "{":
        end = closing.get(index)
        return None if end is None else text[index + 1 : end]
    if index > start + len(command):  # "\boxed 5": up to the next space or $
        bare = _BARE_ARGUMENT.match(text, index)
        return bare.group() if bare else None
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last complete \\boxed{...} (or \\fbox{...}) in text; None if there is none."""
    candidates = []
    for command in _BOXED_COMMANDS:
        position = text.rfind(command)
        while position >= 0:
            candidates.append((position, command))
            position = text.rfind(command, 0, position)
    if not candidates:
        return None
    closing = _closing_braces(text)
    for position, command in sorted(candidates, reverse=True):
        content = _boxed_at(text, position, command, closing)
        if content is not None:
            return content
    return None


def extract_answer(response: str) -> str | None:
    """The model's final answer text (the last boxed content after </think>), or None."""
    region = final_answer_region(response)
    if region is None:
        return None
    answer = last_boxed(region)
    if answer is None or not answer.strip():
        return None
    return answer.strip()


# ----------------------------------------------------------------------------- evaluation guard
def _log10_abs_int(value: int) -> float:
    value = abs(int(value))
    return _math.log10(value) if value > 1 else 0.0


def _value_log10_bound(expr: Any) -> float:
    """Upper bound of log10 |value| of a numeric sympy expression (0 for symbols and bounded functions)."""
    if isinstance(expr, sympy.Integer):
        return _log10_abs_int(expr.p)
    if isinstance(expr, sympy.Rational):
        return max(_log10_abs_int(expr.p) - _log10_abs_int(expr.q), 0.0)
    if isinstance(expr, sympy.Float):
        return max(float(sympy.log(abs(expr), 10)) if expr != 0 else 0.0, 0.0)
    if isinstance(expr, sympy.Pow):
        base_bound, exponent_bound = _value_log10_bound(expr.base), _value_log10_bound(expr.exp)
        if base_bound == 0.0:
            return 0.0
        return _HUGE if exponent_bound > 300 else 10.0**exponent_bound * base_bound
    if isinstance(expr, sympy.Mul):
        return sum(_value_log10_bound(arg) for arg in expr.args)
    if isinstance(expr, sympy.Add):
        return max(_value_log10_bound(arg) for arg in expr.args) + _math.log10(len(expr.args))
    if isinstance(expr, sympy.factorial):
        argument_bound = _value_log10_bound(expr.args[0])
        return _HUGE if argument_bound > 300 else 10.0**argument_bound * max(argument_bound, 1.0)
    args = getattr(expr, "args", ())
    return max((_value_log10_bound(arg) for arg in args if isinstance(arg, sympy.Basic)), default=1.0)


def exact_digits_bound(expr: Any) -> float:
    """Upper bound of the number of decimal digits that evaluating `expr` exactly can need.

    Powers and factorials of numbers are what make sympy and math-verify spin (9^{9^{9^9}} holds the
    interpreter lock for hours); a power b^e needs about |e| * digits(b) digits, whatever the sign of e."""
    if isinstance(expr, sympy.MatrixBase):
        return sum(exact_digits_bound(item) for item in expr)
    if not isinstance(expr, sympy.Basic):
        return 0.0
    if isinstance(expr, sympy.Rational):
        return _log10_abs_int(expr.p) + _log10_abs_int(expr.q) + 1.0
    if isinstance(expr, sympy.Pow):
        base, exponent = expr.base, expr.exp
        if exponent.free_symbols or base.free_symbols:
            return exact_digits_bound(base) + exact_digits_bound(exponent)
        # digits of b^e for b = p/q: |e| * (log10 |p| + log10 q)
        if isinstance(base, sympy.Rational):
            base_size = _log10_abs_int(base.p) + _log10_abs_int(base.q)
        else:
            base_size = max(exact_digits_bound(base), 1.0)
        exponent_bound = _value_log10_bound(exponent)
        if exponent_bound > 300:
            return _HUGE if base_size > 0 else exact_digits_bound(exponent)
        return 10.0**exponent_bound * base_size + exact_digits_bound(exponent)
    if isinstance(expr, sympy.factorial):
        return _value_log10_bound(expr)
    return sum(exact_digits_bound(arg) for arg in expr.args)


def is_oversized(parsed: list[Any], max_answer_digits: float | None) -> bool:
    """True when some parsed expression would need more than `max_answer_digits` digits."""
    if max_answer_digits is None:
        return False
    return any(exact_digits_bound(item) > max_answer_digits for item in parsed)


# ----------------------------------------------------------------------------- verification
def _parse_boxed(latex: str) -> list[Any]:
    # parsing_timeout=None: see the module docstring (the hard limit is a killed worker process).
    return parse(f"\\boxed{{{latex}}}", parsing_timeout=None)


def answer_is_correct(
    predicted: str | None, answer: Any, *, max_answer_digits: float | None = DEFAULT_MAX_ANSWER_DIGITS
) -> bool:
    """True if the predicted answer text is equivalent to any alternative of the reference answer."""
    if predicted is None or len(predicted) > MAX_ANSWER_CHARS:
        return False
    predicted_parsed = _parse_boxed(predicted)
    if not predicted_parsed:
        return False
    if is_oversized(predicted_parsed, max_answer_digits):
        logger.info("answer needs more than %s digits, scored wrong: %.80s", max_answer_digits, predicted)
        return False
    for reference in answer_alternatives(answer):
        reference_parsed = _parse_boxed(reference)
        if reference_parsed and verify(reference_parsed, predicted_parsed, timeout_seconds=None):
            return True
    return False


def length_reward(response_tokens: int, max_tokens: int = DEFAULT_MAX_TOKENS) -> float:
    """1.0 if the response has at most `max_tokens` tokens."""
    if (
        isinstance(response_tokens, bool)
        or not isinstance(response_tokens, numbers.Integral)
        or response_tokens < 0
    ):
        raise ValueError(f"response_tokens must be a non-negative integer, got {response_tokens!r}")
    return 1.0 if int(response_tokens) <= max_tokens else 0.0


VERL_GRADER_MODULE = "verl.utils.reward_score.math_reward"


@functools.cache
def verl_hendrycks_grader():
    """verl's own `math_reward` module (verl 0.9.1), the grader the authors trained with.

    Importing it through the `verl` package costs seconds (verl's __init__ pulls in Ray and torch), which
    every reward worker and evaluation process would pay; the module itself imports nothing, so unless
    verl is already loaded it is loaded standalone from verl's installed file: the same code, not a copy."""
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


def hendrycks_correct(response: str, answer: Any) -> bool:
    """verl's Hendrycks MATH grader on the whole response against the answer's first accepted form."""
    reference = reference_answer(answer)
    return verl_hendrycks_grader().compute_score(response, reference) >= 1.0


def correctness(
    response: str,
    answer: Any,
    *,
    grader: str = DEFAULT_GRADER,
    max_answer_digits: float | None = DEFAULT_MAX_ANSWER_DIGITS,
) -> float:
    """1.0 when `grader` accepts the response's final answer, else 0.0."""
    if task.check_grader(grader) == "hendrycks":
        return 1.0 if hendrycks_correct(response, answer) else 0.0
    correct = answer_is_correct(extract_answer(response), answer, max_answer_digits=max_answer_digits)
    return 1.0 if correct else 0.0


def score(
    response: str,
    answer: Any,
    response_tokens: int,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    *,
    grader: str = DEFAULT_GRADER,
    max_answer_digits: float | None = DEFAULT_MAX_ANSWER_DIGITS,
) -> dict[str, float]:
    """{"correctness", "length"} of one response (no time limit here: see the module docstring)."""
    if not isinstance(response, str):
        raise TypeError(f"response must be str, got {type(response).__name__}")
    length = length_reward(response_tokens, max_tokens)
    correct = correctness(response, answer, grader=grader, max_answer_digits=max_answer_digits)
    return {CORRECTNESS_CHANNEL: correct, LENGTH_CHANNEL: length}


def score_conditioned(
    response: str,
    answer: Any,
    response_tokens: int,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    *,
    grader: str = DEFAULT_GRADER,
    max_answer_digits: float | None = DEFAULT_MAX_ANSWER_DIGITS,
) -> dict[str, float]:
    """Like `score`, but the length reward counts only when the answer is correct."""
    channels = score(response, answer, response_tokens, max_tokens, grader=grader,
                     max_answer_digits=max_answer_digits)
    channels[LENGTH_CHANNEL] *= channels[CORRECTNESS_CHANNEL]
    return channels


def clear_answer_caches() -> None:
    """Empty this process's answer caches (math-verify's parse caches and sympy's cache); benchmarks
    call it so that a repeated pass is not flattered by answers it has seen."""
    from math_verify import parser
    from sympy.core.cache import clear_cache

    parser.parse_latex_cached.cache_clear()
    parser.parse_expr_cached.cache_clear()
    clear_cache()


def channel_names() -> tuple[str, ...]:
    return task.CHANNELS


def fallback_score(response_tokens: int, max_tokens: int = DEFAULT_MAX_TOKENS, *, conditioned: bool = False):
    """Score of an item whose verification timed out or failed: wrong, and the length channel from the
    token count (which needs no verification); 0 under the conditioned variant."""
    length = 0.0 if conditioned else length_reward(response_tokens, max_tokens)
    return {CORRECTNESS_CHANNEL: 0.0, LENGTH_CHANNEL: length}
