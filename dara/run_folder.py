"""A run folder's file names, and its *experiment configuration*: the resolved config flattened to dotted keys,
without NON_EXPERIMENT_KEYS (what does not change what is trained). `check_same_experiment` refuses a folder
holding results of another one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

RUN_INFO = "run_info.json"
METRICS_FILE = "metrics.jsonl"  # one flat JSON object per step (dara.run_log)
VERL_CONFIG = "verl_config.yaml"  # the whole resolved config as verl received it
MAIN_LOG = "logs/main.log"  # what verl, Ray and the workers printed (the quiet console)
REWARD_ERRORS = "logs/reward_errors.log"  # one line per failed reward item (dara.verl.reward_manager)
RAY_NODES = "ray_nodes.json"  # where each verl worker ran (dara.verl.placement)
VERL_TRACKING = "verl_tracking.jsonl"  # verl's own `file` logger
CHECKPOINTS = "checkpoints"  # verl's trainer.default_local_dir
CHECKPOINT_TRACKER = "latest_checkpointed_iteration.txt"  # verl's resume marker, in trainer.default_local_dir
HF_KEPT = "hf_checkpoints"  # the evaluated steps' HF weights (dara.verl.checkpoints)
RUN_LOCK = "run.lock"  # held (flock) by the job using the folder; its text names the holder (dara.run_lock)
STOP_REQUEST = "stop_request"  # asks the trainer to checkpoint and stop at its next step (dara.verl.stop_request)

# Keys (or whole sub-trees, by prefix) that do not change the experiment.
NON_EXPERIMENT_KEYS: tuple[str, ...] = (
    # where things go, and names derived from the folder
    "run.output_root", "run.output_dir", "run.name", "run.variant", "run.assets_dir", "run.checkpoint",
    "trainer.default_local_dir", "trainer.experiment_name", "trainer.project_name",
    "trainer.rollout_data_dir", "trainer.validation_data_dir",
    # logging and the console
    "trainer.logger", "trainer.log_val_generations", "run.wandb_mode", "run.verbose", "run.recipe",
    "actor_rollout_ref.rollout.trace", "actor_rollout_ref.rollout.prometheus",
    # when to save, validate and stop; resuming
    "trainer.save_freq", "trainer.test_freq", "trainer.val_before_train", "trainer.total_training_steps",
    "trainer.total_epochs", "trainer.resume_mode", "trainer.resume_from_path", "trainer.max_actor_ckpt_to_keep",
    "trainer.max_critic_ckpt_to_keep", "run.skip_if_finished",
    # cluster plumbing: the job's allocation and Ray decide these
    "ray_kwargs", "trainer.nnodes", "trainer.n_gpus_per_node",
    # how the cluster computes the same thing: the attention kernel (SDPA until flash-attn is built, then
    # FlashAttention 2 on resume) and the cluster file's time and memory estimates
    "run.attention", "run.hardware", "actor_rollout_ref.model.use_remove_padding",
    "actor_rollout_ref.model.override_config.attn_implementation",
)

# Keys that follow the run's seed (conf/train.yaml); variants of one method are compared without them.
SEED_KEYS: tuple[str, ...] = (
    "run.seed", "data.seed", "actor_rollout_ref.actor.data_loader_seed", "actor_rollout_ref.rollout.seed",
)


def absolute_run_paths(cfg) -> None:
    """run.output_root, output_dir and assets_dir made absolute (Ray actors start in other folders)."""
    from omegaconf import open_dict

    with open_dict(cfg):
        for key in ("output_root", "output_dir", "assets_dir"):
            cfg.run[key] = os.path.abspath(cfg.run[key])


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping (a DictConfig or plain dicts) as {"a.b.c": leaf}; lists stay lists."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(node, DictConfig | ListConfig):
        node = OmegaConf.to_container(node, resolve=True)
    if not isinstance(node, Mapping):
        return {prefix: node} if prefix else {}
    flat: dict[str, Any] = {}
    for key, value in node.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, name))
        else:
            flat[name] = dict(value) if isinstance(value, Mapping) else value
    return flat


def _under(key: str, prefixes: Iterable[str]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in prefixes)


# written in place of these folders, so a configuration does not depend on where the checkout or outputs lie
OUTPUT_ROOT_MARK, PROJECT_MARK = "<output_root>", "<project>"


def _portable(value: Any, roots: list[tuple[str, str]]) -> Any:
    if isinstance(value, str):
        for root, mark in roots:
            if value == root or value.startswith(root + os.sep):
                return mark + value[len(root):]
        return value
    if isinstance(value, list):
        return [_portable(item, roots) for item in value]
    return value


def experiment_config(cfg: Any) -> dict[str, Any]:
    """The flattened config without NON_EXPERIMENT_KEYS, paths under the output root or project as `<output_root>/...`."""
    from dara import PROJECT_ROOT

    flat = flatten(cfg)
    roots = [(os.path.abspath(str(flat["run.output_root"])), OUTPUT_ROOT_MARK)] if flat.get("run.output_root") else []
    roots.append((str(PROJECT_ROOT), PROJECT_MARK))  # the longer (more specific) root first when nested
    roots.sort(key=lambda pair: -len(pair[0]))
    return {k: _portable(v, roots) for k, v in sorted(flat.items()) if not _under(k, NON_EXPERIMENT_KEYS)}


def without_seed(config: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if not _under(k, SEED_KEYS)}


_MISSING = object()


def config_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k, _MISSING) != b.get(k, _MISSING))


class RunFolderError(Exception):
    pass


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def suggested_name(name: str, seed: Any, differences: Mapping[str, Any]) -> str:
    """The run's name with what differs (`w_max2`) before its seed suffix."""
    label = "-".join(key.rsplit(".", 1)[-1] + "".join(c for c in str(value) if c.isalnum() or c in "._")[:12]
                     for key, value in list(differences.items())[:2]) or "variant"
    suffix = f"-s{seed}"
    return f"{name[: -len(suffix)]}-{label}{suffix}" if name.endswith(suffix) else f"{name}-{label}"


def _recorded(run_dir: str | Path, key: str, strict: bool) -> Any:
    """`key` of run_info.json where the folder holds results, else None; unreadable: RunFolderError if `strict`."""
    info_path, metrics = Path(run_dir) / RUN_INFO, Path(run_dir) / METRICS_FILE
    has_results = (metrics.exists() and metrics.stat().st_size > 0) or any(
        (Path(run_dir) / CHECKPOINTS).glob("global_step_*"))
    if not info_path.exists() or not has_results:
        return None
    try:
        return json.loads(info_path.read_text()).get(key)
    except (OSError, ValueError, AttributeError):
        if strict:
            raise RunFolderError(f"{info_path} cannot be read: is this a run folder? Set run.name=... or "
                                 "run.output_root=... for a folder of this run's own") from None
        return None


def check_same_experiment(run_dir: str | Path, config: Mapping[str, Any], name: str, seed: Any) -> list[str]:
    """Raise RunFolderError when `run_dir` holds results of another experiment configuration. Keys only one side
    has (the code added or dropped them since) are taken as unchanged and returned."""
    if not isinstance(recorded := _recorded(run_dir, "config", strict=True), Mapping):
        return []
    # a record written before a key was known not to change the experiment still holds it
    recorded = {k: v for k, v in recorded.items() if not _under(k, NON_EXPERIMENT_KEYS)}
    current = json.loads(json.dumps(dict(config), default=str))  # as run_info.json holds it
    keys = config_differences(recorded, current)
    differing = [k for k in keys if k in recorded and k in current]
    if not differing:
        return [k for k in keys if k not in differing]
    shown = ", ".join(f"{k} ({_shown(recorded[k])} there, {_shown(current[k])} here)" for k in differing[:4])
    more = f" and {len(differing) - 4} more" if len(differing) > 4 else ""
    new_name = suggested_name(name, seed, {k: current[k] for k in differing})
    raise RunFolderError(f"{run_dir} holds a run of another configuration, differing in {shown}{more}; "
                         f"start this one in its own folder with run.name={new_name} (or delete that folder)")


def check_same_estimator_module(run_dir: str | Path, current: Mapping[str, Any] | None, name: str, seed: Any) -> None:
    """Raise RunFolderError when the folder's run had another `algorithm.dara.estimator_module` (by sha256)."""
    recorded = None if current is None else _recorded(run_dir, "estimator_module", strict=False)
    if not isinstance(recorded, Mapping) or not recorded.get("sha256"):
        return
    if recorded["sha256"] != current.get("sha256"):
        new_name = suggested_name(name, seed, {"module": str(current.get("sha256", ""))[:8]})
        raise RunFolderError(f"{run_dir}: the estimator module {current.get('path')} changed since this folder's run "
                             f"started (sha256 {str(recorded['sha256'])[:12]} there, {str(current.get('sha256'))[:12]} "
                             f"now): a resume would train on other code; restore the module, or start this run in "
                             f"its own folder with run.name={new_name}")
