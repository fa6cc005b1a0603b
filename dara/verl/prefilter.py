"""Pre-filter metrics: each reward channel's mean over EVERY response generated for a step.

The paper's math speed metric (T_0.95 / T_0.99, EXPERIMENTS.md) reads the length reward of all responses
a step generated, before dynamic sampling evicts the groups whose summed reward is constant. verl 0.9.1
logs per-channel values only for the kept batch, and its v1 replay buffer deletes evicted groups from
TransferQueue (`ReplayBuffer._clear_groups`) before anything else sees them.

`PrefilterRecorder` is a mixin over verl's replay buffer classes (no verl edits). In the training partition
it reads the channels from `extra_fields["reward_extra_info"]` of:
- every finished group the buffer clears while sampling a step (groups the filter evicts, and the surplus
  it discards once enough groups are kept, which includes the in-flight requests it drains), and
- every trajectory of the batch it returns (the kept groups),
and adds to the step's metrics:
- `rollout_prefilter/<channel>/mean` over all those responses,
- `rollout_prefilter/responses` (how many) and `rollout_prefilter/groups`.

`with_prefilter_metrics(buffer, channels)` turns the buffer verl's trainer built into the recording class
(same object and state; only methods are added), so verl's own construction logic is kept as is. The same
holds for the authors' rounds (`dara.verl.rounds`, which clear through their own `discard`): the step's metrics
then cover every round.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import numpy as np
import transfer_queue as tq
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

from dara.verl.rounds import TRAIN_PARTITION, RoundsReplayBuffer

logger = logging.getLogger(__name__)

PREFIX = "rollout_prefilter/"


def channel_rows(extra_fields: Iterable, channels: Sequence[str]) -> tuple[np.ndarray, int]:
    """([M, K] channel values of the trajectories that carry all channels, count of those that do not)."""
    rows, missing = [], 0
    for value in extra_fields:
        fields = getattr(value, "data", value)
        info = fields.get("reward_extra_info", {}) if isinstance(fields, dict) else {}
        if all(channel in info for channel in channels):
            rows.append([float(info[channel]) for channel in channels])
        else:
            missing += 1
    return np.asarray(rows, dtype=np.float64).reshape(len(rows), len(channels)), missing


class PrefilterRecorder:
    """Mixin over verl's ReplayBuffer: records the channels of every response generated for a step."""

    prefilter_channels: tuple[str, ...] = ()

    def _prefilter_reset(self) -> None:
        self._prefilter_rows: list[np.ndarray] = []
        self._prefilter_groups: set[str] = set()
        self._prefilter_missing = 0

    def _prefilter_record(self, partition_id: str, keys: Sequence[str]) -> None:
        if partition_id != TRAIN_PARTITION or not keys or not self.prefilter_channels:
            return
        if not hasattr(self, "_prefilter_rows"):
            self._prefilter_reset()
        data = tq.kv_batch_get(keys=list(keys), partition_id=partition_id, select_fields=["extra_fields"])
        rows, missing = channel_rows(list(data["extra_fields"]), self.prefilter_channels)
        self._prefilter_rows.append(rows)
        self._prefilter_missing += missing
        self._prefilter_groups.update(key.split("_")[0] for key in keys)

    def _clear_groups(self, partition_id: str, uids: set[str]) -> None:
        # Only finished groups hold generated responses (a failed group has no trajectories to read).
        finished = set(uids) & set(self.finished_keys[partition_id])
        keys = [key for key in self.partitions[partition_id] if key.split("_")[0] in finished]
        self._prefilter_record(partition_id, keys)
        super()._clear_groups(partition_id, uids)

    def sample(self, global_steps: int, partition_id: str, batch_size: int):
        if partition_id != TRAIN_PARTITION or not self.prefilter_channels:
            return super().sample(global_steps, partition_id, batch_size)
        self._prefilter_reset()
        batch, metrics = super().sample(global_steps, partition_id, batch_size)
        kept = [key for key, tag in zip(batch.keys, batch.tags, strict=True) if not tag.get("is_padding", False)]
        self._prefilter_record(partition_id, kept)
        metrics = dict(metrics)
        metrics.update(self.prefilter_metrics())
        return batch, metrics

    def prefilter_metrics(self) -> dict[str, float]:
        """The step's pre-filter metrics (empty before the first record)."""
        rows = getattr(self, "_prefilter_rows", [])
        values = np.concatenate(rows) if rows else np.zeros((0, len(self.prefilter_channels)))
        metrics = {f"{PREFIX}responses": float(values.shape[0]),
                   f"{PREFIX}groups": float(len(getattr(self, "_prefilter_groups", ())))}
        if values.shape[0]:
            metrics.update({f"{PREFIX}{c}/mean": float(values[:, k].mean())
                            for k, c in enumerate(self.prefilter_channels)})
        missing = getattr(self, "_prefilter_missing", 0)
        if missing:
            logger.warning("%d generated responses lacked a reward channel; left out of %s", missing, PREFIX)
            metrics[f"{PREFIX}missing_channels"] = float(missing)
        return metrics


class PrefilterReplayBuffer(PrefilterRecorder, ReplayBuffer):
    """verl's synchronous replay buffer, recording pre-filter metrics."""


class PrefilterReplayBufferAsync(PrefilterRecorder, ReplayBufferAsync):
    """verl's asynchronous replay buffer, recording pre-filter metrics (responses sampled or cleared
    during a sample call; async modes overlap generation with training, so this is approximate)."""


class PrefilterRoundsReplayBuffer(PrefilterRecorder, RoundsReplayBuffer):
    """The authors' generation rounds (dara.verl.rounds), recording pre-filter metrics over all rounds of a
    step: every round's dropped groups, the informative surplus and the kept batch."""

    def discard(self, partition_id: str, uids: set[str], rows: list[str], generated: bool = True) -> None:
        if generated and uids:
            self._prefilter_record(partition_id, rows)
        super().discard(partition_id, uids, rows, generated)


RECORDING_CLASSES = {ReplayBuffer: PrefilterReplayBuffer, ReplayBufferAsync: PrefilterReplayBufferAsync,
                     RoundsReplayBuffer: PrefilterRoundsReplayBuffer}


def with_prefilter_metrics(buffer, channels: Sequence[str]):
    """The same replay buffer, recording `rollout_prefilter/*` for `channels` (no channels: unchanged)."""
    channels = tuple(str(c) for c in channels or ())
    if not channels:
        return buffer
    recording = RECORDING_CLASSES.get(type(buffer))
    if recording is None:
        logger.warning("replay buffer %s is not verl's own: no %s metrics", type(buffer).__name__, PREFIX)
        return buffer
    buffer.__class__ = recording  # a subclass that adds methods only: verl's state is kept as it is
    buffer.prefilter_channels = channels
    buffer._prefilter_reset()
    return buffer
