"""A run folder: the files one training run writes there, and the configuration the folder belongs to.

Every file name of a run folder (`run.output_dir`) is defined here, so the trainer, the console, the
recipes and `results` agree on them.

The *experiment configuration* of a run is its resolved config, flattened to dotted keys, without the
keys that do not change what is trained: where files go and what is logged, when the run saves or
validates, how long it runs (a longer `trainer.total_training_steps` resumes and extends a run), and the
cluster plumbing (Ray's addresses and resource counts, the allocation's node and GPU counts).
`run_info.json` records it (`"config"`); two runs are the same experiment when it is equal, and variants
of one method are told apart by the keys where it differs (`config_differences`), the seed aside.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

RUN_INFO = "run_info.json"
METRICS_FILE = "metrics.jsonl"  # one flat JSON object per step (dara.run_log)
VERL_CONFIG = "verl_config.yaml"  # the whole resolved config as verl received it
MAIN_LOG = "logs/main.log"  # what verl, Ray and the workers printed (the quiet console)
REWARD_ERRORS = "logs/reward_errors.log"  # one line per failed reward item (dara.verl.reward_manager)
RAY_NODES = "ray_nodes.json"  # where each verl worker ran (dara.verl.placement)
VERL_TRACKING = "verl_tracking.jsonl"  # verl's own `file` logger
CHECKPOINTS = "checkpoints"  # verl's trainer.default_local_dir
HF_KEPT = "hf_checkpoints"  # the evaluated steps' HF weights (dara.verl.checkpoints)
WANDB_DIR = "wandb"

# Keys (or whole sub-trees, by prefix) that do not change the experiment.
NON_EXPERIMENT_KEYS: tuple[str, ...] = (
    # where things go, and names derived from the folder
    "run.output_root", "run.output_dir", "run.name", "run.variant", "run.assets_dir", "run.checkpoint",
    "trainer.default_local_dir", "trainer.experiment_name", "trainer.project_name",
    "trainer.rollout_data_dir", "trainer.validation_data_dir",
    # logging and the console
    "trainer.logger", "trainer.log_val_generations", "run.wandb_mode", "run.verbose", "run.recipe",
    # when to save, validate and stop; resuming
    "trainer.save_freq", "trainer.test_freq", "trainer.val_before_train", "trainer.total_training_steps",
    "trainer.total_epochs", "trainer.resume_mode", "trainer.resume_from_path", "trainer.max_actor_ckpt_to_keep",
    "trainer.max_critic_ckpt_to_keep", "run.skip_if_finished",
    # cluster plumbing: the job's allocation and Ray decide these
    "ray_kwargs", "trainer.nnodes", "trainer.n_gpus_per_node",
)

# Keys that follow the run's seed (conf/train.yaml); variants of one method are compared without them.
SEED_KEYS: tuple[str, ...] = (
    "run.seed", "data.seed", "actor_rollout_ref.actor.data_loader_seed", "actor_rollout_ref.rollout.seed",
)


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping (a DictConfig or plain dicts) as {"a.b.c": leaf}; lists stay lists (JSON values)."""
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


def experiment_config(cfg: Any) -> dict[str, Any]:
    """The run's experiment configuration: its flattened resolved config without NON_EXPERIMENT_KEYS."""
    return {k: v for k, v in sorted(flatten(cfg).items()) if not _under(k, NON_EXPERIMENT_KEYS)}


def without_seed(config: Mapping[str, Any]) -> dict[str, Any]:
    """An experiment configuration without the keys that follow the seed (what variants are compared on)."""
    return {k: v for k, v in config.items() if not _under(k, SEED_KEYS)}


_MISSING = object()


def config_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """The sorted keys whose values differ between two flat configurations (a key missing in one counts)."""
    return sorted(k for k in set(a) | set(b) if a.get(k, _MISSING) != b.get(k, _MISSING))
