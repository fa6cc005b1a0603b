"""Pre-filter metrics (dara/verl/prefilter.py) on verl 0.9.1's v1 replay buffer over TransferQueue as a dict (also
test_verl_rounds.py's); verl's step merging them into every step's metrics: tests/test_smoke_math.py (a CPU run)."""

from __future__ import annotations

import pytest
import torch
import transfer_queue as tq
from omegaconf import OmegaConf
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

from dara.verl.prefilter import PrefilterReplayBuffer, with_prefilter_metrics


class TransferQueueStore:
    """TransferQueue (a service verl talks to over Ray): tags per partition (prompt entries and trajectories),
    fields per key, and every key cleared."""

    def __init__(self):
        self.tags: dict[str, dict[str, dict]] = {"train": {}}
        self.fields: dict[str, dict] = {}
        self.cleared: list[str] = []

    def kv_list(self, partition_id=None):
        return {p: dict(t) for p, t in self.tags.items() if partition_id in (None, p)}

    def kv_batch_get(self, keys, partition_id, select_fields):
        return {field: [self.fields[k][field] for k in keys] for field in select_fields}

    def kv_clear(self, partition_id, keys):
        for key in keys:
            self.tags[partition_id].pop(key, None)
            self.fields.pop(key, None)
        self.cleared.extend(keys)

    def install(self, monkeypatch):
        """This store in place of the three calls verl's buffer and the project make."""
        for name in ("kv_list", "kv_batch_get", "kv_clear"):
            monkeypatch.setattr(tq, name, getattr(self, name))
        return self


def one_step(store: TransferQueueStore) -> TransferQueueStore:
    """One step's generations: finished groups a-d, two responses each; a's rewards are equal (evicted); d_1_0
    lacks the length channel."""
    store.__init__()
    store.tags["train"] = {uid: {"is_prompt": True, "status": "finished", "global_steps": 1} for uid in "abcd"}
    rewards = {"a": (1.0, 1.0), "b": (0.0, 1.0), "c": (1.0, 0.0), "d": (0.0, 2.0)}
    for uid, pair in rewards.items():
        for session, reward in enumerate(pair):
            key = f"{uid}_{session}_0"
            info = {"correctness": reward} if key == "d_1_0" else {"correctness": reward, "length": float(uid == "a")}
            store.tags["train"][key] = {"status": "success", "global_steps": 1}
            store.fields[key] = {"rm_scores": torch.tensor([0.0, reward]), "extra_fields": {"reward_extra_info": info}}
    return store


def dapo_buffer(cls=ReplayBuffer):
    return cls(trainer_mode="sync", trainer_config=OmegaConf.create({}), max_off_policy_threshold=None,
               max_off_policy_strategy="drop", sampler_kwargs=OmegaConf.create({}), refill_fn=lambda n: None,
               filter_groups_metric="reward", train_batch_size=2, gen_batch_size=1, max_inflight_gen_batches=2)


def test_seam_verls_sample_drops_groups_through_clear_groups_and_returns_its_metrics(monkeypatch):
    """verl's sample with its DAPO filter evicts the constant group and discards the surplus, both through
    `_clear_groups` (then kv_clear); the recording buffer reads every dropped response before it goes."""
    cleared_groups = []

    class Recorded(ReplayBuffer):
        def _clear_groups(self, partition_id, uids):
            cleared_groups.append((partition_id, set(uids)))
            super()._clear_groups(partition_id, uids)

    transfer_queue = one_step(TransferQueueStore().install(monkeypatch))
    batch, metrics = dapo_buffer(Recorded).sample(global_steps=1, partition_id="train", batch_size=2)
    kept = {key.split("_")[0] for key in batch.keys}
    assert len(kept) == 2 and "a" not in kept and len(batch.keys) == 4
    surplus = {"b", "c", "d"} - kept
    assert cleared_groups == [("train", {"a"}), ("train", surplus)]
    assert {"a", "a_0_0", "a_1_0", *surplus} <= set(transfer_queue.cleared)
    assert metrics["training/filter_groups/evicted_samples"] == 1
    assert metrics["training/filter_groups/discarded_surplus_samples"] == 1

    buffer = dapo_buffer()
    state = dict(vars(buffer))
    assert with_prefilter_metrics(buffer, []) is buffer and type(buffer) is ReplayBuffer  # no channels: verl's
    recording = with_prefilter_metrics(buffer, ["correctness", "length"])  # in place, verl's state kept
    assert recording is buffer and type(buffer) is PrefilterReplayBuffer and vars(buffer).items() >= state.items()
    one_step(transfer_queue)
    batch, metrics = recording.sample(global_steps=1, partition_id="train", batch_size=2)
    assert metrics["training/filter_groups/evicted_samples"] == 1  # verl's metrics, kept
    # every response but d_1_0 (left out, counted)
    assert metrics["rollout_prefilter/responses"] == 7 and metrics["rollout_prefilter/groups"] == 4
    assert metrics["rollout_prefilter/missing_channels"] == 1
    assert metrics["rollout_prefilter/length/mean"] == pytest.approx(2 / 7)  # group a's, evicted, counted
    assert metrics["rollout_prefilter/correctness/mean"] == pytest.approx((1 + 1 + 0 + 1 + 1 + 0 + 0) / 7)
    recording._prefilter_record("val", batch.keys)  # validation is not a training step's generation
    recording.partitions["train"]["e_0_0"] = {}
    recording.failure_keys["train"].add("e")
    recording._clear_groups("train", {"e"})  # a failed group's rows are not read (none in TransferQueue)
    assert recording.prefilter_metrics().items() <= metrics.items()
