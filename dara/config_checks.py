"""Checks that reject an invalid experiment before Ray starts, each a one-line ConfigError naming the problem."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from dara.assets import check_assets
from dara.config import ConfigError, library_estimator
from dara.estimators import ESTIMATOR_NAMES, DaraAlgoConfig, EstimatorModuleError, load_estimator_module
from rewards.spec import (
    PKG_PREFIX,
    PROBE_ROWS,
    RewardSpec,
    RewardSpecError,
    load_reward_spec,
    merged_reward_kwargs,
    probe,
    split_pool_options,
)


def composition_error_line(error: BaseException) -> str:
    """A Hydra / OmegaConf composition error as one line: the message, its cause, then Hydra's hints (a listing of
    options as one clause)."""

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


def _plain(cfg: DictConfig, key: str) -> dict:
    return OmegaConf.to_container(OmegaConf.select(cfg, key, default=None) or OmegaConf.create(), resolve=True)


def _reward_kwargs(cfg: DictConfig) -> tuple[dict, dict]:
    """(the pool's options, the reward module's own) of both reward_kwargs merged."""
    try:
        merged = merged_reward_kwargs(_plain(cfg, "reward.reward_kwargs"),
                                      _plain(cfg, "reward.custom_reward_function.reward_kwargs"))
    except ValueError as error:
        raise ConfigError(str(error)) from None
    return split_pool_options(merged)


def reward_spec(cfg: DictConfig) -> RewardSpec | None:
    """The run's reward module (`reward.custom_reward_function.path`) with its declared channels and ranges for
    `run.data_source` (`rewards.spec`); None without one."""
    if not (path := OmegaConf.select(cfg, "reward.custom_reward_function.path", default=None)):
        return None
    name = OmegaConf.select(cfg, "reward.custom_reward_function.name", default=None) or "compute_score"
    source = OmegaConf.select(cfg, "run.data_source", default=None)
    try:
        spec = load_reward_spec(path, name, None if source is None else str(source), _reward_kwargs(cfg)[1])
    except RewardSpecError as error:
        raise ConfigError(str(error)) from None
    if str(path) != spec.path and not str(path).startswith(PKG_PREFIX):  # Ray workers start in other folders
        with open_dict(cfg):
            cfg.reward.custom_reward_function.path = spec.path
    return spec


def _check_channels(cfg: DictConfig) -> None:
    """algorithm.reward_channels defaults to the reward's channels, algorithm.dara.reward_ranges to their declared
    ranges (a range given there overrides one)."""
    spec = reward_spec(cfg)
    declared = None if spec is None else spec.names
    channels = list(cfg.algorithm.get("reward_channels", None) or []) or list(declared or [])
    for channel in channels if declared is not None else []:
        if channel not in declared:
            raise ConfigError(f"reward channel {channel!r} (algorithm.reward_channels) is not one the reward "
                              f"returns: the reward's channels are {declared} ({spec.path})")
    if library_estimator(str(cfg.algorithm.adv_estimator)) is not None and (
            not channels or len(set(channels)) != len(channels)):
        raise ConfigError(f"algorithm.reward_channels must name distinct reward channels, got {channels}")
    given = _plain(cfg, "algorithm.dara.reward_ranges")
    if unknown := sorted(set(given) - set(channels)):
        raise ConfigError(f"algorithm.dara.reward_ranges names {unknown}, not among the run's reward channels "
                          f"{channels}")
    ranges = {c: list(spec.channels[c]) for c in channels} if spec is not None else {}
    for line in narrow_range_warnings(ranges, given):
        print(f"[dara] warning: {line}", file=sys.stderr, flush=True)
    with open_dict(cfg):
        cfg.algorithm.reward_channels = channels
        if "dara" in cfg.algorithm:
            cfg.algorithm.dara.reward_ranges = {**ranges, **given}


def narrow_range_warnings(declared: Mapping, given: Mapping) -> list[str]:
    """One line per channel whose given range leaves out part of the range its reward declares."""
    lines = []
    for name, pair in given.items():
        if name not in declared:
            continue
        try:
            (low, high), (d_low, d_high) = ((float(v) for v in pair), (float(v) for v in declared[name]))
        except (TypeError, ValueError):
            continue
        if low > d_low or high < d_high:
            lines.append(f"algorithm.dara.reward_ranges.{name}=[{low:g}, {high:g}] is narrower than the range the "
                         f"reward declares for {name!r}, [{d_low:g}, {d_high:g}]: a {name} score outside "
                         f"[{low:g}, {high:g}] stops the run")
    return lines


RAY_INIT = "ray_kwargs.ray_init"


def ray_option_problem(ray_init: Mapping) -> str | None:
    """What Ray would refuse in `ray_kwargs.ray_init` (after its processes started), in one line, or None."""
    runtime_env = ray_init.get("runtime_env") or {}
    env_vars = (runtime_env.get("env_vars") or {}) if isinstance(runtime_env, Mapping) else None
    if not isinstance(env_vars, Mapping):
        return f"{RAY_INIT}.runtime_env must be a mapping whose env_vars map names to strings, got {runtime_env!r}"
    for key, value in env_vars.items():
        where = f"{RAY_INIT}.runtime_env.env_vars.{key}"
        if not isinstance(value, str):
            text = str(value).lower() if isinstance(value, bool) else str(value)
            hint = (f"write it as a string, e.g. the override '{where}=\"{text}\"'" if value is not None
                    else "give it a string, or leave it out")
            return f"{where} is {value!r} ({type(value).__name__}): Ray takes env vars as strings only; {hint}"
    from ray.runtime_env import RuntimeEnv

    try:
        RuntimeEnv(**{key: value for key, value in runtime_env.items() if value is not None})
    except Exception as error:  # Ray's own validation (TypeError, ValueError, ...): its first line
        first = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
        return f"{RAY_INIT}.runtime_env: Ray refuses it: {first}"
    import ray

    names = set(inspect.signature(ray.init).parameters) - {"kwargs"}
    try:  # the hidden `_name` options ray.init pops from **kwargs
        hidden = set(re.findall(r"kwargs\.pop\(\s*[\"'](_\w+)[\"']", inspect.getsource(ray.init)))
    except (OSError, TypeError):
        hidden = set()
    if unknown := sorted(k for k in ray_init if k not in names and not (k.startswith("_") and (not hidden or k in hidden))):
        return (f"{RAY_INIT} has {', '.join(unknown)}, not an option of ray.init (it takes "
                f"{', '.join(sorted(names))})")
    return None


def check_ray_options(cfg: DictConfig) -> None:
    node = OmegaConf.select(cfg, RAY_INIT, default=None)
    if node is not None and (problem := ray_option_problem(OmegaConf.to_container(node, resolve=True))):
        raise ConfigError(problem)


ESTIMATOR_MODULE = "algorithm.dara.estimator_module"


def estimator_module(cfg: DictConfig):
    """Load the estimators of algorithm.dara.estimator_module (first: the checks read their names); a file's path
    is pinned absolute (Ray's actors start in other folders)."""
    if not (spec := OmegaConf.select(cfg, ESTIMATOR_MODULE, default=None)):
        return None
    try:
        loaded = load_estimator_module(str(spec))
    except EstimatorModuleError as error:
        raise ConfigError(f"{ESTIMATOR_MODULE}: {error}") from None
    from dara.verl.estimators import verl_owned_names

    if taken := sorted(set(loaded.names) & verl_owned_names()):
        raise ConfigError(f"{ESTIMATOR_MODULE}: {spec} registers {', '.join(map(repr, taken))}, a name verl "
                          "already has (one of verl's own advantage estimators): register it under another name")
    if loaded.from_file and str(spec) != loaded.path:
        with open_dict(cfg):
            cfg.algorithm.dara.estimator_module = loaded.path
    return loaded


def _check_estimator(cfg: DictConfig) -> None:
    algorithm = cfg.algorithm
    if (name := library_estimator(str(algorithm.adv_estimator))) is None:
        from dara.verl.estimators import verl_owned_names

        verls = sorted(verl_owned_names() - set(ESTIMATOR_NAMES))
        if str(algorithm.adv_estimator) not in verls:
            raise ConfigError(f"algorithm.adv_estimator={algorithm.adv_estimator} is no estimator: the library has "
                              f"{', '.join(ESTIMATOR_NAMES)}; verl has {', '.join(verls)} (an estimator of your own: "
                              f"{ESTIMATOR_MODULE}=PATH, docs/estimators.md)")
        return  # one of verl's own estimators: verl validates it
    if (mode := str(cfg.trainer.v1.trainer_mode)) != "dara_sync":
        raise ConfigError(f"adv_estimator={algorithm.adv_estimator} needs the project's trainer "
                          f"(trainer.v1.trainer_mode=dara_sync), got trainer_mode={mode}")
    try:
        options = DaraAlgoConfig.from_mapping(algorithm.get("dara", None))
        options.check_for(name, list(algorithm.reward_channels))
    except ValueError as error:
        raise ConfigError(f"algorithm.dara: {error}") from None


def divisibility_problems(cfg: DictConfig) -> list[str]:
    """What verl asserts only after Ray started (or a rollout ran), for the allocation and `run.model_facts`."""
    trainer, arr, rollout = cfg.trainer, cfg.actor_rollout_ref, cfg.actor_rollout_ref.rollout
    world, n, gpus = int(trainer.nnodes) * int(trainer.n_gpus_per_node), int(rollout.n), int(trainer.n_gpus_per_node)
    sp = int(OmegaConf.select(arr, "actor.ulysses_sequence_parallel_size", default=1) or 1)
    dp, mini, tp = max(1, world // sp), int(arr.actor.ppo_mini_batch_size) * n, int(rollout.tensor_model_parallel_size)
    infer = tp * int(rollout.get("data_parallel_size", 1) or 1) * int(rollout.get("pipeline_model_parallel_size", 1) or 1)
    heads = int(OmegaConf.select(cfg, "run.model_facts.num_attention_heads", default=None) or sp * tp)
    kv = int(OmegaConf.select(cfg, "run.model_facts.num_key_value_heads", default=None) or tp)
    return [problem for bad, problem in (
        (world % sp, f"{world} GPUs are not divisible by actor.ulysses_sequence_parallel_size {sp}"),
        (mini % dp, f"actor.ppo_mini_batch_size x rollout.n = {arr.actor.ppo_mini_batch_size} x {n} = {mini} is not "
                    f"divisible by the data-parallel size {dp} ({trainer.nnodes} node(s) x {gpus} GPUs / SP {sp}); "
                    "verl asserts this at the first actor update, after a full generation"),
        (world % infer, f"{world} GPUs are not divisible by the rollout's TP x DP x PP = {infer}"),
        (trainer.device == "cuda" and gpus % tp, f"rollout tensor_model_parallel_size {tp} does not divide the {gpus} "
                                                 "GPUs of a node (a vLLM replica stays within one node)"),
        (heads % tp, f"{heads} attention heads are not divisible by rollout TP {tp}"),
        (kv % tp and tp % kv, f"{kv} KV heads and rollout TP {tp}: neither divides the other"),
        (heads % sp, f"{heads} attention heads are not divisible by Ulysses SP {sp}")) if bad]


# verl 0.9.1's FSDP workers import trl's AutoModelForCausalLMWithValueHead whenever trl is importable
# (verl/models/transformers/monkey_patch.py, verl/utils/model.py); TRL 1.13 removed it.
TRL_WITHOUT_VALUE_HEAD = "1.13"


def importable_trl() -> tuple[str | None, str] | None:
    """(version, location) of the trl verl would import here, or None."""
    if (spec := importlib.util.find_spec("trl")) is None:
        return None
    version = None
    with suppress(importlib.metadata.PackageNotFoundError):
        version = importlib.metadata.version("trl")
    return version, spec.origin or ", ".join(spec.submodule_search_locations or [])


def trl_conflict(version: str | None, location: str) -> str | None:
    from packaging.version import InvalidVersion, Version

    with suppress(InvalidVersion):
        if version is not None and Version(version) < Version(TRL_WITHOUT_VALUE_HEAD):
            return None
    return (f"environment: trl {version or '(unknown version)'} is importable here ({location}), and verl 0.9.1's "
            "FSDP workers then import trl's AutoModelForCausalLMWithValueHead, which TRL removed in "
            f"{TRL_WITHOUT_VALUE_HEAD}: every run would fail in init_model; fix: run verl from the project's .venv "
            "and TRL from .venv-trl (docs/trl.md), or `pip uninstall trl` here")


def _check_determinism(cfg: DictConfig) -> None:
    rollout = cfg.actor_rollout_ref.rollout
    seeded = rollout.agent.default_agent_loop == "dara_seeded_single_turn"
    if OmegaConf.select(rollout, "full_determinism", default=False) and not seeded and rollout.n > 1:
        raise ConfigError("actor_rollout_ref.rollout.full_determinism=true gives every request of a step the same "
                          f"vLLM seed, so the {rollout.n} responses of a group would be identical and every "
                          "advantage 0: add run.seeded_rollout=true (a seed per response)")


def check_config(cfg: DictConfig) -> None:
    estimator_module(cfg)  # first: the checks read its estimators' names
    check_ray_options(cfg)
    if problems := divisibility_problems(cfg):
        raise ConfigError("allocation: " + "; ".join(problems))
    _check_channels(cfg)
    _check_estimator(cfg)
    check_assets(cfg)
    if (found := importable_trl()) and (problem := trl_conflict(*found)):
        raise ConfigError(problem)
    _check_determinism(cfg)


def check_reward(cfg: DictConfig) -> None:
    """A reward module of your own scores a few training rows before Ray starts (one line, not a stuck run)."""
    import pandas as pd

    import rewards.verl_entry
    from rewards.verl_entry import RewardOptions

    spec = reward_spec(cfg)
    if spec is None or Path(spec.path) == Path(rewards.verl_entry.__file__).resolve():  # the project's own, tested
        return
    pool_kwargs, user_kwargs = _reward_kwargs(cfg)
    timeout = float(RewardOptions(**pool_kwargs).timeout_s)
    files = OmegaConf.select(cfg, "data.train_files")
    first = files if isinstance(files, str) else list(files)[0]
    frame = pd.read_parquet(first).head(PROBE_ROWS)
    if missing := {"data_source", "reward_model"} - set(frame.columns):
        raise ConfigError(f"data.train_files: {first} lacks the verl column(s) {sorted(missing)}")
    rows = [(str(row["data_source"]), row["reward_model"].get("ground_truth")
             if isinstance(row["reward_model"], dict) else None, row.get("extra_info"))
            for row in frame.to_dict("records")]  # (data_source, ground_truth, extra_info) of the first rows
    try:
        probe(spec, user_kwargs, rows, timeout)
    except RewardSpecError as error:
        raise ConfigError(str(error)) from None


def check_inputs(cfg: DictConfig) -> None:
    for key in ("data.train_files", "data.val_files"):
        files = OmegaConf.select(cfg, key)
        for path in [files] if isinstance(files, str) else list(files or []):
            if not os.path.exists(path):
                raise ConfigError(f"{key}: {path} does not exist (prepare it with `python -m data_prep ...`)")
    model = str(cfg.actor_rollout_ref.model.path)
    if model.startswith(("/", ".", "~")) and not os.path.isdir(os.path.expanduser(model)):
        raise ConfigError(f"actor_rollout_ref.model.path: {model} is not a folder")

