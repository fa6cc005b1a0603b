"""An estimator of one's own in TRL: `DaraGRPOConfig(estimator_module=..., estimator=..., estimator_options=...)`,
the options TRL's config derives from the library's table, and a run of TRL's trainer with the example
estimator (examples/my_estimator/density_power.py) logging the library's diagnostics."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from transformers import HfArgumentParser

import dara
from dara.estimators import ESTIMATORS, DaraAlgoConfig
from dara.estimators.config import FIELD_HELP
from dara.trl import DaraGRPOConfig, completion_advantages
from dara.trl.config import DERIVED_FIELDS
from tests.trl.trl_recording import grpo_config as _config

EXAMPLE = dara.PROJECT_ROOT / "examples" / "my_estimator" / "density_power.py"  # registered for the module


def test_the_scalar_options_are_the_librarys_fields_not_restated():
    ours = {f.name: f for f in dataclasses.fields(DaraGRPOConfig)}
    library = DaraAlgoConfig()
    for name in DERIVED_FIELDS:
        assert ours[name].default == getattr(library, name), name
        assert ours[name].metadata["help"] == FIELD_HELP[name] != "", name
    assert {"rvpo_k", "dead_channel_weight"} <= set(DERIVED_FIELDS)
    assert ours["estimator_module"].metadata["help"] == FIELD_HELP["estimator_module"]


def test_a_module_of_ones_own_and_its_options_in_the_config(tmp_path):
    config = _config(tmp_path, estimator_module=str(EXAMPLE), estimator="density_power",
                     estimator_options={"power": 1})
    assert "density_power" in ESTIMATORS and config.batch_norm == "response"
    options = config.algo_config(["format", "correctness"]).keywords()
    assert options["options"] == {"power": 1} and "estimator_module" not in options
    with pytest.raises(ValueError, match=r"option power=-2.0 \(options.power\) fails its check: must be >= 0"):
        _config(tmp_path, estimator_module=str(EXAMPLE), estimator="density_power", estimator_options={"power": -2})
    with pytest.raises(ValueError, match=r"estimator 'density_power' has no option\(s\) \['powr'\]"):
        _config(tmp_path, estimator_module=str(EXAMPLE), estimator="density_power", estimator_options={"powr": 1})
    with pytest.raises(ValueError, match=r"estimator 'gdpo' has no option\(s\) \['power'\]"):
        _config(tmp_path, estimator="gdpo", estimator_options={"power": 1})


def test_an_unknown_estimator_or_a_bad_module_is_one_line(tmp_path):
    with pytest.raises(ValueError) as error:
        _config(tmp_path, estimator="density_powr")
    assert "\n" not in str(error.value) and "registered: grpo, gdpo" in str(error.value)
    assert "estimator_module=PATH" in str(error.value)
    with pytest.raises(ValueError, match=r"estimator module .*absent.py: no such file"):
        _config(tmp_path, estimator_module=str(tmp_path / "absent.py"), estimator="density_power")


def test_the_command_line_takes_the_module_the_options_the_ranges_and_the_new_fields(tmp_path):
    (config,) = HfArgumentParser(DaraGRPOConfig).parse_args_into_dataclasses([
        "--output_dir", str(tmp_path), "--use_cpu", "--bf16", "false", "--num_generations", "4",
        "--per_device_train_batch_size", "8", "--estimator_module", str(EXAMPLE), "--estimator", "density_power",
        "--estimator_options", json.dumps({"power": 0.25}), "--rvpo_k", "2", "--dead_channel_weight", "w_max",
        "--eps", "1e-4", "--reward_ranges", json.dumps({"correctness": [-3, 3], "format": [0, 1]}),
    ])
    assert config.estimator == "density_power" and config.estimator_options == {"power": 0.25}
    assert config.rvpo_k == 2.0 and config.dead_channel_weight == "w_max" and config.eps == 1e-4
    algo = config.algo_config(["format", "correctness"])
    assert algo.rvpo_k == 2.0 and algo.reward_ranges == {"format": [0.0, 1.0], "correctness": [-3.0, 3.0]}
    with pytest.raises(ValueError, match=r"reward_ranges names \['correctness'\], not among"):
        config.algo_config(["format", "length"])


def test_rvpo_and_the_dead_channel_weight_reach_the_completions_advantages(tmp_path):
    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0]] * 2)  # channel 1 dead
    config = _config(tmp_path, estimator="dara_asym", dead_channel_weight="w_max")
    _, metrics = completion_advantages(rewards, 4, ["a", "b"], "dara_asym", config.algo_config(["a", "b"]).keywords())
    assert metrics["dara/weight/b"] == 5.0
    config = _config(tmp_path, estimator="rvpo", rvpo_k=2.0)
    _, metrics = completion_advantages(rewards, 4, ["a", "b"], "rvpo", config.algo_config(["a", "b"]).keywords())
    assert metrics["dara/rvpo/k"] == 2.0


@pytest.mark.slow  # TRL's trainer, two steps of the smoke model, after the session's smoke build
def test_the_example_estimator_trains_in_trls_trainer_with_the_librarys_diagnostics(smoke_assets, tmp_path):
    from dara.trl.smoke import smoke_config, smoke_trainer
    from tests.trl.trl_recording import RecordingTrainer
    config = smoke_config(tmp_path / "trl", max_steps=2, estimator_module=str(EXAMPLE), estimator="density_power",
                          estimator_options={"power": 1.0})
    trainer = smoke_trainer(smoke_assets, config, trainer_class=RecordingTrainer)
    trainer.train()
    assert trainer.state.global_step == 2 and all(math.isfinite(b["loss"]) for b in trainer.loss_batches)
    names = trainer.reward_func_names
    for batch in trainer.batches:
        expected, _ = completion_advantages(batch["rewards"], 4, names, "density_power", trainer.dara_options)
        torch.testing.assert_close(batch["dara"], expected)
    logged = [entry for entry in trainer.state.log_history if "dara/density/correctness" in entry]
    assert len(logged) == 2
    for entry in logged:  # the example's weights, logged as the library's diagnostics
        density = [entry[f"dara/density/{n}"] for n in names]
        weight = [entry[f"dara/weight/{n}"] for n in names]
        assert weight == pytest.approx([max(density) / d if d > 0 else 1.0 for d in density])  # power 1
