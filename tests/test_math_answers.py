"""The one math ground-truth rule (tasks.math_answers) against a plain reading of the authors' rules, and the
evaluation's numeric-equivalence fallback against a plain reading of their box pattern."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dara import SAMPLE_DATA
from data_prep import math_eval as math_eval_prep
from data_prep.common import FilterLog
from results.evaluation import math_eval
from rewards import math as math_reward
from tasks.math_answers import answer_alternatives, reference_answer, unwrap_math

BENCHMARKS = SAMPLE_DATA / "math_benchmarks"
FILES = {"aime24": "aime", "amc23": "amc", "math500": "math", "minerva": "minerva", "olympiad_bench": "olympiad_bench"}
DELIMITERS = [("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")]


def plain_unwrap(text: str) -> str:
    """The authors' rule read plainly: strip; then at most three rounds, each trying $$, $, \\(, \\[ in turn and
    removing one outer pair when the text is longer than the pair, starts and ends with it, and the stripped
    inside is non-empty and holds neither delimiter; stop after a round that removed nothing."""
    current = text.strip()
    for _round in range(3):
        removed = False
        for opening, closing in DELIMITERS:
            long_enough = len(current) > len(opening) + len(closing)
            if long_enough and current[: len(opening)] == opening and current[len(current) - len(closing):] == closing:
                inside = current[len(opening): len(current) - len(closing)].strip()
                if inside != "" and inside.find(opening) == -1 and inside.find(closing) == -1:
                    current, removed = inside, True
        if not removed:
            break
    return current


def plain_reference(value) -> str:
    """The authors' loader read plainly: a list's first item, an integral float as an int, str(), unwrap."""
    if isinstance(value, list):
        value = value[0]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return plain_unwrap(str(value))


def test_every_benchmark_answer_follows_the_authors_rule():
    answers = [(source, index, row["answer"]) for source, name in FILES.items()
               for index, row in enumerate(json.loads((BENCHMARKS / f"{name}.json").read_text()))]
    assert len(answers) == 1560
    for source, index, raw in answers:
        ours = reference_answer(raw)
        assert ours == plain_reference(raw), (source, index, raw)
        assert reference_answer(ours) == ours  # applied again (the reward re-reads the parquet's string)
        assert answer_alternatives(raw)[0] == ours
    kept = [(s, t) for s, _, raw in answers if "$" in (t := reference_answer(raw)).replace("\\$", "")]
    assert len(kept) == 21 and {s for s, _ in kept} == {"olympiad_bench"} and ("olympiad_bench", "$69$,$84$") in kept


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["$", "$$", "\\(", "\\)", "\\[", "\\]", "x", " ", ","]), max_size=12).map("".join))
@example("$69$,$84$")  # the inside holds "$": kept, never a bare "69, 84"
@example(" $\\frac{9}{32}$\n")
@example("$$")  # no longer than its two delimiters: kept
@example("$ $")
@example("\\[\\($x$\\)\\]")  # three rounds: \[ then \( then $
@example("$a$ or $b$")
def test_unwrap_equals_the_plain_reading(text):
    assert unwrap_math(text) == plain_unwrap(text)


@pytest.mark.parametrize("raw, truth", [
    (142.0, "142"), (7, "7"), (0.5, "0.5"), (np.float32(142.0), "142"), (np.int64(3), "3"),
    (Fraction(3, 4), "3/4"),  # str() of the number, as the authors' loader writes any non-float
    (["9.6\n", "10"], "9.6"), (np.array(["$12$", "12.0"], dtype=object), "12"),  # the first listed answer
    ((1, 2), "(1, 2)"), ("$$", "$$"), (["$a$", "$b$"], "a"),  # a tuple is one answer; "$$" is kept
])
def test_data_prep_reward_and_evaluation_read_an_answer_alike(raw, truth):
    assert reference_answer(raw) == truth
    rows = math_eval_prep.benchmark_rows("aime24", [{"problem": "p", "answer": raw}], "test", FilterLog(math_eval_prep.FILTERS))
    assert rows[0]["reward_model"]["ground_truth"] == truth
    assert math_eval._reference_answer(raw, "case") == truth
    assert math_reward.score(f"\\boxed{{{truth}}}", raw, 10)["correctness"] == 1.0


@pytest.mark.parametrize("value", [None, True, "", "   ", [], math.nan, math.inf, {"a": 1}, ["2", None]])
def test_unusable_answers_raise(value):
    with pytest.raises(ValueError):
        answer_alternatives(value)


# ------------------------------------------------------------------------------------------------ numeq
def plain_last_shallow_box(text: str) -> str | None:
    """The authors' BOXED pattern read plainly: a "\\boxed{" candidate may nest braces one level and matches at its
    closing "}" (the scan resumes after it); one that nests deeper or never closes fails and the scan moves on."""
    found, i, start = None, 0, "\\boxed{"
    while i < len(text):
        if not text.startswith(start, i):
            i += 1
            continue
        depth, j, end = 0, i + len(start), None
        while j < len(text):
            if text[j] == "{":
                depth += 1
                if depth > 1:
                    break
            elif text[j] == "}":
                if depth == 0:
                    end = j
                    break
                depth -= 1
            j += 1
        if end is None:
            i += 1
            continue
        found, i = text[i + len(start): end], end + 1
    return found


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(["\\boxed{", "{", "}", "1", "a", " "]), max_size=14))
def test_numeq_box_equals_the_plain_reading(pieces):
    text = "".join(pieces)
    assert math_eval.numeq_boxed(text) == plain_last_shallow_box(text)


@pytest.mark.parametrize("answer, texts, strict, correct", [
    ("25", ["first \\boxed{25}, finally \\boxed{\\frac{50}{\\sqrt{4}}}"], [0], [1]),  # the last box nests deeper
    # the kept multi-answer: the authors' number reader drops "$" and "," on both sides, reading "69, 84" as 6984
    (["$69$,$84$"], ["\\boxed{69, 84}", "\\boxed{69,84}", "\\boxed{69} and \\boxed{84}", "\\boxed{84, 69}"],
     [0, 0, 0, 0], [1, 1, 0, 0]),
])
def test_numeq_fallback_keeps_the_authors_quirks(answer, texts, strict, correct):
    record = {"case_id": "q", "data_source": "aime24", "answer": answer,
              "samples": [{"text": t, "n_tokens": 10, "finish_reason": "stop"} for t in texts]}
    scored = math_eval.score_record(record)
    assert (scored["strict"], scored["correct"]) == (strict, correct)
    assert math_eval.plain_number("50\\%") is None and math_eval.plain_number("50%") == 50.0
