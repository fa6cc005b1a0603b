"""The default math grader is verl's own Hendrycks MATH grader (EXPERIMENTS.md): compared with
verl.utils.reward_score.math_reward.compute_score on every benchmark answer and perturbations of it."""

import json

import pytest
from verl.utils.reward_score import math_reward as verl_math_reward

from dara import SAMPLE_DATA
from rewards import math as math_reward
from rewards import verl_entry
from tasks import math as task
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


def test_standalone_grader_is_verls_installed_module():
    module = math_reward.verl_hendrycks_grader()
    assert module.__file__ == verl_math_reward.__file__ or module is verl_math_reward
    for response, reference in [("\\boxed{\\frac12}", "\\frac{1}{2}"), ("\\boxed{0.5}", "\\frac{1}{2}"),
                                ("\\boxed{2}", "3"), ("nothing", "3")]:
        assert module.compute_score(response, reference) == verl_math_reward.compute_score(response, reference)


def test_graders_differ_where_the_paper_says():
    # Hendrycks reads the whole text: a box inside unfinished thinking counts; math-verify needs </think>
    truncated = "<think> the answer is \\boxed{7} but let me check"
    assert math_reward.score(truncated, "7", 10)["correctness"] == 1.0
    assert math_reward.score(truncated, "7", 10, grader="math_verify")["correctness"] == 0.0
    # math-verify is more lenient: symbolic equivalence, not string equivalence
    assert math_reward.score("\\boxed{\\dfrac{2}{4}}", "\\frac{1}{2}", 10)["correctness"] == 0.0
    assert math_reward.score("\\boxed{\\dfrac{2}{4}}", "\\frac{1}{2}", 10, grader="math_verify")["correctness"] == 1.0


def test_native_answer_forms_reach_verl_as_the_first_accepted_string():
    assert math_reward.score("\\boxed{142}", 142.0, 10)["correctness"] == 1.0  # AMC floats
    assert math_reward.score("\\boxed{2^{1009}}", ["$2^{1009}$"], 10)["correctness"] == 1.0  # OlympiadBench


def test_unknown_grader_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown math grader"):
        math_reward.score("\\boxed{1}", "1", 10, grader="sympy")
    with pytest.raises(ValueError, match="unknown math grader"):
        verl_entry.RewardOptions.from_kwargs({"math_grader": "exact"})


def test_verl_entry_uses_the_configured_grader():
    hendrycks = verl_entry.RewardOptions.from_kwargs({})
    lenient = verl_entry.RewardOptions.from_kwargs({"math_grader": "math_verify"})
    assert hendrycks.math_grader == task.DEFAULT_GRADER == "hendrycks"
    response = "\\boxed{\\dfrac{2}{4}}"
    assert verl_entry.score_sample("deepscaler", response, "\\frac{1}{2}", 5, hendrycks)["correctness"] == 0.0
    assert verl_entry.score_sample("deepscaler", response, "\\frac{1}{2}", 5, lenient)["correctness"] == 1.0
