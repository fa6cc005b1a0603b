"""The experiment configuration of a run folder: what counts as the same experiment and what tells variants apart."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from dara import PROJECT_ROOT
from dara import run_folder as rf
from dara.config import compose
from dara.run_folder import absolute_run_paths


def _config(**changes):
    base = {"run": {"seed": 0, "name": "smoke-tiny-dara_asym-s0", "output_dir": "/a/b", "task": "smoke"},
            "data": {"seed": 0, "train_batch_size": 8},
            "algorithm": {"adv_estimator": "dara_asym", "dara": {"w_max": 5.0, "reward_ranges": None}},
            "trainer": {"save_freq": 1, "total_training_steps": 3, "logger": ["console"]},
            "ray_kwargs": {"ray_init": {"address": "10.0.0.1:6379"}}}
    cfg = OmegaConf.create(base)
    for key, value in changes.items():
        OmegaConf.update(cfg, key, value, force_add=True)
    return cfg


@pytest.mark.parametrize("changes, differences", [
    # where files go, what is logged, how long it runs, cluster plumbing: the same experiment
    ({"trainer.save_freq": 10, "trainer.total_training_steps": 100, "trainer.logger": ["console", "wandb"],
      "run.output_dir": "/c", "ray_kwargs.ray_init.address": "other:1"}, []),
    ({"algorithm.dara.w_max": 2.0}, ["algorithm.dara.w_max"]),
    ({"algorithm.dara.tau": 0.5}, ["algorithm.dara.tau"]),  # a key only one side has
    ({"run.seed": 1, "data.seed": 1}, ["data.seed", "run.seed"]),  # none without_seed
])
def test_what_changes_the_experiment(changes, differences):
    base, other = rf.experiment_config(_config()), rf.experiment_config(_config(**changes))
    assert rf.config_differences(base, other) == differences
    assert rf.config_differences(rf.without_seed(base), rf.without_seed(other)) == [
        k for k in differences if "seed" not in k]
    assert rf.flatten({"a": {"b": [1, {"c": 2}], "d": {}}, "e": None}) == {"a.b": [1, {"c": 2}], "a.d": {}, "e": None}


def _folder_with_run(tmp_path, config, steps=2):
    """A run folder as dara.train leaves it: run_info.json with its experiment configuration, logged steps."""
    run_dir = tmp_path / "smoke-tiny-dara_asym-s0"
    run_dir.mkdir()
    (run_dir / rf.RUN_INFO).write_text(json.dumps({"run_name": run_dir.name, "config": rf.experiment_config(config)}))
    (run_dir / rf.METRICS_FILE).write_text("".join(json.dumps({"step": s}) + "\n" for s in range(1, steps + 1)))
    return run_dir


def test_a_folder_of_another_configuration_is_refused_naming_the_keys_and_a_name_of_its_own(tmp_path):
    """Unless the folder holds no result (no step, no checkpoint) or no recorded config; keys only one side has
    (the code gained an option since that run started) are not differences."""
    run_dir = _folder_with_run(tmp_path, _config(), steps=0)  # failed before its first step
    base, capped = rf.experiment_config(_config()), rf.experiment_config(_config(**{"algorithm.dara.w_max": 2.0}))
    rf.check_same_experiment(run_dir, capped, "x", 0)
    (run_dir / rf.CHECKPOINTS / "global_step_1").mkdir(parents=True)  # a checkpoint is a result
    longer = _config(**{"trainer.total_training_steps": 30, "trainer.save_freq": 5})
    rf.check_same_experiment(run_dir, rf.experiment_config(longer), "smoke-tiny-dara_asym-s0", 0)  # resumes, extends
    files = {path: path.read_bytes() for path in run_dir.rglob("*") if path.is_file()}
    with pytest.raises(rf.RunFolderError) as refused:
        rf.check_same_experiment(run_dir, {**capped, "algorithm.dara.eps": 1e-6}, "smoke-tiny-dara_asym-s0", 0)
    line = str(refused.value)
    assert "\n" not in line and "algorithm.dara.w_max (5.0 there, 2.0 here)" in line
    assert "run.name=smoke-tiny-dara_asym-w_max2.0-s0" in line and "algorithm.dara.eps" not in line
    assert {path: path.read_bytes() for path in run_dir.rglob("*") if path.is_file()} == files  # left as it was
    assert rf.suggested_name("mine", 0, {"a.tau": 0.5, "b.form": "asym", "c": 1}) == "mine-tau0.5-formasym"
    assert rf.check_same_experiment(run_dir, {**base, "algorithm.dara.eps": 1e-6}, "x", 0) == ["algorithm.dara.eps"]
    (run_dir / rf.RUN_INFO).write_text(json.dumps({"run_name": "x"}))  # recorded before configs were
    assert rf.check_same_experiment(run_dir, capped, "x", 0) == []
    rf.check_same_experiment(tmp_path / "new", capped, "x", 0)


def test_names_derived_from_the_run_name_are_not_the_experiment(tmp_path):
    def composed(*overrides):
        cfg = compose([f"run.output_root={tmp_path}", *overrides], resolve=False)
        absolute_run_paths(cfg)
        OmegaConf.resolve(cfg)
        return rf.experiment_config(cfg)

    plain = composed()
    assert rf.config_differences(plain, composed("run.name=mine", "trainer.total_training_steps=9")) == []
    assert rf.config_differences(plain, composed("run.name=mine", "algorithm.dara.w_max=2")) == ["algorithm.dara.w_max"]
    old_record = {**plain, "actor_rollout_ref.rollout.trace.experiment_name": "x"}  # before it was left out
    run_dir = _folder_with_run(tmp_path, OmegaConf.create({}))
    (run_dir / rf.RUN_INFO).write_text(json.dumps({"config": old_record}))
    rf.check_same_experiment(run_dir, composed("run.name=mine"), "mine", 0)


def test_paths_under_the_output_root_or_the_project_do_not_tie_a_configuration_to_a_machine(tmp_path):
    def at(root):
        return _config(**{"run.output_root": str(root), "data.train_files": str(root / "assets" / "train.parquet"),
                          "reward.path": str(PROJECT_ROOT / "rewards" / "verl_entry.py"),
                          "actor_rollout_ref.model.path": "/models/qwen"})

    here, there = rf.experiment_config(at(tmp_path / "a")), rf.experiment_config(at(tmp_path / "b"))
    assert here == there
    assert here["data.train_files"] == "<output_root>/assets/train.parquet"
    assert here["reward.path"] == "<project>/rewards/verl_entry.py"
    assert here["actor_rollout_ref.model.path"] == "/models/qwen"  # outside both: kept as it is
