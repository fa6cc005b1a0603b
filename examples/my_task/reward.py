"""The reward of my_task: two channels, declared once with their ranges (docs/own_experiment.md).

- answer in {0, 1}: the response names the sum (a whole word equal to the ground truth);
- short in {0, 1}: the response has at most 32 tokens (extra_info["response_tokens"], which the project's
  reward manager passes).
"""

import re

REWARD_CHANNELS = {"answer": (0.0, 1.0), "short": (0.0, 1.0)}
SHORT_TOKENS = 32


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    answer = 1.0 if str(ground_truth) in re.findall(r"-?\d+", solution_str) else 0.0
    tokens = (extra_info or {}).get("response_tokens", len(solution_str.split()))
    short = 1.0 if tokens <= SHORT_TOKENS else 0.0
    return {"score": answer + short, "answer": answer, "short": short}
