"""The Hydra entry without starting Ray: composition, `--cfg job`, config checks."""

from __future__ import annotations

from dataclasses import asdict

import pytest
import torch
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

import dara
from dara.config import CONF_DIR, compose, library_estimator
from dara.config_checks import ConfigError, check_config, composition_error_line
from dara.estimators import ESTIMATOR_NAMES, DaraAlgoConfig, compute_advantages, diagnose


def composed(*overrides: str):
    return compose(overrides, resolve=False)


def test_default_composes_to_smoke_dara_asym():
    cfg = composed()
    assert cfg.run.task == "smoke" and cfg.run.model == "tiny"
    assert cfg.algorithm.adv_estimator == "dara_asym"
    assert cfg.trainer.v1.trainer_mode == "dara_sync"
    assert cfg.algorithm.reward_channels is None  # the task restates no channels: the reward declares them
    assert cfg.run.name == "smoke-tiny-dara_asym-s0"
    assert cfg.reward.custom_reward_function.path == f"{dara.PROJECT_ROOT}/rewards/verl_entry.py"
    check_config(cfg)
    assert list(cfg.algorithm.reward_channels) == ["format", "correctness"]
    assert cfg.algorithm.dara.reward_ranges == {"format": [0.0, 1.0], "correctness": [-3.0, 3.0]}  # the reward's
    assert set(cfg.algorithm.dara) == set(asdict(DaraAlgoConfig()))  # every default shown


@pytest.mark.parametrize("estimator", sorted({*ESTIMATOR_NAMES, "gd2po_hard_after"} - {"static"}))
def test_every_estimator_config_composes(estimator):
    cfg = composed(f"estimator={estimator}")
    assert library_estimator(str(cfg.algorithm.adv_estimator)) in ESTIMATOR_NAMES
    check_config(cfg)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["algorithm.dara.weights=[1,2,3]"], "3 entries for 2"),
        (["estimator=saw", "algorithm.dara.reward_ranges.lenght=[0,1]"], r"reward_ranges names \['lenght'\]"),
        (["algorithm.reward_channels=[format,format]"], "distinct"),
        (["trainer.v1.trainer_mode=sync"], "project's trainer"),
        (["algorithm.dara.w_max=0.5"], "w_max"),  # the estimator options' own checks: tests/test_estimators.py
        (["algorithm.reward_channels=[format,length]"],
         r"'length'.*the reward's channels are \['format', 'correctness'\]"),
        (["task=deepscaler", "algorithm.reward_channels=[correctness,format]"],
         r"'format'.*the reward's channels are \['correctness', 'length'\]"),
    ],
)
def test_invalid_combinations_fail_before_ray(overrides, message):
    with pytest.raises(ConfigError, match=message):
        check_config(composed(*overrides))


def test_reward_channels_and_ranges_come_from_the_reward_by_name():
    for overrides, ranges in [
        (["task=deepscaler"], {"correctness": [0, 1], "length": [0, 1]}),
        # one channel overridden by name (no "+": the node takes any channel), the others still the reward's
        (["task=toolrl_three_rewards", "algorithm.dara.reward_ranges.correctness=[-4,4]"],
         {"format": [0, 1], "correctness": [-4, 4], "length": [0, 1]}),
        # a subset of the channels takes only theirs
        (["task=toolrl_three_rewards", "algorithm.reward_channels=[length,format]"], {"length": [0, 1], "format": [0, 1]}),
    ]:
        cfg = composed(*overrides, "estimator=saw")
        check_config(cfg)
        assert list(cfg.algorithm.reward_channels) == list(ranges)
        assert OmegaConf.to_container(cfg.algorithm.dara.reward_ranges) == ranges


@pytest.mark.parametrize("override, line", [
    ("algorithm.dara.wmax=2",
     "Could not override 'algorithm.dara.wmax': Key 'wmax' not in 'DaraAlgoConfig'; "
     "To append to your config use +algorithm.dara.wmax=2"),
    ("algorithm.dara.w_max=big",
     "Error merging override algorithm.dara.w_max=big: Value 'big' of type 'str' could not be converted to Float"),
    ("estimator=nope", "In 'train': Could not find 'estimator/nope'; Available options in 'estimator': "
     + ", ".join(sorted(path.stem for path in (CONF_DIR / "estimator").glob("*.yaml")))),
    ("run.seed=[", None),  # a parse error: the message names the override text
])
def test_composition_errors_become_one_line_naming_the_override(override, line):
    with pytest.raises((HydraException, OmegaConfBaseException)) as caught:
        composed(override)
    assert "\n" in str(caught.value) + str(caught.value.__cause__ or "")  # Hydra's own report is several lines
    message = composition_error_line(caught.value)
    assert "\n" not in message and "full_key" not in message and "search path" not in message
    assert message == line if line is not None else message.startswith(f"{override}: ")


@pytest.mark.slow  # a dara.train process (~9 s of imports) building the smoke assets
@pytest.mark.starts  # past the checks it takes the host's weight-sync lock, which a training test may hold
def test_verls_own_config_check_fails_in_one_line_before_ray(tmp_path, python_module):
    """Past the project's checks (theirs: test_cli_errors.py; run_info.json is written, the smoke assets built):
    verl's own validate_config, in one line after nothing but the asset build's progress bars."""
    out = python_module("dara.train", f"run.output_root={tmp_path}", "data.train_batch_size=3", timeout=180)
    lines = out.stderr.strip().splitlines()
    assert out.returncode != 0 and lines[-1].startswith("[dara] invalid ") and "train_batch_size" in lines[-1], (
        out.stderr[-2000:])
    assert all("%|" in line for line in lines[:-1] if line.strip()), out.stderr[-2000:]
    assert "Traceback" not in out.stderr + out.stdout and not list(tmp_path.rglob("ray"))  # Ray never started


@pytest.mark.slow  # a dara.train process (~9 s of imports)
def test_cfg_job_prints_without_running_and_verbose_becomes_run_verbose(tmp_path, python_module):
    out = python_module("dara.train", "--verbose", "task=deepscaler", "estimator=gd2po_snr",
                        f"run.output_root={tmp_path}", "--cfg", "job", "--resolve", timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    printed = OmegaConf.create(out.stdout)
    assert printed.algorithm.adv_estimator == "gd2po_snr"
    assert printed.algorithm.dara.batch_norm == "response"  # the math task's, as for gd2po_hard
    assert printed.run.name == "deepscaler-tiny-gd2po_snr-s0" and printed.run.checkpoint.keep_last == 2
    assert printed.run.verbose is True  # `--verbose` is the run.verbose override
    assert not any(tmp_path.iterdir())  # nothing was started or written


def test_diagnose_agrees_with_estimator_metrics():
    scores, index = torch.randint(0, 3, (40, 2), generator=torch.Generator().manual_seed(0)).float(), torch.arange(40) // 4
    _, metrics = compute_advantages("gdpo", scores, index, torch.ones(40, 2), channel_names=["a", "b"])
    diag = diagnose(scores, index, channel_names=["a", "b"])
    assert {"density/a", "energy/b", "energy_vs_ideal/a", "active_groups/b"} <= set(diag)
    assert {key: metrics[key] for key in diag} == pytest.approx(diag)
