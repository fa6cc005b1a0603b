"""dara.trl without a model: the advantages on TRL's reward matrix (against plain loops of TRL's formula),
missing scores, the seam checks, the config, the step line, the ToolRL reward functions."""

from __future__ import annotations

import math
import random

import pytest
import torch

from dara.estimators import ESTIMATOR_NAMES, compute_advantages
from dara.trl import TrlSeamError, check_trl_batch, completion_advantages
from dara.trl.progress import step_line
from dara.trl.toolrl import completion_text, toolrl_reward_funcs
from rewards import toolrl
from tests.trl.trl_recording import grpo_config as _config

TRL_EPS = 1e-4  # TRL's GRPOTrainer: (x - mean) / (std + 1e-4), at the group and the batch level
NAN = float("nan")


def _mean_std(values):
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else NAN
    return mean, std


def trl_normalize_then_sum_loop(rows, group_size, weights, eps=TRL_EPS):
    """TRL 1.16's `multi_objective_aggregation="normalize_then_sum"`, one number at a time (nan-aware)."""
    summed = []
    for start in range(0, len(rows), group_size):
        members = rows[start:start + group_size]
        stats = []
        for k in range(len(weights)):
            scored = [row[k] for row in members if not math.isnan(row[k])]
            stats.append(_mean_std(scored) if scored else (NAN, NAN))
        for row in members:
            if all(math.isnan(v) for v in row):
                summed.append(NAN)
                continue
            terms = [weights[k] * (row[k] - mean) / (std + eps) for k, (mean, std) in enumerate(stats)]
            summed.append(sum(t for t in terms if not math.isnan(t)))  # nansum
    mean, std = _mean_std([s for s in summed if not math.isnan(s)])
    return [0.0 if math.isnan(s) else (s - mean) / (std + eps) for s in summed]


def random_rewards(seed, groups=6, group_size=4, channels=2):
    rng = random.Random(seed)
    return [[float(rng.choice([0, 1])), rng.choice([-3.0, 0.0, 1.5, 3.0, rng.uniform(-3, 3)])][:channels]
            for _ in range(groups * group_size)]


@pytest.mark.parametrize("seed", range(4))
def test_gdpo_with_trl_options_equals_trl_normalize_then_sum(seed):
    rows = random_rewards(seed)
    rows[5] = [NAN, NAN]  # unscored completions: out of every statistic, advantage 0
    rows[8:11] = [[NAN, NAN]] * 3  # group 2 keeps a single scored completion: no baseline, no signal
    weights = [1.0, 0.5]
    options = {"weights": weights, "eps": TRL_EPS, "batch_norm": "response"}
    advantages, metrics = completion_advantages(torch.tensor(rows), 4, ["format", "correctness"], "gdpo", options)
    expected = torch.tensor(trl_normalize_then_sum_loop(rows, 4, weights), dtype=torch.float32)
    torch.testing.assert_close(advantages, expected, rtol=1e-5, atol=1e-6)
    assert advantages[5] == 0 and advantages[8:11].eq(0).all() and advantages.abs().sum() > 0
    assert metrics["dara/unscored_completions"] == 4 and metrics["dara/missing_scores/format"] == 0
    assert {"dara/density/format", "dara/weight/correctness", "dara/energy/correctness"} <= set(metrics)


def test_a_missing_channel_score_contributes_nothing_and_keeps_the_scored_baseline():
    rows = [[1.0, 3.0], [0.0, NAN], [1.0, -3.0], [0.0, 0.0],  # one completion without a correctness score
            [1.0, NAN], [0.0, NAN], [1.0, NAN], [0.0, NAN]]   # a group without correctness: inactive for it
    options = {"batch_norm": "none", "eps": TRL_EPS}
    advantages, metrics = completion_advantages(torch.tensor(rows), 4, ["format", "correctness"], "gdpo", options)
    format_mean, format_std = _mean_std([1.0, 0.0, 1.0, 0.0])
    correctness_mean = (3.0 - 3.0 + 0.0) / 3  # the scored completions' mean
    # its std over the group with the filled entry (sum of squares / (G - 1)): the documented difference from TRL
    correctness_std = math.sqrt(sum((v - correctness_mean) ** 2 for v in (3.0, correctness_mean, -3.0, 0.0)) / 3)
    expected = []
    for j, (fmt, corr) in enumerate(rows):
        value = (fmt - format_mean) / (format_std + TRL_EPS)
        if j < 4 and not math.isnan(corr):
            value += (corr - correctness_mean) / (correctness_std + TRL_EPS)
        expected.append(value)
    torch.testing.assert_close(advantages, torch.tensor(expected, dtype=torch.float32))
    assert metrics["dara/missing_scores/correctness"] == 5 and metrics["dara/density/correctness"] == 0.5
    assert metrics["dara/unscored_completions"] == 0


def test_nothing_scored_gives_zero_advantages():
    rewards = torch.full((8, 2), NAN)
    advantages, metrics = completion_advantages(rewards, 4, ["a", "b"], "dara_asym", {"batch_norm": "response"})
    assert advantages.eq(0).all() and metrics == {"dara/unscored_completions": 8.0, "dara/missing_scores/a": 0.0,
                                                  "dara/missing_scores/b": 0.0}


def test_token_batch_norm_whitens_over_the_completions_tokens():
    rows, lengths = torch.tensor(random_rewards(3)), torch.tensor([(7 * j) % 11 + 1 for j in range(24)])
    options = {"batch_norm": "token", "eps": TRL_EPS}
    advantages, _ = completion_advantages(rows, 4, ["a", "b"], "gdpo", options, lengths=lengths)
    mask = (torch.arange(11)[None, :] < lengths[:, None]).float()  # the library on the completions' tokens
    expected, _ = compute_advantages("gdpo", rows, torch.arange(24) // 4, mask, channel_names=["a", "b"], **options)
    torch.testing.assert_close(advantages, expected[:, 0])
    with pytest.raises(ValueError, match="token counts"):
        completion_advantages(rows, 4, ["a", "b"], "gdpo", options)
    with pytest.raises(ValueError, match="num_generations=5"):  # groups must fit the batch
        completion_advantages(rows, 5, ["a", "b"], "gdpo", {})


@pytest.mark.parametrize(("rewards", "advantages", "processes", "message"), [
    (None, torch.zeros(4), 1, "did not call _calculate_rewards"),
    (torch.zeros(8), torch.zeros(4), 2, r"returned \(8,\)"),
    (torch.zeros(8, 3), torch.zeros(4), 2, "2 reward functions"),
    (torch.zeros(8, 2), torch.zeros(4, 1), 2, "no 1-D 'advantages'"),
    (torch.zeros(8, 2), torch.zeros(4), 1, "expected 1 processes x 4"),
])
def test_a_changed_trl_fails_naming_the_supported_release(rewards, advantages, processes, message):
    with pytest.raises(TrlSeamError, match=message) as caught:
        check_trl_batch(rewards, {"advantages": advantages}, processes, 2)
    assert "trl>=1.16,<1.17" in str(caught.value)
    assert check_trl_batch(torch.zeros(8, 2), {"advantages": torch.zeros(4)}, 2, 2) == 4


@pytest.mark.parametrize("estimator", ESTIMATOR_NAMES)
def test_config_batch_norm_is_response_where_the_estimator_takes_it(tmp_path, estimator):
    extra = {"reward_weights": [1.0, 5.0]} if estimator == "static" else {}
    config = _config(tmp_path, estimator=estimator, **extra)
    own = {"grpo": "none", "dvao": "none"}
    assert config.batch_norm == own.get(estimator, "response")
    options = config.algo_config(["a", "b"]).keywords()
    compute_advantages(estimator, torch.tensor(random_rewards(1)), torch.arange(24) // 4, torch.ones(24, 1),
                       channel_names=["a", "b"], **{**options, "reward_ranges": {"a": [0, 1], "b": [-3, 3]}})


@pytest.mark.parametrize(("values", "message"), [
    ({"estimator": "dara"}, "not a dara.estimators name"),
    ({"estimator": "static"}, "set reward_weights"),
    ({"estimator": "grpo", "batch_norm": "response"}, "does not take batch_norm"),
    ({"w_max": 0.5}, "w_max"),
    ({"eps": 0.0}, "eps"),
])
def test_config_rejects_bad_options_at_construction(tmp_path, values, message):
    with pytest.raises(ValueError, match=message):
        _config(tmp_path, **values)


def test_step_line_shows_each_function():
    logs = {"rewards/format/mean": 0.5, "rewards/correctness/mean": -1.25, "dara/density/format": 1.0,
            "dara/density/correctness": 0.125, "dara/weight/format": 1.0, "dara/weight/correctness": 2.828,
            "loss": 0.0123}
    assert step_line(2, 3, logs, 75.0) == (
        "[dara.trl] step 2/3 | reward format 0.500 correctness -1.250 | density format 1.000 correctness 0.125 | "
        "weight format 1.000 correctness 2.828 | loss 0.0123 | 1:15 elapsed")
    assert step_line(3, 3, {"train_runtime": 4.0}, 1.0) is None


def test_toolrl_reward_functions_are_the_projects_channels():
    truth = '<think>x</think>\n<tool_call>\n{"name": "clock", "parameters": {"city": "Oslo"}}\n</tool_call>'
    wrong = '<think>x</think>\n<tool_call>\n{"name": "clock", "parameters": {"city": "Rome"}}\n</tool_call>'
    funcs = toolrl_reward_funcs()
    assert [f.__name__ for f in funcs] == ["format", "correctness"]
    completions = [[{"role": "assistant", "content": truth}], wrong, "no format"]
    for func in funcs:
        values = func(completions=completions, ground_truth=[truth] * 3, prompts=None)
        assert values == [toolrl.score(completion_text(c), truth)[func.__name__] for c in completions]
    assert funcs[1](completions=completions, ground_truth=[truth] * 3) == [3.0, 1.0, -3.0]
    assert [f.__name__ for f in toolrl_reward_funcs(length_channel=True)] == ["format", "correctness", "length"]
