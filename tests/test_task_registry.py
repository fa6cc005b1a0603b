"""The task registry: every data_source dispatch is a lookup, and a registered task is scored like the others."""

from __future__ import annotations

import pytest

from rewards import verl_entry
from tasks import math as math_task
from tasks import toolrl as toolrl_task
from tasks.registry import (
    TaskSpec,
    asset_builders,
    data_sources,
    datasets,
    evaluations,
    load_ref,
    register_task,
    task_for_source,
    task_specs,
    unregister_task,
)


def test_every_part_a_task_names_loads():
    specs = task_specs()
    assert list(specs)[:2] == ["toolrl", "math"]
    for spec in specs.values():
        reward = load_ref(spec.reward)
        assert callable(reward.score) and callable(reward.fallback)
        for module in spec.datasets.values():
            loaded = load_ref(module)
            assert loaded.DESCRIPTION and callable(loaded.add_arguments) and callable(loaded.main)
        for builder in spec.assets.values():
            assert callable(load_ref(builder))
        for bench in spec.evaluations.values():
            assert load_ref(bench).name in spec.evaluations
    assert task_for_source(toolrl_task.DATA_SOURCE) is toolrl_task.SPEC
    assert {task_for_source(s).name for s in math_task.MATH_SOURCES} == {"math"}
    assert data_sources() == {toolrl_task.DATA_SOURCE, *math_task.MATH_SOURCES}
    assert set(asset_builders()) == {"smoke", "smoke_math", "tiny_model", "smoke_sparse", "tiny_sparse_model",
                                     "smoke_rare", "tiny_rare_model", "smoke_length", "tiny_length_model"}
    assert set(datasets()) == {"toolrl", "bfcl", "smoke", "smoke_sparse", "deepscaler", "math_eval", "smoke_length"}
    assert set(evaluations()) == {"toolrl", "bfcl", "math"}


def test_the_command_lines_list_what_the_registry_holds():
    from data_prep.__main__ import parser as data_prep_parser
    from results.evaluation.cli import build_parser

    assert set(data_prep_parser()._subparsers._group_actions[0].choices) == set(datasets())
    bench = next(a for a in build_parser()._actions if a.dest == "bench")
    assert set(bench.choices) == set(evaluations())


def test_channels_and_ranges_are_declared_once_by_name_in_the_reward():
    three = verl_entry.reward_channels(toolrl_task.DATA_SOURCE, {"toolrl_length_channel": True})
    assert three == {"format": (0.0, 1.0), "correctness": (-3.0, 3.0), "length": (0.0, 1.0)}
    assert verl_entry.reward_channels("math500") == {"correctness": (0.0, 1.0), "length": (0.0, 1.0)}
    # every value a scorer can give lies in its declared range (the fallback is each channel's low)
    options = verl_entry.RewardOptions(toolrl_length_channel=True)
    fallback = verl_entry.fallback_sample("rlla", None, options)
    assert {k: v for k, v in fallback.items() if k != "score"} == {c: low for c, (low, _) in three.items()}


class CoinReward:
    """A task of a plugin: one channel, 1 when the response says "heads"."""

    in_process = True

    def channels(self, options):
        return {"heads": (0.0, 1.0)}

    def score(self, solution_str, ground_truth, response_tokens, options):
        return {"heads": float("heads" in solution_str)}

    def fallback(self, response_tokens, options):
        return {"heads": 0.0}


COIN = CoinReward()


@pytest.fixture
def coin_task():
    spec = register_task(TaskSpec(name="coin", data_sources=("coin_flip",), reward=f"{__name__}:COIN"))
    yield spec
    unregister_task("coin")


def test_a_registered_task_is_scored_by_the_projects_entry(coin_task):
    assert verl_entry.compute_score("coin_flip", "it is heads", "") == {"score": 1.0, "heads": 1.0}
    assert verl_entry.reward_channels("coin_flip") == {"heads": (0.0, 1.0)}
    assert verl_entry.task_of("coin_flip") == "coin"
    with pytest.raises(ValueError, match="already belong to task 'coin'"):
        register_task(TaskSpec(name="coin2", data_sources=("coin_flip",), reward=f"{__name__}:COIN"))
    unregister_task("coin")
    with pytest.raises(ValueError, match="unknown data_source 'coin_flip'"):
        verl_entry.compute_score("coin_flip", "heads", "")


def test_load_ref_names_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match="no_such_module"):
        load_ref("no_such_module:x")
    with pytest.raises(ValueError, match="has no attribute 'nope'"):
        load_ref("tasks.registry:nope")
    module = tmp_path / "builder.py"
    module.write_text("def build(assets_dir, output_root):\n    return assets_dir\n")
    build = load_ref(f"{module}:build")
    assert build("a", "b") == "a" and load_ref(f"{module}:build") is build  # loaded once
    # a file that is an importable module's is that module, not a copy
    assert load_ref(f"{toolrl_task.__file__}:SPEC") is toolrl_task.SPEC
