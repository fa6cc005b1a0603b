"""Checks that reject an invalid experiment before Ray starts, each with a message naming the problem."""

from __future__ import annotations

import os

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from dara.estimators import ESTIMATOR_NAMES
from dara.estimators.normalization import BATCH_NORM_MODES


class ConfigError(ValueError):
    """An experiment configuration that cannot run."""


def _library_estimator(name: str) -> str | None:
    if name in ESTIMATOR_NAMES:
        return name
    if name.startswith("dara_") and name[5:] in ESTIMATOR_NAMES:
        return name[5:]
    return None


def check_config(cfg: DictConfig) -> None:
    for key in ("run.task", "run.model", "run.name"):
        try:
            OmegaConf.select(cfg, key, throw_on_missing=True)
        except MissingMandatoryValue:
            raise ConfigError(f"{key} is not set: choose a task and a model (e.g. task=smoke model=tiny)") from None
    _check_allocation(cfg)
    algorithm = cfg.algorithm
    name = _library_estimator(str(algorithm.adv_estimator))
    if name is None:
        return  # one of verl's own estimators: verl validates it
    mode = str(cfg.trainer.v1.trainer_mode)
    if not mode.startswith("dara_"):
        raise ConfigError(
            f"adv_estimator={algorithm.adv_estimator} needs the project's trainer (trainer.v1.trainer_mode=dara_sync "
            f"or dara_colocate_async / dara_separate_async), got trainer_mode={mode}"
        )
    channels = list(algorithm.reward_channels or [])
    if not channels or len(set(channels)) != len(channels):
        raise ConfigError(f"algorithm.reward_channels must name distinct reward channels, got {channels}")
    k = len(channels)
    weights = algorithm.channel_weights
    if weights is not None and len(weights) != k:
        raise ConfigError(f"algorithm.channel_weights has {len(weights)} entries for {k} reward_channels {channels}")
    if name == "static" and weights is None:
        raise ConfigError("estimator=static needs algorithm.channel_weights (e.g. [1, 5] for correctness, length)")
    if algorithm.batch_norm not in BATCH_NORM_MODES:
        raise ConfigError(f"algorithm.batch_norm must be one of {BATCH_NORM_MODES}, got {algorithm.batch_norm!r}")
    dara = algorithm.dara
    if float(dara.w_max) < 1:
        raise ConfigError(f"algorithm.dara.w_max must be >= 1, got {dara.w_max}")
    if name in ("saw", "sa_mrpo"):
        ranges = dara.reward_ranges
        if ranges is None or len(ranges) != k or any(float(lo) >= float(hi) for lo, hi in ranges):
            raise ConfigError(
                f"estimator={name} needs algorithm.dara.reward_ranges: one [min, max] per channel {channels}, "
                f"got {OmegaConf.to_container(ranges) if ranges is not None else None}"
            )
    if dara.static_form not in ("sym", "asym"):
        raise ConfigError(f"algorithm.dara.static_form must be sym or asym, got {dara.static_form!r}")
    if dara.gd2po_query_weight not in ("before_whiten", "after_whiten"):
        raise ConfigError(f"algorithm.dara.gd2po_query_weight must be before_whiten or after_whiten, "
                          f"got {dara.gd2po_query_weight!r}")


def _check_allocation(cfg: DictConfig) -> None:
    """Divisibility by trainer.nnodes x n_gpus_per_node (verl asserts it only after a rollout): dara.preflight."""
    from dara.preflight.allocation import divisibility_problems
    from dara.preflight.facts import model_facts

    problems = divisibility_problems(cfg, model_facts(cfg))
    if problems:
        raise ConfigError("allocation: " + "; ".join(problems))


def check_inputs(cfg: DictConfig) -> None:
    """Local data files and model folders exist (hub ids are left to the loaders)."""
    for key in ("data.train_files", "data.val_files"):
        files = OmegaConf.select(cfg, key)
        for path in [files] if isinstance(files, str) else list(files or []):
            if not os.path.exists(path):
                raise ConfigError(f"{key}: {path} does not exist (prepare it with `python -m data_prep ...`)")
    model = str(cfg.actor_rollout_ref.model.path)
    if model.startswith(("/", ".", "~")) and not os.path.isdir(os.path.expanduser(model)):
        raise ConfigError(f"actor_rollout_ref.model.path: {model} is not a folder")
