"""Checks that reject an invalid experiment before Ray starts, each with a message naming the problem.

`check_config` runs a list of checks (`CONFIG_CHECKS`); a new check is one function appended there.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import MissingMandatoryValue

from dara.estimators import ESTIMATOR_NAMES, DaraAlgoConfig

SCHEMA_NAME = "dara_algo_schema"  # conf/train.yaml's defaults list names it


class ConfigError(ValueError):
    """An experiment configuration that cannot run."""


def register_schema() -> None:
    """`algorithm.dara` is a `DaraAlgoConfig`: Hydra shows its defaults and rejects unknown keys or types."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name=SCHEMA_NAME, node={"algorithm": {"dara": DaraAlgoConfig}})


def composition_error_line(error: BaseException) -> str:
    """A Hydra / OmegaConf composition error as one line: the message, its cause, then Hydra's hints.

    Hydra prints these over several lines (the cause on its own, OmegaConf's `full_key` / `object_type` lines,
    the config search path); the key and the reason are all a user needs, and a list of available options
    ("Available options in 'estimator':" then one per line) becomes one comma-separated clause."""

    def clauses(exc: BaseException) -> list[str]:
        out: list[str] = []
        listing = False  # after a line ending in ":", Hydra lists one option per tab-indented line
        for raw in str(exc).split("Config search path:")[0].splitlines():
            line = raw.strip().rstrip(".")
            if not line or line.startswith(("full_key:", "object_type=", "See https://hydra.cc")):
                continue
            if listing and raw.startswith("\t"):
                out[-1] += (" " if out[-1].endswith(":") else ", ") + line
                continue
            listing = line.endswith(":")
            out.append(line)
        return out

    head, *hints = clauses(error) or [type(error).__name__]
    override = getattr(error, "override", None)  # a parse error names the text, not the override
    if override and override not in head:
        head = f"{override}: {head}"
    cause = clauses(error.__cause__) if error.__cause__ is not None else []
    return "; ".join([head + (f": {'; '.join(cause)}" if cause else ""), *hints])


def library_estimator(name: str) -> str | None:
    if name in ESTIMATOR_NAMES:
        return name
    if name.startswith("dara_") and name[5:] in ESTIMATOR_NAMES:
        return name[5:]
    return None


def _check_required(cfg: DictConfig) -> None:
    for key in ("run.task", "run.model", "run.name"):
        try:
            OmegaConf.select(cfg, key, throw_on_missing=True)
        except MissingMandatoryValue:
            raise ConfigError(f"{key} is not set: choose a task and a model (e.g. task=smoke model=tiny)") from None


def declared_channels(cfg: DictConfig) -> list[str] | None:
    """The channels the task's reward spec declares: `reward_channels(data_source, reward_kwargs)` of the
    reward file (`reward.custom_reward_function.path`) for `run.data_source`; None when either is missing."""
    source = OmegaConf.select(cfg, "run.data_source", default=None)
    path = OmegaConf.select(cfg, "reward.custom_reward_function.path", default=None)
    if source is None or not path or not Path(path).is_file():
        return None
    spec = importlib.util.spec_from_file_location("dara_reward_spec", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    declare = getattr(module, "reward_channels", None)
    if declare is None:
        return None
    kwargs = OmegaConf.select(cfg, "reward.custom_reward_function.reward_kwargs", default=None)
    kwargs = OmegaConf.to_container(kwargs) if kwargs is not None else {}
    try:
        return list(declare(str(source), kwargs))
    except (TypeError, ValueError) as error:
        raise ConfigError(f"reward spec ({path}, run.data_source={source}): {error}") from None


def _check_channels(cfg: DictConfig) -> None:
    """algorithm.reward_channels defaults to the reward's channels; a channel the reward lacks fails here."""
    declared = declared_channels(cfg)
    channels = list(cfg.algorithm.get("reward_channels", None) or [])
    if not channels and declared:
        with open_dict(cfg):
            cfg.algorithm.reward_channels = declared
        channels = declared
    if declared is not None:
        for channel in channels:
            if channel not in declared:
                raise ConfigError(f"reward channel {channel!r} (algorithm.reward_channels) is not one the reward "
                                  f"returns: the reward's channels are {declared} (run.data_source="
                                  f"{cfg.run.data_source})")
    if library_estimator(str(cfg.algorithm.adv_estimator)) is not None and (
            not channels or len(set(channels)) != len(channels)):
        raise ConfigError(f"algorithm.reward_channels must name distinct reward channels, got {channels}")


def _check_estimator(cfg: DictConfig) -> None:
    algorithm = cfg.algorithm
    name = library_estimator(str(algorithm.adv_estimator))
    if name is None:
        return  # one of verl's own estimators: verl validates it
    mode = str(cfg.trainer.v1.trainer_mode)
    if not mode.startswith("dara_"):
        raise ConfigError(
            f"adv_estimator={algorithm.adv_estimator} needs the project's trainer (trainer.v1.trainer_mode=dara_sync "
            f"or dara_colocate_async / dara_separate_async), got trainer_mode={mode}"
        )
    try:
        options = DaraAlgoConfig.from_mapping(algorithm.get("dara", None))
        options.check_for(name, list(algorithm.reward_channels))
    except ValueError as error:
        raise ConfigError(f"algorithm.dara: {error}") from None


def _check_allocation(cfg: DictConfig) -> None:
    """Divisibility by trainer.nnodes x n_gpus_per_node (verl asserts it only after a rollout): dara.preflight."""
    from dara.preflight.allocation import divisibility_problems
    from dara.preflight.facts import model_facts

    problems = divisibility_problems(cfg, model_facts(cfg))
    if problems:
        raise ConfigError("allocation: " + "; ".join(problems))


# verl 0.9.1's FSDP workers import trl's AutoModelForCausalLMWithValueHead whenever trl is importable
# (verl/models/transformers/monkey_patch.py, verl/utils/model.py); TRL 1.13 removed it.
TRL_WITHOUT_VALUE_HEAD = "1.13"


def importable_trl() -> tuple[str | None, str] | None:
    """(version, location) of the trl that verl would import in this environment; None when there is none."""
    import importlib.metadata

    spec = importlib.util.find_spec("trl")
    if spec is None:
        return None
    location = spec.origin or ", ".join(spec.submodule_search_locations or [])
    try:
        return importlib.metadata.version("trl"), location
    except importlib.metadata.PackageNotFoundError:
        return None, location


def trl_conflict(version: str | None, location: str) -> str | None:
    """The one-line problem of an importable trl (`version` None: unknown) next to verl 0.9.1, or None."""
    from packaging.version import InvalidVersion, Version

    try:
        if version is not None and Version(version) < Version(TRL_WITHOUT_VALUE_HEAD):
            return None
    except InvalidVersion:
        pass
    return (f"environment: trl {version or '(unknown version)'} is importable here ({location}), and verl 0.9.1's "
            "FSDP workers then import trl's AutoModelForCausalLMWithValueHead, which TRL removed in "
            f"{TRL_WITHOUT_VALUE_HEAD}: every run would fail in init_model; fix: run verl from the project's .venv "
            "and TRL from .venv-trl (docs/trl.md), or `pip uninstall trl` here")


def _check_trl(cfg: DictConfig) -> None:
    found = importable_trl()
    problem = trl_conflict(*found) if found else None
    if problem:
        raise ConfigError(problem)


# Each check takes the composed config and raises ConfigError; they run in this order.
CONFIG_CHECKS: list[Callable[[DictConfig], None]] = [_check_required, _check_allocation, _check_channels,
                                                      _check_estimator, _check_trl]


def check_config(cfg: DictConfig) -> None:
    for check in CONFIG_CHECKS:
        check(cfg)


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


register_schema()
