"""The math reward: correctness is verl's own Hendrycks MATH grader (the paper's) on every benchmark answer and
perturbations of it; the length channel, plain and conditioned."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from verl.utils.reward_score import math_reward as verl_math_reward

from dara import SAMPLE_DATA
from rewards import math as math_reward
from rewards import verl_entry
from tasks.math_answers import reference_answer

BENCHMARKS = SAMPLE_DATA / "math_benchmarks"
BENCHMARK_FILES = ["aime.json", "amc.json", "math.json", "minerva.json", "olympiad_bench.json"]


def perturbations(reference: str, other: str) -> list[str]:
    """Responses around a reference answer: right, reformatted, wrong, misplaced, truncated."""
    return [
        f"\\boxed{{{reference}}}",
        f"<think> let me see </think> The answer is $\\boxed{{{reference}}}$.",
        f"<think> so it is \\boxed{{{reference}}} and then I ran out of tokens",  # box inside cut thinking
        f"\\boxed{{{reference}}} no wait \\boxed{{{other}}}",  # the last box counts
        f"\\boxed{{{other}}} no wait \\boxed{{{reference}}}",
        f"\\boxed{{ {reference} }}",
        f"\\boxed{{{reference}.}}",
        f"\\boxed{{\\text{{{reference}}}}}",
        f"\\boxed{{{reference}^\\circ}}",
        f"\\boxed{{x = {reference}}}",
        f"\\boxed{{{reference} }}" + " trailing words",
        f"The answer is {reference}.",  # no box at all
        f"\\boxed{{{reference}",  # unclosed
        f"\\fbox{{{reference}}}",
        f"\\boxed {reference}",
        f"\\boxed{{{reference}0}}",
        f"\\boxed{{-{reference}}}",
    ]


@pytest.mark.parametrize("name", BENCHMARK_FILES)
def test_default_grader_equals_verl_on_every_benchmark_answer(name):
    rows = json.loads((BENCHMARKS / name).read_text())
    compared = 0
    for index, row in enumerate(rows):
        reference = reference_answer(row["answer"])
        other = reference_answer(rows[(index + 1) % len(rows)]["answer"])
        for response in perturbations(reference, other):
            ours = math_reward.score(response, row["answer"], 10)["correctness"]
            assert ours == verl_math_reward.compute_score(response, reference), (name, index, response)
            compared += 1
        assert math_reward.score(f"\\boxed{{{reference}}}", row["answer"], 10)["correctness"] == 1.0
    assert compared == len(rows) * len(perturbations("a", "b"))


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.text(max_size=80), st.lists(st.sampled_from(
    ["\\boxed{", "\\boxed ", "\\fbox{", "}", "{", "</think>", "\\frac", "1", "2", "x", "$", " "]), max_size=20).map("".join)))
def test_arbitrary_text_scores_as_verl_grades_it(response):
    assert math_reward.score(response, "2", 10)["correctness"] == verl_math_reward.compute_score(response, "2")


@pytest.mark.parametrize(("scorer", "response", "tokens", "max_tokens", "expected"), [
    ("score", "\\boxed{2}", 4000, 4000, (1.0, 1.0)),
    ("score", "\\boxed{2}", 4001, 4000, (1.0, 0.0)),
    ("score", "word " * 10_000, 5, 4000, (0.0, 1.0)),  # the rollout's token count, never a re-tokenisation
    ("score", "\\boxed{3}", 10, 4000, (0.0, 1.0)),
    ("score_conditioned", "\\boxed{2}", 10, 4000, (1.0, 1.0)),
    ("score_conditioned", "\\boxed{3}", 10, 4000, (0.0, 0.0)),  # length counts only when correct
])
def test_length_channel(scorer, response, tokens, max_tokens, expected):
    scores = getattr(math_reward, scorer)(response, "2", tokens, max_tokens)
    assert (scores["correctness"], scores["length"]) == expected


@pytest.mark.parametrize(("call", "error", "message"), [
    *((lambda t=t: math_reward.score("\\boxed{2}", "2", t), ValueError, "response_tokens") for t in (-1, 1.5, True, None)),
    (lambda: math_reward.score(None, "2", 10), TypeError, "response must be str"),
    (lambda: math_reward.score("\\boxed{1}", "1", 10, grader="math_verify"), ValueError, "unknown math grader"),
    (lambda: verl_entry.RewardOptions.from_kwargs({"math_grader": "exact"}), ValueError, "unknown math grader"),
])
def test_bad_input_is_a_clear_error(call, error, message):
    with pytest.raises(error, match=message):
        call()
