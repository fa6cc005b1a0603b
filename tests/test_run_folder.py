"""The experiment configuration of a run folder: what counts as the same experiment and what tells variants apart."""

from __future__ import annotations

from omegaconf import OmegaConf

from dara.run_folder import config_differences, experiment_config, flatten, without_seed


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


def test_flatten_gives_dotted_keys_and_keeps_lists_and_empty_mappings():
    flat = flatten({"a": {"b": [1, {"c": 2}], "d": {}}, "e": None})
    assert flat == {"a.b": [1, {"c": 2}], "a.d": {}, "e": None}


def test_logging_paths_steps_and_plumbing_do_not_change_the_experiment():
    base = experiment_config(_config())
    same = experiment_config(_config(**{"trainer.save_freq": 10, "trainer.total_training_steps": 100,
                                        "trainer.logger": ["console", "wandb"], "run.output_dir": "/c",
                                        "ray_kwargs.ray_init.address": "other:1"}))
    assert base == same
    assert "algorithm.dara.w_max" in base and not any(k.startswith("ray_kwargs") for k in base)


def test_a_changed_option_is_named_and_the_seed_only_matters_before_without_seed():
    base = experiment_config(_config())
    capped = experiment_config(_config(**{"algorithm.dara.w_max": 2.0}))
    assert config_differences(base, capped) == ["algorithm.dara.w_max"]
    reseeded = experiment_config(_config(**{"run.seed": 1, "data.seed": 1}))
    assert config_differences(base, reseeded) == ["data.seed", "run.seed"]
    assert config_differences(without_seed(base), without_seed(reseeded)) == []
    added = experiment_config(_config(**{"algorithm.dara.tau": 0.5}))
    assert config_differences(base, added) == ["algorithm.dara.tau"]
