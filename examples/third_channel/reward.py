"""A third reward channel on the tool-calling task, as a reward module of your own (docs/own_experiment.md).

The run picks it up with `reward.custom_reward_function.path=examples/third_channel/reward.py`: its channels and
their ranges are REWARD_CHANNELS below, nothing else to configure. format and correctness are ToolRL's own
(`rewards.toolrl`, the scorer the paper trained with); `brevity` is 1 when the whole response has at most
`max_words` whitespace-separated words (a keyword argument: `reward.custom_reward_function.reward_kwargs`).
"""

from rewards import toolrl

REWARD_CHANNELS = {"format": (0.0, 1.0), "correctness": (-3.0, 3.0), "brevity": (0.0, 1.0)}


def compute_score(data_source, solution_str, ground_truth, extra_info=None, max_words=24):
    channels = toolrl.score(solution_str, ground_truth)
    channels["brevity"] = 1.0 if len(solution_str.split()) <= max_words else 0.0
    return {"score": sum(channels.values()), **channels}
