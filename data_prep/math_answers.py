"""Math answers in the benchmarks' native forms -> strings the math reward accepts.

Native forms seen in the sources: LaTeX strings with or without ``$...$`` and trailing newlines (MATH-500,
AIME, Minerva), floats (AMC: 142.0), and lists of alternatives (Minerva lists equivalent or accepted forms;
OlympiadBench wraps its answer in a one-element list). A row's ground truth is the first alternative; all
alternatives are kept in ``extra_info["answer_alternatives"]``.
"""

from __future__ import annotations

import math
import numbers


def _unwrap_dollars(text: str) -> str:
    """ "$a$" -> "a"; OlympiadBench's "$a$,$b$" -> "a, b" (only when the text is nothing but math segments)."""
    if text.count("$") >= 2 and text.startswith("$") and text.endswith("$") and text.count("$") % 2 == 0:
        segments = [segment.strip() for segment in text.split("$")]
        maths, separators = segments[1::2], segments[2:-1:2]
        if all(separator in ("", ",") for separator in separators) and all(maths):
            return ", ".join(maths)
    return text


def answer_alternatives(value) -> list[str]:
    """Every accepted answer as a LaTeX string; ValueError for a missing, empty or non-answer value."""
    if value is None or isinstance(value, bool):
        raise ValueError(f"not a math answer: {value!r}")
    if isinstance(value, numbers.Integral):
        return [str(int(value))]
    if isinstance(value, numbers.Real):
        real = float(value)
        if not math.isfinite(real):
            raise ValueError(f"not a finite answer: {value!r}")
        return [str(int(real)) if real.is_integer() else repr(real)]
    if isinstance(value, str):
        text = _unwrap_dollars(value.strip())
        if not text:
            raise ValueError("empty answer")
        return [text]
    if isinstance(value, list | tuple) or hasattr(value, "tolist"):
        items = value.tolist() if hasattr(value, "tolist") else value
        alternatives = [text for item in items for text in answer_alternatives(item)]
        if not alternatives:
            raise ValueError("empty list of answers")
        return list(dict.fromkeys(alternatives))
    raise ValueError(f"unsupported answer type {type(value).__name__}: {value!r}")


def normalise_answer(value) -> str:
    """The ground-truth string of a row: the first accepted alternative."""
    return answer_alternatives(value)[0]
