"""A task of your own (examples/my_task copied outside the repository): found through Hydra's search path, composed
with the project's models, estimators and clusters, passing the preflight; its recipe too."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
from omegaconf import OmegaConf

import dara
from dara.config import compose, search_dirs, with_verl_searchpath
from dara.config_checks import check_config
from tasks.registry import load_ref

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
    load_ref(f"{own_folder / 'build_data.py'}:build")(str(tmp_path), str(tmp_path))
    train = pd.read_parquet(tmp_path / "train.parquet")
    assert len(train) == 64 and len(pd.read_parquet(tmp_path / "test.parquet")) == 8
    assert list(train.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    score = load_ref(f"{own_folder / 'reward.py'}:compute_score")
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
    runs = load_ref(f"{own_folder / 'recipe.py'}:runs")()
    assert expected_steps(runs[0]) == 3  # read from the task file in the recipe's folder (over conf/task/smoke)
    assert main([str(own_folder / "build_data.py")]) == 2 and "defines no DESCRIPTION" in capsys.readouterr().err
