"""The training configuration: `compose(overrides)` is the resolved config `python -m dara.train <overrides>` runs
(Hydra over conf/train.yaml and verl 0.9.1's `ppo_trainer`); `RunConfig` types the `run.*` node."""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional  # noqa: UP035 - OmegaConf's structured-config typing

from omegaconf import MISSING, DictConfig, OmegaConf, open_dict

import dara
from dara.estimators import ESTIMATOR_NAMES, DaraAlgoConfig
from dara.estimators.registry import VERL_PREFIX
from dara.slurm_time import DEFAULT_SIGNAL_LEAD_MINUTES

# conf/ of the checkout, through the link dara/conf (a non-editable install ships it there: pyproject.toml)
CONF_DIR = Path(dara.__file__).resolve().parent / "conf"
VERL_SEARCHPATH = "pkg://verl.trainer.config"  # conf/train.yaml's hydra.searchpath: verl's own trainer config
SEARCHPATH_KEY = "hydra.searchpath"


class ConfigError(ValueError):
    """An experiment configuration that cannot run."""


# ----------------------------------------------------------------------------- the run.* schema
@dataclass
class CheckpointConfig:
    """The HF weights of `keep_hf_steps` (the evaluated steps) are kept in `kept_dir` (dara.verl.retention)."""

    keep_last: int = 2
    keep_hf_steps: List[int] = field(default_factory=lambda: [50, 60, 100])  # noqa: UP006
    kept_dir: str = "${run.output_dir}/hf_checkpoints"


@dataclass
class ScaleConfig:
    """`run.hardware.<run.model_scale>` of a conf/cluster/*.yaml."""

    rollout_tp: int = 1
    gpu_memory_utilization: float = 0.6
    max_token_len_per_gpu: int = 16384
    param_offload: bool = False
    optimizer_offload: bool = False
    ref_param_offload: bool = False


@dataclass
class HardwareConfig:
    """A GPU cluster's facts for the preflight (conf/cluster/*.yaml)."""

    gpu: Optional[str] = None  # noqa: UP045
    gpu_memory_gib: Optional[float] = None  # noqa: UP045 - one card, as torch.cuda reports it
    job_time_limit_minutes: Optional[int] = None  # noqa: UP045 - one Slurm job's limit (sbatch --time takes whole minutes)
    job_startup_minutes: Optional[float] = None  # noqa: UP045 - Ray, model load, vLLM start before step 1
    step_minutes_estimate: Dict[str, float] = field(default_factory=dict)  # noqa: UP006 - model -> minutes
    # sbatch's pre-timeout signal this long before the limit: the trainer checkpoints and the job requeues itself
    signal_lead_minutes: float = DEFAULT_SIGNAL_LEAD_MINUTES
    small: Optional[ScaleConfig] = None  # noqa: UP045
    medium: Optional[ScaleConfig] = None  # noqa: UP045
    large: Optional[ScaleConfig] = None  # noqa: UP045


@dataclass
class DynamicSamplingConfig:
    """Keep only groups whose summed reward varies (algorithm.filter_groups.metric): mode null = none; "rounds" =
    the authors' (dara.verl.rounds: rounds of `round_prompts` prompts, at most `max_rounds` per step, 0 = no cap);
    "replay" = verl 0.9.1's replay-buffer filter (algorithm.filter_groups)."""

    mode: Optional[str] = None  # noqa: UP045
    round_prompts: Optional[int] = None  # noqa: UP045
    max_rounds: Optional[int] = None  # noqa: UP045


@dataclass
class RunConfig:
    """The project's own keys (`run.*`; verl ignores them)."""

    task: str = MISSING
    model: str = MISSING
    method: str = "${algorithm.adv_estimator}"
    seed: int = 0
    variant: str = ""  # tells runs of one method apart (a recipe's "g8"); a rerun finds the same folder
    name: str = "${dara.run_name:${run.task},${run.model},${run.method},${run.seed},${run.variant}}"
    output_root: str = "outputs"
    output_dir: str = "${run.output_root}/${run.name}"
    data_source: Optional[str] = None  # noqa: UP045 - of the task's rows (the reward declares channels for it)
    data_dir: Optional[str] = None  # noqa: UP045 - where the task's prepared data lives (python -m data_prep)
    # assets built before starting: a builder tasks.registry has, or FILE.py:FUNCTION; model_assets: the model's
    assets: Optional[str] = None  # noqa: UP045
    model_assets: Optional[str] = None  # noqa: UP045
    assets_dir: str = "${run.output_root}/assets/${run.task}"
    skip_if_finished: bool = False  # a run whose metrics.jsonl holds its last step is skipped
    recipe: Optional[str] = None  # noqa: UP045 - the paper table / figure the run belongs to (its wandb group)
    # auto = online with WANDB_API_KEY in the environment, else offline; offline | online | disabled
    wandb_mode: str = "auto"
    verbose: bool = False  # false: verl's and Ray's output goes to <run folder>/logs/main.log
    # vLLM's context per request (unset, vLLM takes the model's maximum, which may not fit one request's KV cache)
    max_model_len: int = "${dara.sum:${data.max_prompt_length},${data.max_response_length}}"  # type: ignore[assignment]
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    import_modules: Optional[List[str]] = None  # noqa: UP006, UP045 - imported in the trainer's actor first
    # the model's size class (small | medium | large: the cluster's per-scale row) and config.json facts
    model_scale: Optional[str] = None  # noqa: UP045
    model_facts: Optional[Dict[str, Any]] = None  # noqa: UP006, UP045 - dara.preflight.facts.ModelFacts
    cluster: Optional[str] = None  # noqa: UP045
    hardware: Optional[HardwareConfig] = None  # noqa: UP045
    # the actor's and reference's attention: flash_attention_2 (padding removed) or sdpa (padded micro-batches)
    attention: str = "flash_attention_2"
    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)
    expect_clipped_updates: bool = False  # tool calling, as the authors': an unclipped update is warned about
    engine_watchdog_s: float = 5.0  # seconds between polls of each rollout server's /health; 0: off
    seeded_rollout: bool = False  # a vLLM seed per response (dara.verl.seeded_rollout)


def register_schemas() -> None:
    """`algorithm.dara` is a `DaraAlgoConfig` (its reward_ranges and options open) and `run` a `RunConfig`."""
    from hydra.core.config_store import ConfigStore

    algo = OmegaConf.create({"algorithm": {"dara": OmegaConf.structured(DaraAlgoConfig)}})
    OmegaConf.set_struct(algo.algorithm.dara.reward_ranges, False)
    OmegaConf.set_struct(algo.algorithm.dara.options, False)
    ConfigStore.instance().store(name="dara_algo_schema", node=algo)  # conf/train.yaml's defaults list names both
    ConfigStore.instance().store(name="dara_run_schema", node={"run": RunConfig})


# ----------------------------------------------------------------------------- names
def run_name(task: str, model: str, method: str, seed: int | str, variant: str = "") -> str:
    """The run folder's name: `<task>-<model>-<method>[-<variant>]-s<seed>`."""
    return f"{task}-{model}-{method}{f'-{variant}' if variant else ''}-s{seed}"


def library_estimator(adv_estimator: str) -> str | None:
    """The library estimator of `algorithm.adv_estimator` (its name, or dara_<name> where verl owns the bare one)."""
    return next((name for name in (adv_estimator, adv_estimator.removeprefix(VERL_PREFIX))
                 if name in ESTIMATOR_NAMES), None)


def searchpath_file(name: str) -> str:
    """`${dara.searchpath:NAME}`: NAME's absolute path in the first `hydra.searchpath` folder holding it."""
    from hydra.core.hydra_config import HydraConfig

    try:
        entries = list(HydraConfig.get().searchpath)
    except ValueError:
        raise ValueError(f"${{dara.searchpath:{name}}} needs Hydra's run config (dara.config.compose)") from None
    for entry in map(str, entries):
        if entry.startswith("file://") and (Path(entry[7:]).expanduser() / name).exists():
            return str((Path(entry[7:]).expanduser() / name).resolve())
    raise ValueError(f"${{dara.searchpath:{name}}}: no {name} in the folders of hydra.searchpath {entries}")


for _name, _resolver in (("dara.run_name", run_name), ("dara.searchpath", searchpath_file)):
    if not OmegaConf.has_resolver(_name):
        OmegaConf.register_new_resolver(_name, _resolver)


# ----------------------------------------------------------------------------- composition
def with_verl_searchpath(overrides: Sequence[str]) -> list[str]:
    """The overrides with verl's config folder kept in a `hydra.searchpath=[...]` one (Hydra replaces the list)."""
    out = []
    for item in overrides:
        key, sep, value = item.partition("=")
        if sep and key.lstrip("+") == SEARCHPATH_KEY and VERL_SEARCHPATH not in value:
            inner = value.strip()
            inner = inner[1:-1].strip() if inner.startswith("[") and inner.endswith("]") else inner
            item = f"{key}=[{VERL_SEARCHPATH}{',' + inner if inner else ''}]"
        out.append(item)
    return out


def search_dirs(overrides: Sequence[str]) -> list[Path]:
    """The file:// folders a `hydra.searchpath=[...]` override adds, in order."""
    dirs: list[Path] = []
    for item in overrides:
        key, sep, value = item.partition("=")
        if sep and key.lstrip("+") == SEARCHPATH_KEY:
            entries = value.strip().strip("[]").split(",")
            dirs = [Path(e.strip()[len("file://"):]).expanduser() for e in entries if e.strip().startswith("file://")]
    return dirs


def compose(overrides: Sequence[str] = (), *, resolve: bool = True, conf_dir: str | Path | None = None) -> DictConfig:
    """The config `python -m dara.train <overrides>` would run (nothing started); Hydra's errors propagate."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    register_schemas()
    with initialize_config_dir(config_dir=str(conf_dir or CONF_DIR), version_base=None, job_name="train"):
        cfg = hydra_compose(config_name="train", overrides=with_verl_searchpath(overrides), return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)  # as Hydra's app runner does: ${hydra:...} and the search path
    with open_dict(cfg):
        del cfg["hydra"]
    if resolve:
        OmegaConf.resolve(cfg)
    return cfg


# ----------------------------------------------------------------------------- verl's own checks
def verl_validation_error(cfg: DictConfig) -> str | None:
    """verl's own start-up checks (`validate_config`, the rollout dataclass): the error text, or None."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
            omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    except (AssertionError, ValueError, TypeError, KeyError) as error:
        return f"{type(error).__name__}: {error}"
    return None


register_schemas()
