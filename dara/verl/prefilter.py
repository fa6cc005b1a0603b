"""Pre-filter metrics: each reward channel's mean over EVERY response generated for a step.

The paper's math speed metric (T_0.95 / T_0.99) reads the length reward of all responses, before dynamic sampling
evicts constant groups (verl logs the kept batch only and deletes evicted groups first). `with_prefilter_metrics`
turns the replay buffer into a recording subclass that reads every group it clears and the batch it returns.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import transfer_queue as tq
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

from dara.verl.rounds import TRAIN_PARTITION, RoundsReplayBuffer, reward_info

logger = logging.getLogger(__name__)

PREFIX = "rollout_prefilter/"


class PrefilterRecorder:
    prefilter_channels: tuple[str, ...] = ()

    def _prefilter_reset(self) -> None:
        self._prefilter_rows: list[np.ndarray] = []
        self._prefilter_groups: set[str] = set()
        self._prefilter_missing = 0

    def _prefilter_record(self, partition_id: str, keys: Sequence[str]) -> None:
        if partition_id != TRAIN_PARTITION or not keys or not self.prefilter_channels:
            return
        data = tq.kv_batch_get(keys=list(keys), partition_id=partition_id, select_fields=["extra_fields"])
        infos, channels = [reward_info(value) for value in data["extra_fields"]], self.prefilter_channels
        # [M, K] channel values of the trajectories that carry all channels; the others are counted as missing
        rows = [[float(info[c]) for c in channels] for info in infos if all(c in info for c in channels)]
        self._prefilter_rows.append(np.asarray(rows, dtype=np.float64).reshape(len(rows), len(channels)))
        self._prefilter_missing += len(infos) - len(rows)
        self._prefilter_groups.update(key.split("_")[0] for key in keys)

    def _clear_groups(self, partition_id: str, uids: set[str]) -> None:
        finished = set(uids) & set(self.finished_keys[partition_id])  # a failed group has no trajectories
        self._prefilter_record(partition_id, [k for k in self.partitions[partition_id] if k.split("_")[0] in finished])
        super()._clear_groups(partition_id, uids)

    def sample(self, global_steps: int, partition_id: str, batch_size: int):
        if partition_id != TRAIN_PARTITION or not self.prefilter_channels:
            return super().sample(global_steps, partition_id, batch_size)
        self._prefilter_reset()
        batch, metrics = super().sample(global_steps, partition_id, batch_size)
        self._prefilter_record(partition_id, [key for key, tag in zip(batch.keys, batch.tags, strict=True)
                                              if not tag.get("is_padding", False)])
        return batch, {**metrics, **self.prefilter_metrics()}

    def prefilter_metrics(self) -> dict[str, float]:
        rows = self._prefilter_rows
        values = np.concatenate(rows) if rows else np.zeros((0, len(self.prefilter_channels)))
        metrics = {f"{PREFIX}responses": float(values.shape[0]), f"{PREFIX}groups": float(len(self._prefilter_groups))}
        if values.shape[0]:
            metrics.update({f"{PREFIX}{c}/mean": float(values[:, k].mean())
                            for k, c in enumerate(self.prefilter_channels)})
        if self._prefilter_missing:
            logger.warning("%d generated responses lacked a reward channel; left out of %s", self._prefilter_missing,
                           PREFIX)
            metrics[f"{PREFIX}missing_channels"] = float(self._prefilter_missing)
        return metrics


class PrefilterReplayBuffer(PrefilterRecorder, ReplayBuffer):
    pass


class PrefilterRoundsReplayBuffer(PrefilterRecorder, RoundsReplayBuffer):
    def discard(self, partition_id: str, uids: set[str], rows: list[str], generated: bool = True) -> None:
        if generated and uids:
            self._prefilter_record(partition_id, rows)
        super().discard(partition_id, uids, rows, generated)


RECORDING_CLASSES = {ReplayBuffer: PrefilterReplayBuffer, RoundsReplayBuffer: PrefilterRoundsReplayBuffer}


def with_prefilter_metrics(buffer, channels: Sequence[str]):
    """The same replay buffer, recording `rollout_prefilter/*` for `channels` (no channels: unchanged)."""
    if not (channels := tuple(str(c) for c in channels or ())):
        return buffer
    if (recording := RECORDING_CLASSES.get(type(buffer))) is None:
        logger.warning("replay buffer %s is not verl's own: no %s metrics", type(buffer).__name__, PREFIX)
        return buffer
    buffer.__class__ = recording  # a subclass that adds methods only: verl's state is kept as it is
    buffer.prefilter_channels = channels
    buffer._prefilter_reset()
    return buffer
