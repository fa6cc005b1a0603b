"""The task registry (every data_source dispatch is a lookup, a registered task is scored like the others) and a task
of your own (examples/my_task copied outside the repository): found through Hydra's search path, composed with the
project's models, estimators and clusters, passing the preflight; its recipe too."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pandas as pd
import pytest
from omegaconf import OmegaConf

import dara
from dara.config import compose, search_dirs, with_verl_searchpath
from dara.config_checks import check_config
from rewards import verl_entry
from tasks import math as math_task
from tasks import registry
from tasks import toolrl as toolrl_task


def test_every_part_a_task_names_loads():
    specs = registry.task_specs()
    assert list(specs)[:2] == ["toolrl", "math"]
    for spec in specs.values():
        reward = registry.load_ref(spec.reward)
        assert callable(reward.score) and callable(reward.fallback)
        assert all(callable(registry.load_ref(builder)) for builder in spec.assets.values())
        assert all(registry.load_ref(bench).name in spec.evaluations for bench in spec.evaluations.values())
        for module in map(registry.load_ref, spec.datasets.values()):
            assert module.DESCRIPTION and callable(module.add_arguments) and callable(module.main)
    assert registry.task_for_source(toolrl_task.DATA_SOURCE) is toolrl_task.SPEC
    assert {registry.task_for_source(s).name for s in math_task.MATH_SOURCES} == {"math"}
    assert registry.data_sources() == {toolrl_task.DATA_SOURCE, *math_task.MATH_SOURCES}
    assert set(registry.asset_builders()) == {"smoke", "smoke_math", "tiny_model", "smoke_sparse", "tiny_sparse_model",
                                              "smoke_rare", "tiny_rare_model", "smoke_length", "tiny_length_model"}
    assert set(registry.datasets()) == {"toolrl", "smoke", "smoke_sparse", "deepscaler", "math_eval", "smoke_length"}
    assert set(registry.evaluations()) == {"toolrl", "bfcl", "math"}


def test_the_command_lines_list_what_the_registry_holds():
    from data_prep.__main__ import parser as data_prep_parser
    from results.evaluation.cli import build_parser

    assert set(data_prep_parser()._subparsers._group_actions[0].choices) == set(registry.datasets())
    bench = next(a for a in build_parser()._actions if a.dest == "bench")
    assert set(bench.choices) == set(registry.evaluations())


def test_channels_and_ranges_are_declared_once_by_name_in_the_reward():
    three = verl_entry.reward_channels(toolrl_task.DATA_SOURCE, {"toolrl_length_channel": True})
    assert three == {"format": (0.0, 1.0), "correctness": (-3.0, 3.0), "length": (0.0, 1.0)}
    assert verl_entry.reward_channels("math500") == {"correctness": (0.0, 1.0), "length": (0.0, 1.0)}
    # the fallback is each channel's low
    fallback = verl_entry.fallback_sample("rlla", None, verl_entry.RewardOptions(toolrl_length_channel=True))
    assert {k: v for k, v in fallback.items() if k != "score"} == {c: low for c, (low, _) in three.items()}


# A task of a plugin: one channel, 1 when the response says "heads".
COIN = SimpleNamespace(in_process=True, channels=lambda options: {"heads": (0.0, 1.0)},
                       score=lambda solution_str, ground_truth, tokens, options: {"heads": float("heads" in solution_str)},
                       fallback=lambda tokens, options: {"heads": 0.0})


def test_a_registered_task_is_scored_by_the_projects_entry():
    spec = registry.TaskSpec(name="coin", data_sources=("coin_flip",), reward=f"{__name__}:COIN")
    assert registry.register_task(spec) is registry.register_task(spec)  # idempotent for an equal spec
    assert verl_entry.compute_score("coin_flip", "it is heads", "") == {"score": 1.0, "heads": 1.0}
    assert verl_entry.reward_channels("coin_flip") == {"heads": (0.0, 1.0)}
    assert verl_entry.task_of("coin_flip") == "coin"
    with pytest.raises(ValueError, match="already belong to task 'coin'"):
        registry.register_task(registry.TaskSpec(name="coin2", data_sources=("coin_flip",), reward=f"{__name__}:COIN"))
    registry.unregister_task("coin")
    with pytest.raises(ValueError, match="unknown data_source 'coin_flip'"):
        verl_entry.compute_score("coin_flip", "heads", "")
    with pytest.raises(ValueError, match="one of the project's own"):
        registry.unregister_task("toolrl")


def test_load_ref_names_what_is_wrong(tmp_path):
    for ref, message in (("no_such_module:x", "no_such_module"), ("tasks.registry:nope", "has no attribute 'nope'")):
        with pytest.raises(ValueError, match=message):
            registry.load_ref(ref)
    module = tmp_path / "builder.py"
    module.write_text("def build(assets_dir, output_root):\n    return assets_dir\n")
    build = registry.load_ref(f"{module}:build")
    assert build("a", "b") == "a" and registry.load_ref(f"{module}:build") is build  # loaded once
    # a file that is an importable module's is that module, not a copy
    assert registry.load_ref(f"{toolrl_task.__file__}:SPEC") is toolrl_task.SPEC


EXAMPLE = dara.PROJECT_ROOT / "examples" / "my_task"


@pytest.fixture(scope="module")
def own_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("elsewhere") / "my_task"
    shutil.copytree(EXAMPLE, folder)
    return folder


def test_the_search_path_override_keeps_verls_config_folder():
    kept = "hydra.searchpath=[pkg://verl.trainer.config,file:///a]"
    assert with_verl_searchpath(["task=x", "hydra.searchpath=[file:///a]", kept]) == ["task=x", kept, kept]
    assert with_verl_searchpath(["hydra.searchpath=[]"]) == ["hydra.searchpath=[pkg://verl.trainer.config]"]
    assert [str(p) for p in search_dirs(["hydra.searchpath=[file:///a, pkg://x, file://b]"])] == ["/a", "b"]


@pytest.mark.parametrize("cluster", ["cpu", "a100_40g_x4"])
def test_the_task_composes_from_its_own_folder_and_follows_its_reward(own_folder, cluster):
    from dara.preflight import preflight

    model = "tiny" if cluster == "cpu" else "qwen2.5-1.5b-instruct"
    cfg = compose([f"hydra.searchpath=[file://{own_folder}]", "task=my_task", f"model={model}",
                   f"cluster={cluster}", "estimator=saw"])
    check_config(cfg)
    assert cfg.run.name == f"my_task-{model}-saw-s0"
    assert cfg.reward.custom_reward_function.path == str(own_folder / "reward.py")
    assert cfg.run.assets == f"{own_folder / 'build_data.py'}:build"
    assert list(cfg.algorithm.reward_channels) == ["answer", "short"]
    assert OmegaConf.to_container(cfg.algorithm.dara.reward_ranges) == {"answer": [0.0, 1.0], "short": [0.0, 1.0]}
    if cluster == "cpu":
        report = preflight(cfg, skip_env=True)
        assert report.ok, report.text()


def test_a_missing_file_beside_the_task_is_named(own_folder, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(own_folder, broken)
    (broken / "reward.py").unlink()
    with pytest.raises(Exception, match=r"dara.searchpath:reward.py.*no reward.py in the folders of hydra.searchpath"):
        compose([f"hydra.searchpath=[file://{broken}]", "task=my_task"])


def test_the_builder_writes_verl_rows_its_reward_scores(own_folder, tmp_path):
    registry.load_ref(f"{own_folder / 'build_data.py'}:build")(str(tmp_path), str(tmp_path))
    train = pd.read_parquet(tmp_path / "train.parquet")
    assert len(train) == 64 and len(pd.read_parquet(tmp_path / "test.parquet")) == 8
    assert list(train.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    score = registry.load_ref(f"{own_folder / 'reward.py'}:compute_score")
    truth = train.reward_model[0]["ground_truth"]
    assert score("my_task", f"The answer is {truth}.", truth, {"response_tokens": 6}) == {
        "score": 2.0, "answer": 1.0, "short": 1.0}


def test_a_recipe_of_your_own_runs_from_its_file(own_folder, tmp_path, capsys):
    from recipes.__main__ import main
    from recipes.runner import expected_steps

    assert main([str(own_folder / "recipe.py"), "--dry-run", "--output-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "[recipes] my_task: 4 runs" in out and out.count("python -m dara.train task=my_task") == 4
    assert f"hydra.searchpath=[file://{own_folder}]" in out
    runs = registry.load_ref(f"{own_folder / 'recipe.py'}:runs")()
    assert expected_steps(runs[0]) == 3  # read from the task file in the recipe's folder (over conf/task/smoke)
    assert main([str(own_folder / "build_data.py")]) == 2 and "defines no DESCRIPTION" in capsys.readouterr().err
