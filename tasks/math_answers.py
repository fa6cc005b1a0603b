"""Math ground truths: a benchmark's native answer -> the one string every grader compares against, by one rule
(``RULE``, the authors' ``unwrap_math``; docs/data.md "math_eval") shared by data prep, the math reward and the
evaluation. Unusable values raise ValueError: data prep drops such rows."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

MATH_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))  # the order each round tries them
MAX_UNWRAP_ROUNDS = 3
RULE = (
    "ground truth = the first listed answer; integral floats as integers; up to three rounds removing "
    "outer $$..$$, $..$, \\(..\\), \\[..\\] only when the inner text holds no such delimiter "
    "(the authors' unwrap_math: '$69$,$84$' stays as it is)"
)


def unwrap_math(text: str) -> str:
    """The stripped text without its outer math delimiters (the module's rule)."""
    text = text.strip()
    for _ in range(MAX_UNWRAP_ROUNDS):
        before = text
        for opening, closing in MATH_DELIMITERS:
            if len(text) > len(opening) + len(closing) and text.startswith(opening) and text.endswith(closing):
                inner = text[len(opening):len(text) - len(closing)].strip()
                if inner and opening not in inner and closing not in inner:
                    text = inner
        if text == before:
            break
    return text


def _as_items(value) -> list | None:
    """The items of a list-like answer (a list, or a numpy array read back from parquet); None otherwise."""
    if isinstance(value, list):
        return value
    if hasattr(value, "tolist") and not isinstance(value, numbers.Number):
        items = value.tolist()
        return items if isinstance(items, list) else None
    return None


def reference_answer(value) -> str:
    """The one answer string graded against (the first listed answer for a list)."""
    if value is None or isinstance(value, bool | Mapping):
        raise ValueError(f"not a math answer: {value!r}")
    items = _as_items(value)
    if items is not None:
        if not items:
            raise ValueError("empty list of answers")
        return reference_answer(items[0])
    if isinstance(value, numbers.Number) and hasattr(value, "item"):  # a numpy scalar: its Python value
        value = value.item()
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"not a finite answer: {value!r}")
        return str(int(value)) if value.is_integer() else str(value)
    if isinstance(value, numbers.Number):
        return str(value)
    if isinstance(value, tuple):
        return "(" + ", ".join(reference_answer(item) for item in value) + ")"
    if isinstance(value, str) and unwrap_math(value):
        return unwrap_math(value)
    raise ValueError(f"not a math answer ({type(value).__name__}): {value!r}")


def answer_alternatives(value) -> list[str]:
    """Every listed answer under the same rule, duplicates dropped; the first is ``reference_answer``."""
    items = _as_items(value)
    if items is None:
        return [reference_answer(value)]
    if not items:
        raise ValueError("empty list of answers")
    return list(dict.fromkeys(reference_answer(item) for item in items))
