"""The math task protocol (EXPERIMENTS.md, "Math reasoning with a length constraint (DeepScaleR setup)").

What the model sees and how its output is read, defined once: data_prep (training and evaluation sets),
rewards (the correctness and length channels) and the evaluation import these names.

- Prompt (training and evaluation alike, the authors' code): no system message, one user turn holding the
  stripped problem followed by ``PROMPT_SUFFIX``, rendered with the model's chat template.
- Reward channels: correctness in {0, 1} (verl's Hendrycks MATH grader by default) and length in {0, 1}
  (at most ``LENGTH_LIMIT`` response tokens, EOS included).
- Benchmarks: the five evaluation sets with their row counts; OlympiadBench has 674 rows in the hub copy
  the authors used and 675 in DeepScaleR's copy (the summary says which one a table used).
"""

from __future__ import annotations

from tasks.registry import TaskSpec, register_task

DATA_SOURCE = "deepscaler"
# The authors' prompt sentence (their training overlay and evaluation script); an earlier specification
# gave DeepScaleR's own " Let's think step by step and output the final answer within \boxed{}.".
PROMPT_SUFFIX = "\n\nPlease reason step by step, and put your final answer within \\boxed{}."
MAX_PROMPT_TOKENS = 1024
# The length reward's budget and the evaluation's Exceed/Joint limit.
LENGTH_LIMIT = 4000

CORRECTNESS_CHANNEL = "correctness"
LENGTH_CHANNEL = "length"
CHANNELS = (CORRECTNESS_CHANNEL, LENGTH_CHANNEL)

# "hendrycks": verl.utils.reward_score.math_reward.compute_score (the paper's reward).
GRADERS = ("hendrycks",)
DEFAULT_GRADER = "hendrycks"

# data_source -> rows in the authors' evaluation (OlympiadBench: the local DeepScaleR copy has 675).
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
    """The chat messages of a math prompt: one user turn, no system message."""
    return [{"role": "user", "content": prompt_text(problem)}]


def check_grader(grader: str) -> str:
    if grader not in GRADERS:
        raise ValueError(f"unknown math grader {grader!r}; expected one of {GRADERS}")
    return grader


SPEC = register_task(TaskSpec(
    name="math",
    data_sources=(DATA_SOURCE, SMOKE_DATA_SOURCE, *BENCHMARKS),
    reward="rewards.task_rewards:MATH",
    datasets={"deepscaler": "data_prep.deepscaler", "math_eval": "data_prep.math_eval",
              "smoke_length": "data_prep.smoke_length"},
    # the length variant's tiny model is trained on this task's synthetic sums (conf/model/tiny_length.yaml)
    assets={"smoke_math": "data_prep.run_assets:smoke_math", "smoke_length": "data_prep.run_assets:smoke_length",
            "tiny_length_model": "data_prep.run_assets:tiny_length_model"},
    evaluations={"math": "results.evaluation.benches:MATH"},
    description="math reasoning with a length constraint, DeepScaleR setup (five benchmarks)",
))
