"""The length race without training: the length variant's independent channels and probe figures, its regime
(slow), the protocol against the task file, and the sustained endpoint (results.race_stats, results.headline)."""

from __future__ import annotations

import json
import math
import random

import pandas as pd
import pytest

from data_prep import smoke_length
from recipes.race import RACE_FORMAT, RACE_LENGTH, load_protocol
from results import headline, race_stats
from rewards import math as math_reward
from tests.test_race_format import race_frame
from tests.test_results_thresholds import loop_sustained_step

PROTOCOL = load_protocol(RACE_LENGTH.protocol_file)


def test_correctness_is_decided_before_the_tail():
    """On 2,000 problems, right and wrong: the same verdict with and without the re-check tail (which holds no box)."""
    items = smoke_length.problems(3, 2000, smoke_length.MAX_OPERAND)
    for item in items:
        tail = smoke_length.re_check_tail(*map(int, item["problem"].split("What is ")[1].rstrip("?").split(" + ")),
                                          item["tail_lines"])
        assert item["target"].endswith(tail) and "\\boxed" not in tail and "\\fbox" not in tail
        wrong = item["target"].replace(f"\\boxed{{{item['answer']}}}", f"\\boxed{{{int(item['answer']) + 1}}}")
        for response, correct in ((item["target"], 1.0), (wrong, 0.0)):
            cut = smoke_length.without_tail(response)
            assert cut == response[:len(response) - len(tail)]
            assert math_reward.correctness(response, item["answer"]) == correct
            assert math_reward.correctness(cut, item["answer"]) == correct


def test_one_prompt_in_four_asks_for_a_check_and_only_those_targets_have_a_tail():
    items = smoke_length.problems(0, 400, 9)
    for block in range(0, 400, 4):
        assert sum(item["asks_check"] for item in items[block:block + 4]) == 1
    for item in items:
        asks = item["problem"].startswith(smoke_length.CHECK_REQUEST)
        assert asks == item["asks_check"] == (item["tail_lines"] in smoke_length.TAIL_LINES)
        assert ("Re-check" in item["target"]) == asks and item["problem"].endswith("?")
    lines = [item["tail_lines"] for item in items if item["asks_check"]]
    assert 0.35 < lines.count(2) / len(lines) < 0.65   # chosen evenly: the second line about half the time


def test_the_warm_start_renders_the_math_prompt_the_run_sees():
    """The warm start writes the template's default system turn out; the run's rows have none: the same ids."""
    from data_prep import smoke

    items = smoke_length.problems(0, 8, 9)
    records = [smoke_length.warm_start_record(item) for item in items]
    tokenizer = smoke.train_tokenizer(smoke.chat_texts(records))
    for item, record, row in zip(items, records, smoke_length.to_rows(items, "train"), strict=True):
        explicit = [{"role": "system", "content": record["instruction"]}, {"role": "user", "content": record["input"]}]
        assert row["prompt"] == [{"role": "user", "content": record["input"]}]
        assert record["input"].endswith("within \\boxed{}.") and row["reward_model"]["ground_truth"] == item["answer"]
        assert (tokenizer.apply_chat_template(list(row["prompt"]), add_generation_prompt=True)
                == tokenizer.apply_chat_template(explicit, add_generation_prompt=True))


def test_the_probe_summary_equals_plain_loops():
    rng = random.Random(5)
    samples = []
    for group in range(30):
        asks = group % 4 == 0
        for _ in range(8):
            tokens = rng.choice([20, 30, 40]) if asks else 16
            correct = float(rng.random() < 0.5)
            samples.append({"asks_check": asks, "tokens": tokens, "correctness": correct,
                            "length": float(tokens <= smoke_length.LENGTH_LIMIT),
                            "correct_without_tail": correct if group != 3 else 1.0 - correct, "text": "x"})
    found = smoke_length.summarise(samples, 8)
    groups = [samples[i:i + 8] for i in range(0, len(samples), 8)]

    def density(part, channel):
        return sum(len({s[channel] for s in g}) > 1 for g in part) / len(part)

    assert found["correct_rate"] == round(sum(s["correctness"] for s in samples) / len(samples), 4)
    assert found["length_violation_rate"] == round(sum(s["length"] == 0 for s in samples) / len(samples), 4)
    for channel in ("correctness", "length"):
        assert found["channels"][channel]["group_density"] == round(density(groups, channel), 4)
        family = [g for g in groups if g[0]["asks_check"]]
        assert found["asks_check"]["channels"][channel]["group_density"] == round(density(family, channel), 4)
    over = [s["correctness"] for s in samples if s["length"] == 0]
    assert found["independence"]["correct_rate_over_limit"] == round(sum(over) / len(over), 4)
    assert found["independence"]["responses_whose_tail_changes_correctness"] == 8
    summed = [[s["correctness"] + s["length"] for s in g] for g in groups]
    assert found["informative_group_share"] == round(sum(len(set(g)) > 1 for g in summed) / len(groups), 4)
    assert found["no_check"]["channels"]["length"]["group_density"] == 0.0


@pytest.mark.slow
def test_the_length_variant_starts_in_the_registered_regime(tmp_path):
    """The data card of the task's asset build: correct rate 0.4-0.6, length density 0.15-0.35 on the family that
    asks for a check, correctness as often over the limit as within it; conf/model/tiny_length.yaml's facts."""
    from omegaconf import OmegaConf

    from dara.preflight.facts import facts_from_config_json, facts_from_mapping
    from data_prep import run_assets
    from recipes.runner import group_value

    run_assets.smoke_length(tmp_path / "length", tmp_path)
    card = json.loads((tmp_path / "length" / "data_card.json").read_text())
    probe = card["length_probe"]
    assert (probe["groups"], probe["group_size"]) == (smoke_length.PROBE_PROMPTS, PROTOCOL["group_size"])
    assert 0.4 <= probe["correct_rate"] <= 0.6 and probe["channels"]["correctness"]["group_density"] >= 0.6
    assert 0.15 <= probe["channels"]["length"]["group_density"] <= 0.35
    assert probe["asks_check"]["channels"]["length"]["group_density"] >= 0.8
    assert probe["no_check"]["channels"]["length"]["rate"] >= 0.98
    # independence: the correct rates over and within the limit differ by at most 3 standard errors
    independence = probe["independence"]
    over, within = independence["correct_rate_over_limit"], independence["correct_rate_within_limit"]
    n_over, pooled = round(probe["length_violation_rate"] * probe["samples"]), probe["correct_rate"]
    standard_error = math.sqrt(pooled * (1 - pooled) * (1 / n_over + 1 / (probe["samples"] - n_over)))
    assert abs(over - within) <= 3 * standard_error, (over, within, n_over, standard_error)
    assert independence["responses_whose_tail_changes_correctness"] <= 0.01 * probe["samples"]
    assert card["splits"] == {"train": smoke_length.N_TRAIN, "val": smoke_length.N_VAL}
    config = json.loads((tmp_path / "length" / "model" / "config.json").read_text())
    node = group_value("model", "tiny_length", "run.model_facts")   # merged over model=tiny's, as Hydra does
    assert facts_from_config_json(config, card["model"]["parameters"]) == facts_from_mapping(OmegaConf.to_container(node))


def test_the_length_protocol_settings():
    """Its settings shared with the format race against the task file: test_race_format.py."""
    from omegaconf import OmegaConf

    task, settings = OmegaConf.load("conf/task/smoke_length.yaml"), PROTOCOL
    assert 16 <= settings["prompts_per_step"] <= 32
    assert task.actor_rollout_ref.rollout.n == settings["group_size"] == smoke_length.PROBE_GROUP
    assert task.reward.custom_reward_function.reward_kwargs.max_response_tokens == smoke_length.LENGTH_LIMIT
    assert task.run.seeded_rollout is True and task.run.dynamic_sampling.mode is None
    assert settings["dynamic_sampling"] is None and settings["batch_norm"] == "response"
    # the sustained rule of the authors' math curves (10 and 20 over 200 steps), scaled to the race's steps
    assert (settings["window"], settings["hold"]) == (10 * settings["steps"] // 200, 20 * settings["steps"] // 200)


@pytest.mark.slow  # composes one run per method (~2 s each)
def test_each_method_composes_with_the_task_settings_and_passes_the_checks():
    from dara.config import compose
    from dara.config_checks import check_config

    for method in (*RACE_LENGTH.methods, *RACE_LENGTH.extra_methods):
        run = RACE_LENGTH.run(method, 0, PROTOCOL)
        cfg = compose(tuple(run.overrides()))
        check_config(cfg)
        # GRPO defines its own normalisation (the group z-score of the summed reward, as the authors' math code)
        assert cfg.run.method == method and cfg.algorithm.dara.batch_norm == (None if method == "grpo" else "response")
        assert cfg.data.gen_batch_size is None and cfg.algorithm.filter_groups.enable is False
        assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "dara_seeded_single_turn"
        assert (cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n) == (16, 8)


def test_the_sustained_endpoint_and_the_results_command_equal_plain_loops(tmp_path):
    """`python -m results headline` on a runs.csv with the length race's protocol (window 2, hold 4)."""
    from results.cli import main as results_main

    speeds, threshold, steps = (("gdpo", 0.004), ("dara_sym", 0.005), ("dara_asym", 0.006)), 0.93, 20
    frame = race_frame(0, "length", speeds, start=0.88, noise=0.03, steps=steps)
    window, hold, logged = PROTOCOL["window"], PROTOCOL["hold"], range(1, steps + 1)
    frame.to_csv(tmp_path / "runs.csv", index=False)
    (tmp_path / "protocol.json").write_text(json.dumps({**PROTOCOL, "steps": steps, "threshold": threshold,
                                                        "secondary_steps": [1, 10]}))
    assert results_main(["headline", str(tmp_path / "runs.csv"), "--out", str(tmp_path)]) == 0
    rule = headline.step_rule({"threshold_rule": "sustained", "window": window, "hold": hold})
    found = race_stats.threshold_endpoint(frame, "reward/length/mean", threshold, steps, **rule)
    table = pd.read_csv(tmp_path / "thresholds.csv")
    assert set(table["method"]) == set(PROTOCOL["methods"])
    for (method, seed), run in frame.groupby(["method", "seed"]):
        step = loop_sustained_step(logged, list(run.sort_values("step")["reward/length/mean"]), threshold, window, hold)
        assert found[method][seed] == (steps + 1 if step is None else step)
        row = table[(table["method"] == method) & (table["seed"] == seed)].iloc[0]
        assert (None if pd.isna(row["step"]) else int(row["step"])) == step
    summary = headline.summary_table(frame, "reward/length/mean", threshold, rule).set_index("method")
    for method, runs in frame.groupby("method"):
        median = list(runs.groupby("step")["reward/length/mean"].median().sort_index())
        expected = loop_sustained_step(logged, median, threshold, window, hold)
        assert (None if pd.isna(summary.at[method, "median_curve_step"])
                else int(summary.at[method, "median_curve_step"])) == expected
    statistics = pd.read_csv(tmp_path / "statistics.csv")
    primary = statistics[statistics["endpoint"] == "threshold step"].set_index("comparison")
    differences = [found["dara_asym"][s] - found["gdpo"][s] for s in range(6)]
    assert primary.at["dara_asym - gdpo", "mean"] == pytest.approx(sum(differences) / 6, abs=1e-4)
    text = (tmp_path / "summary.md").read_text()
    assert "trailing 2-step mean" in text and "next 4 steps" in text
    assert headline.step_rule(load_protocol(RACE_FORMAT.protocol_file)) == {"rule": "median"} == headline.step_rule({})
    with pytest.raises(headline.ProtocolError, match="window"):
        headline.step_rule({"threshold_rule": "sustained", "hold": 4})
