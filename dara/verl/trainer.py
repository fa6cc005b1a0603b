"""The project's verl trainer: reward channels into the advantage step, diagnostics into the logs.

verl 0.9.1's v1 trainer fetches only uid, masks, rm_scores and log-probs from TransferQueue for the
advantage step, so per-channel rewards (reward_extra_info) never reach an estimator. `ChannelTrainerMixin`
overrides exactly that step: it also fetches the channels named in `algorithm.reward_channels`, then
calls verl's own `compute_advantage_for_multi_trajectories` with a `ChannelContext` as its config.
Everything else (rollout, reward loop, KL, PPO update, checkpoints) is verl's.

The mixin is registered over each verl trainer mode as `dara_<mode>` (`trainer.v1.trainer_mode`), together
with the CPU runtime's worker mixin, which acts only when `trainer.device=cpu`.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import torch
import transfer_queue as tq
from omegaconf import open_dict
from tensordict import TensorDict
from verl.protocol import DataProto
from verl.trainer.ppo.ray_trainer import apply_kl_penalty
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch
from verl.trainer.ppo.v1 import (
    PPOTrainerColocateAsync,
    PPOTrainerSeparateAsync,
    PPOTrainerSync,
    register_trainer,
)
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories
from verl.workers.utils.padding import response_to_nested

from dara.run_log import RunLog
from dara.verl.cpu.workers import CPUWorkersMixin
from dara.verl.estimators import ChannelContext, library_name, verl_estimator_name
from dara.verl.prefilter import with_prefilter_metrics

logger = logging.getLogger(__name__)

# What verl's own advantage step reads (trainer_base.PPOTrainer._compute_advantage, verl 0.9.1).
ADVANTAGE_FIELDS = ["uid", "response_mask", "rm_scores", "rollout_log_probs", "old_log_probs", "ref_log_prob",
                    "values"]
METRIC_PREFIX = "dara/"
CHECKPOINT_TRACKER = "latest_checkpointed_iteration.txt"  # verl's resume marker in default_local_dir


def channel_scores_from_extra_fields(extra_fields, channels: list[str]) -> torch.Tensor:
    """[N, K] float64 channel scores from each sample's `extra_fields["reward_extra_info"]`.

    Raises a ValueError naming the missing channel and the keys the reward function did return.
    """
    infos = []
    for value in extra_fields:
        fields = getattr(value, "data", value)
        infos.append(fields.get("reward_extra_info", {}) if isinstance(fields, dict) else {})
    available = sorted(infos[0]) if infos else []
    for channel in channels:
        missing = sum(channel not in info for info in infos)
        if missing:
            raise ValueError(
                f"reward channel {channel!r} (algorithm.reward_channels) is missing from the reward's extra info of "
                f"{missing}/{len(infos)} samples; the reward function returned keys {available}"
            )
    rows = [[float(info[c]) for c in channels] for info in infos]
    scores = torch.tensor(rows, dtype=torch.float64).reshape(len(infos), len(channels))
    if not torch.isfinite(scores).all():
        bad = (~torch.isfinite(scores)).nonzero()[0].tolist()
        raise ValueError(f"reward channel {channels[bad[1]]!r} is NaN or inf for sample {bad[0]}")
    return scores


def group_filter_counts(batch, metrics: dict) -> dict[str, float]:
    """Dynamic sampling made explicit: groups kept in the step's batch and groups drawn to fill it.

    verl's group filter logs the groups it evicted (summed reward constant) and the surplus it discarded;
    kept is the number of distinct prompt groups among the batch's real (non-padding) samples.
    """
    kept = len({key.split("_")[0] for key, tag in zip(batch.keys, batch.tags, strict=True)
                if not tag.get("is_padding", False)})
    evicted = sum(float(v) for k, v in metrics.items() if k.endswith("/filter_groups/evicted_samples"))
    surplus = sum(float(v) for k, v in metrics.items() if k.endswith("/filter_groups/discarded_surplus_samples"))
    return {"filter/kept_groups": float(kept), "filter/drawn_groups": kept + evicted + surplus}


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


REWARD_FLAGS = {"reward_timeout": "reward/timeouts", "reward_error": "reward/errors"}  # rewards.verl_entry


def reward_flag_counts(extra_fields) -> dict[str, float]:
    """Per-step counts of the reward manager's per-sample flags (timed out, failed), where it sets them."""
    counts = dict.fromkeys(REWARD_FLAGS.values(), 0.0)
    seen = False
    for value in extra_fields:
        fields = getattr(value, "data", value)
        info = fields.get("reward_extra_info", {}) if isinstance(fields, dict) else {}
        for flag, key in REWARD_FLAGS.items():
            if flag in info:
                seen = True
                counts[key] += float(info[flag])
    return counts if seen else {}


class ChannelTrainerMixin:
    """Overrides verl's advantage step for the project's estimators; logs a run log per step."""

    VERL_MODE: str  # the verl trainer mode the class implements ("sync", "colocate_async", ...)

    def __init__(self, config):
        # verl's trainer branches on the mode's *name* (replay buffer, refill, checkpoints: `== "sync"`) and
        # reads the mode's options under trainer.v1.<mode>. TaskRunner already chose this class by its
        # registered name (dara_<mode>), so from here on verl sees the mode the class implements.
        with open_dict(config):
            config.trainer.v1.trainer_mode = self.VERL_MODE
        super().__init__(config)

    def _build_replay_buffer(self):
        # rollout_prefilter/<channel>/mean over every generated response, evicted groups included
        channels = list(self.config.algorithm.get("reward_channels", None) or [])
        return with_prefilter_metrics(super()._build_replay_buffer(), channels)

    def init(self):
        super().init()
        self.run_log = RunLog.from_config(self.config, resumed_step=self.global_steps)

    def _reward_channels(self) -> list[str]:
        channels = list(self.config.algorithm.get("reward_channels", None) or [])
        if not channels:
            raise ValueError("algorithm.reward_channels is empty: name the reward_extra_info keys to use as channels")
        return channels

    def _compute_advantage(self, batch, metrics: dict):
        name = library_name(str(self.config.algorithm.adv_estimator))
        if name is None:  # one of verl's own estimators: verl's own path
            return super()._compute_advantage(batch, metrics)
        channels = self._reward_channels()
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                               select_fields=ADVANTAGE_FIELDS + ["extra_fields"])
        extra_fields = list(data.pop("extra_fields"))
        scores = channel_scores_from_extra_fields(extra_fields, channels)
        metrics.update(reward_flag_counts(extra_fields))
        response_mask = data["response_mask"]
        proto = DataProto(batch=data.to_padded_tensor())
        proto.batch["token_level_scores"] = proto.batch["rm_scores"]
        proto.non_tensor_batch["uid"] = np.array(proto.batch.pop("uid").tolist(), dtype=object)

        algorithm = self.config.algorithm
        if algorithm.use_kl_in_reward:
            proto, kl_metrics = apply_kl_penalty(proto, kl_ctrl=self.kl_ctrl_in_reward, kl_penalty=algorithm.kl_penalty)
            metrics.update(kl_metrics)
        else:
            proto.batch["token_level_rewards"] = proto.batch["token_level_scores"]
        rollout_corr = algorithm.get("rollout_correction", None)
        corrected = (rollout_corr is not None and "rollout_log_probs" in proto.batch
                     and not rollout_corr.get("bypass_mode", False))
        if corrected:
            proto, is_metrics = compute_rollout_correction_and_add_to_batch(proto, rollout_corr)
            metrics.update(is_metrics)

        real = np.array([not tag.get("is_padding", False) for tag in batch.tags], dtype=bool)
        proto = self._advantages_for_real_rows(proto, scores, channels, real, batch.keys, name, metrics)

        fields = ["advantages", "returns"] + (["token_level_rewards"] if algorithm.use_kl_in_reward else [])
        if corrected:
            fields.append("response_mask")
            if "rollout_is_weights" in proto.batch:
                fields.append("rollout_is_weights")
        output = TensorDict({f: response_to_nested(proto.batch[f], response_mask) for f in fields},
                            batch_size=len(batch))
        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=output)

    def _advantages_for_real_rows(self, proto, scores, channels, real, keys, name, metrics):
        """Run the estimator on the real samples only: verl's divisibility padding gets advantage 0."""
        context = ChannelContext(self.config.algorithm, scores[torch.from_numpy(real)], channels)
        subset = proto if real.all() else proto.select_idxs(np.flatnonzero(real))
        subset = compute_advantage_for_multi_trajectories(
            subset,
            batch_keys=[k for k, keep in zip(keys, real, strict=True) if keep],
            adv_estimator=verl_estimator_name(name),
            num_repeat=self.config.actor_rollout_ref.rollout.n,
            config=context,
        )
        if real.all():
            proto = subset
        else:
            for field in ("advantages", "returns"):
                full = torch.zeros_like(proto.batch["response_mask"], dtype=subset.batch[field].dtype)
                full[torch.from_numpy(real)] = subset.batch[field]
                proto.batch[field] = full
        metrics.update({METRIC_PREFIX + k: v for k, v in context.metrics.items()})
        real_scores = context.channel_scores
        metrics.update({f"reward/{c}/mean": float(real_scores[:, k].mean()) for k, c in enumerate(channels)})
        return proto

    def _save_checkpoint(self):
        tracker = Path(self.config.trainer.default_local_dir) / CHECKPOINT_TRACKER
        previous = tracker.read_text() if tracker.exists() else None
        super()._save_checkpoint()
        if getattr(self, "run_log", None) is None or not tracker.exists():
            return
        # verl marks the step resumable before the step's metrics are logged; hold the mark back until
        # the run log has the step, so a job killed in between redoes the step instead of losing its line.
        self._pending_tracker = tracker.read_text()
        if previous is None:
            tracker.unlink()
        else:
            _atomic_write(tracker, previous)

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        if self.config.algorithm.filter_groups.get("enable", False):
            metrics.update(group_filter_counts(batch, metrics))
        if getattr(self, "run_log", None) is not None:
            self.run_log.write(global_steps, metrics, self._reward_channels())
            pending, self._pending_tracker = getattr(self, "_pending_tracker", None), None
            if pending is not None:
                _atomic_write(Path(self.config.trainer.default_local_dir) / CHECKPOINT_TRACKER, pending)


@register_trainer("dara_sync")
class DaraTrainerSync(ChannelTrainerMixin, CPUWorkersMixin, PPOTrainerSync):
    """verl's synchronous trainer with the project's advantage step."""

    VERL_MODE = "sync"


@register_trainer("dara_colocate_async")
class DaraTrainerColocateAsync(ChannelTrainerMixin, CPUWorkersMixin, PPOTrainerColocateAsync):
    """verl's colocated asynchronous trainer with the project's advantage step."""

    VERL_MODE = "colocate_async"


@register_trainer("dara_separate_async")
class DaraTrainerSeparateAsync(ChannelTrainerMixin, CPUWorkersMixin, PPOTrainerSeparateAsync):
    """verl's separate-pool asynchronous trainer with the project's advantage step."""

    VERL_MODE = "separate_async"
