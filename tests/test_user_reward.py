"""A reward of your own (rewards.spec): its declaration, the checks before Ray, and the reward manager scoring it
through verl's RewardLoopWorker, where raising, hanging or junk items are counted, not fatal."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from dara.config_checks import ConfigError, check_config, check_reward
from dara.preflight import compose
from dara.run_folder import REWARD_ERRORS
from rewards.spec import RewardContractError, RewardSpecError, check_result, load_reward_spec, probe
from tests.test_rewards_verl import IMPORTLIB_MANAGER, by_file, make_batch, run_reward_loop, verl_config

CHANNELS = {"format": (0.0, 1.0), "brevity": (0.0, 1.0)}
# scores as its response asks: "raise", "hang", "junk" (out of range), "extra" (an undeclared key), else fine
MODULE = '''
import time

REWARD_CHANNELS = {"format": (0.0, 1.0), "brevity": (0.0, 1.0)}


def compute_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):
    if "raise" in solution_str:
        raise RuntimeError("boom on " + solution_str[:12])
    if "hang" in solution_str:
        time.sleep(60)
    if "junk" in solution_str:
        return {"score": 9.0, "format": 9.0, "brevity": 0.0}
    brevity = 1.0 if len(solution_str.split()) <= 3 else 0.0
    out = {"score": brevity + bonus, "format": 0.0 + bonus, "brevity": brevity}
    if "extra" in solution_str:
        out["surprise"] = 1.0
    return out
'''


@pytest.fixture(scope="module")
def base_cfg():
    return compose([])  # the smoke run's config; tests point it at their own files


def with_overrides(base, **values):
    cfg = base.copy()
    for key, value in values.items():
        OmegaConf.update(cfg, key, value, force_add=True)
    return cfg


def write(tmp_path: Path, text: str, name: str = "reward.py") -> str:
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


def always(tmp_path: Path, case: str) -> str:
    """MODULE as if every response asked for `case` ("raise", "extra")."""
    return write(tmp_path, MODULE.replace(f'if "{case}" in solution_str', "if True"), f"always_{case}.py")


SCORER = "\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return {}\n"


@pytest.mark.parametrize("text, message", [
    (SCORER, "declares no reward channels: add a module-level REWARD_CHANNELS"),
    ("REWARD_CHANNELS = {'a': (1, 0)}" + SCORER, "channel 'a' range must be finite with low < high"),
    ("REWARD_CHANNELS = {'score': (0, 1)}" + SCORER, "channel name 'score' must be an identifier"),
    ("REWARD_CHANNELS = {'a': (0, 1)}\n", "has no function 'compute_score'"),
    ("REWARD_CHANNELS = {'a': (0, 1)}\ndef compute_score(text):\n    return {}\n", "cannot be called as verl calls it"),
    ("import no_such_package\n", "failed to import: ModuleNotFoundError"),
])
def test_a_misdeclared_module_is_one_line_naming_it(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(RewardSpecError, match=message) as caught:
        load_reward_spec(path)
    assert "\n" not in str(caught.value) and path in str(caught.value)


@pytest.mark.parametrize(("result", "error", "message"), [
    pytest.param({"score": 1, "format": 1, "brevity": 0, "length": 1}, RewardContractError,
                 r"\['length'\].*not declare", id="undeclared-channel"),
    pytest.param({"score": 1, "format": 1}, RewardContractError, r"no \['brevity'\]", id="missing-channel"),
    pytest.param(0.5, RewardContractError, "not a dict", id="not-a-dict"),
    pytest.param({"score": 1, "format": 2, "brevity": 0}, ValueError,
                 r"format=2.0, outside its declared range \[0.0, 1.0\]", id="out-of-range"),
    pytest.param({"score": float("nan"), "format": 1, "brevity": 0}, ValueError, "score=nan", id="nan"),
])
def test_results_are_held_to_the_declaration(result, error, message):
    assert check_result({"score": 1, "format": 1, "brevity": 0}, CHANNELS) == {"score": 1.0, "format": 1.0,
                                                                               "brevity": 0.0}  # read as floats
    with pytest.raises(error, match=message):
        check_result(result, CHANNELS)


def test_the_run_follows_the_modules_channels_and_ranges(tmp_path, base_cfg):
    path = write(tmp_path, MODULE)
    cfg = with_overrides(base_cfg, **{"reward.custom_reward_function.path": path, "algorithm.adv_estimator": "saw",
                                      "algorithm.dara.reward_ranges.brevity": [0.0, 2.0]})
    check_config(cfg)
    assert list(cfg.algorithm.reward_channels) == ["format", "brevity"]
    assert OmegaConf.to_container(cfg.algorithm.dara.reward_ranges) == {"format": [0.0, 1.0], "brevity": [0.0, 2.0]}
    with pytest.raises(ConfigError, match=r"'correctness'.*the reward's channels are \['format', 'brevity'\]"):
        check_config(with_overrides(base_cfg, **{"reward.custom_reward_function.path": path,
                                                 "algorithm.reward_channels": ["format", "correctness"]}))


DECLARING = """
def reward_channels(data_source, reward_kwargs):
    assert "timeout_s" not in reward_kwargs, "a pool option reached the module: " + repr(reward_kwargs)
    extra = {"length": (0.0, 1.0)} if reward_kwargs.get("with_length") else {}
    return {"format": (0.0, 1.0), **extra}


def compute_score(data_source, solution_str, ground_truth, extra_info=None, with_length=False):
    return {"score": 1.0, "format": 1.0, **({"length": 0.0} if with_length else {})}
"""


def test_the_checks_and_the_manager_call_a_declaring_module_with_the_same_options(tmp_path, base_cfg):
    """Both reward_kwargs merged, the pool's options taken out: what the module sees before Ray and in training."""
    from dara.verl.reward_manager import ModuleScorer, reward_kwargs

    path = write(tmp_path, DECLARING)
    cfg = with_overrides(base_cfg, **{"reward.custom_reward_function.path": path,
                                      "reward.reward_kwargs.with_length": True,
                                      "reward.custom_reward_function.reward_kwargs": {"timeout_s": 5.0}})
    check_config(cfg)
    assert list(cfg.algorithm.reward_channels) == ["format", "length"]
    scorer = ModuleScorer(path, "compute_score", reward_kwargs(cfg))
    assert list(scorer.channels("mine")) == ["format", "length"] and scorer.options.timeout_s == 5.0
    clash = with_overrides(cfg, **{"reward.custom_reward_function.reward_kwargs.with_length": False})
    with pytest.raises(ConfigError, match=r"\['with_length'\] differ between"):
        check_config(clash)


def test_the_probe_before_ray_stops_a_broken_module_and_lets_a_flaky_one_run(tmp_path, base_cfg):
    rows = [("rlla", "short answer", {"index": 0}), ("rlla", "raise me", {"index": 1})]
    assert probe(load_reward_spec(write(tmp_path, MODULE)), {}, rows, timeout_s=5) == 3  # "raise me" fails
    with pytest.raises(RewardSpecError, match=r"\['surprise'\] that REWARD_CHANNELS does not declare"):
        probe(load_reward_spec(always(tmp_path, "extra")), {}, rows, timeout_s=5)
    data = tmp_path / "train.parquet"  # check_reward probes the training rows
    pd.DataFrame({"data_source": ["mine"] * 2, "reward_model": [{"ground_truth": "raise"}, {"ground_truth": "x"}],
                  "extra_info": [{"index": 0}, {"index": 1}]}).to_parquet(data)
    cfg = with_overrides(base_cfg, **{"reward.custom_reward_function.path": always(tmp_path, "raise"),
                                      "data.train_files": str(data)})
    with pytest.raises(ConfigError, match="failed on every probe item .4: .*RuntimeError: boom on"):
        check_reward(cfg)
    check_reward(with_overrides(cfg, **{"reward.custom_reward_function.path": write(tmp_path, MODULE)}))


@pytest.mark.slow  # two pool workers and an item that runs into the 1 s time limit (~10 s)
def test_the_manager_scores_a_module_of_your_own_and_counts_what_fails(tmp_path, tokenizer_dir, tokenizer):
    config = by_file(verl_config(tokenizer_dir), IMPORTLIB_MANAGER, path=write(tmp_path, MODULE), bonus=0.5)
    config.reward.reward_kwargs = {"timeout_s": 1.0, "num_processes": 2}
    config.run = {"output_dir": str(tmp_path / "run")}
    texts = ["ok", "raise this", "hang here", "junk value", "extra key", "one two three four five"]
    rows = [{"source": "anything", "text": t, "truth": "x"} for t in texts]
    worker, outputs = run_reward_loop(config, make_batch(tokenizer, rows))
    extras = [o["reward_extra_info"] for o in outputs]
    assert all(set(e) == {"score", "format", "brevity", "reward_timeout", "reward_error"} for e in extras)
    assert [e["reward_error"] for e in extras] == [0, 1, 0, 1, 1, 0]
    assert [e["reward_timeout"] for e in extras] == [0, 0, 1, 0, 0, 0]
    # the kwarg reached the function; a failed or timed-out item scores each channel's low
    assert [(e["format"], e["brevity"], o["reward_score"]) for e, o in zip(extras, outputs, strict=True)] == [
        (0.5, 1.0, 1.5), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.5, 0.0, 0.5)]
    log = (tmp_path / "run" / REWARD_ERRORS).read_text().splitlines()
    assert len(log) == 3 and log[0].startswith("anything: RuntimeError: boom on raise this")


def test_a_step_where_every_item_failed_stops_with_the_first_error(tmp_path):
    from dara.verl.trainer import check_reward_failures

    check_reward_failures({"reward/errors": 3.0}, 4, 1, str(tmp_path))  # some failed: the run goes on
    (tmp_path / "logs").mkdir()
    (tmp_path / REWARD_ERRORS).write_text("rlla: KeyError: 'answer'\nrlla: KeyError: 'answer'\n")
    with pytest.raises(ValueError, match=r"failed on every item of step 2 \(4 of 4\); first error: rlla: KeyError"):
        check_reward_failures({"reward/errors": 4.0}, 4, 2, str(tmp_path))

