"""The math task protocol (DeepScaleR setup), defined once for data_prep, rewards and the evaluation: the prompt
(no system message; the stripped problem, then ``PROMPT_SUFFIX``) and the reward channels, correctness in {0, 1}
(verl's Hendrycks MATH grader) and length in {0, 1} (at most ``LENGTH_LIMIT`` response tokens, EOS included)."""

from __future__ import annotations

from tasks.registry import TaskSpec, register_task

DATA_SOURCE = "deepscaler"
# The authors' sentence (not DeepScaleR's own " Let's think step by step and output the final answer within \boxed{}.")
PROMPT_SUFFIX = "\n\nPlease reason step by step, and put your final answer within \\boxed{}."
MAX_PROMPT_TOKENS = 1024
LENGTH_LIMIT = 4000  # the length reward's budget and the evaluation's Exceed/Joint limit
CORRECTNESS_CHANNEL, LENGTH_CHANNEL = "correctness", "length"
CHANNELS = (CORRECTNESS_CHANNEL, LENGTH_CHANNEL)
GRADERS = ("hendrycks",)  # verl.utils.reward_score.math_reward.compute_score (the paper's reward)
DEFAULT_GRADER = "hendrycks"
# data_source -> rows in the authors' evaluation (OlympiadBench: 674 on the hub, 675 in DeepScaleR's local copy).
BENCHMARK_ROWS = {"aime24": 30, "amc23": 83, "math500": 500, "minerva": 272, "olympiad_bench": 674}
OLYMPIAD_LOCAL_ROWS = 675
BENCHMARKS = tuple(BENCHMARK_ROWS)
SMOKE_DATA_SOURCE = "smoke_math"  # the CPU smoke runs' synthetic problems (task=smoke_math, task=smoke_length)
MATH_SOURCES = frozenset({DATA_SOURCE, SMOKE_DATA_SOURCE, *BENCHMARKS})


def prompt_text(problem: str) -> str:
    """The user turn of a math prompt: the stripped problem, then the authors' instruction sentence."""
    if not isinstance(problem, str) or not problem.strip():
        raise ValueError(f"a math problem must be a non-empty string, got {problem!r}")
    return problem.strip() + PROMPT_SUFFIX


def prompt_messages(problem: str) -> list[dict]:
    return [{"role": "user", "content": prompt_text(problem)}]


def check_grader(grader: str) -> str:
    if grader not in GRADERS:
        raise ValueError(f"unknown math grader {grader!r}; expected one of {GRADERS}")
    return grader


SPEC = register_task(TaskSpec(
    name="math", data_sources=(DATA_SOURCE, SMOKE_DATA_SOURCE, *BENCHMARKS), reward="rewards.task_rewards:MATH",
    datasets={"deepscaler": "data_prep.deepscaler", "math_eval": "data_prep.math_eval",
              "smoke_length": "data_prep.smoke_length"},
    assets={"smoke_math": "data_prep.run_assets:smoke_math", "smoke_length": "data_prep.run_assets:smoke_length",
            "tiny_length_model": "data_prep.run_assets:tiny_length_model"},
    evaluations={"math": "results.evaluation.benches:MATH"},
    description="math reasoning with a length constraint, DeepScaleR setup (five benchmarks)"))
