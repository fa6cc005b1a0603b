"""Pre-filter metrics (dara/verl/prefilter.py) on verl 0.9.1's v1 replay buffer; verl's step merging them into
every step's metrics: tests/test_smoke_math.py (a CPU run)."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

from dara.verl.prefilter import PrefilterReplayBuffer, with_prefilter_metrics
from tests.transfer_queue_store import TransferQueueStore


class TransferQueueTable(TransferQueueStore):
    """One step's generations: finished groups a-d, two responses each; a's rewards are equal (evicted)."""

    def __init__(self):
        super().__init__()
        self.tags["train"] = {uid: {"is_prompt": True, "status": "finished", "global_steps": 1} for uid in "abcd"}
        rewards = {"a": (1.0, 1.0), "b": (0.0, 1.0), "c": (1.0, 0.0), "d": (0.0, 2.0)}
        for uid, pair in rewards.items():
            for session, reward in enumerate(pair):
                key = f"{uid}_{session}_0"
                self.tags["train"][key] = {"status": "success", "global_steps": 1}
                self.fields[key] = {"rm_scores": torch.tensor([0.0, reward]), "extra_fields": {
                    "reward_extra_info": {"correctness": reward, "length": float(uid == "a")}}}


@pytest.fixture
def transfer_queue(monkeypatch):
    return TransferQueueTable().install(monkeypatch)


def dapo_buffer(cls=ReplayBuffer):
    return cls(trainer_mode="sync", trainer_config=OmegaConf.create({}), max_off_policy_threshold=None,
               max_off_policy_strategy="drop", sampler_kwargs=OmegaConf.create({}), refill_fn=lambda n: None,
               filter_groups_metric="reward", train_batch_size=2, gen_batch_size=1, max_inflight_gen_batches=2)


def test_seam_verls_sample_drops_groups_through_clear_groups_and_returns_its_metrics(transfer_queue):
    """verl's sample with its DAPO filter evicts the constant group and discards the surplus, both through
    `_clear_groups` (then kv_clear); the recording buffer reads every dropped response before it goes."""
    cleared_groups = []

    class Recorded(ReplayBuffer):
        def _clear_groups(self, partition_id, uids):
            cleared_groups.append((partition_id, set(uids)))
            super()._clear_groups(partition_id, uids)

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
    transfer_queue.__init__()
    batch, metrics = recording.sample(global_steps=1, partition_id="train", batch_size=2)
    assert metrics["training/filter_groups/evicted_samples"] == 1  # verl's metrics, kept
    assert metrics["rollout_prefilter/responses"] == 8 and metrics["rollout_prefilter/groups"] == 4
    assert metrics["rollout_prefilter/length/mean"] == pytest.approx(2 / 8)  # group a's, evicted, counted
    assert metrics["rollout_prefilter/correctness/mean"] == pytest.approx((1 + 1 + 0 + 1 + 1 + 0 + 0 + 2) / 8)


def extra(**channels):
    return {"reward_extra_info": dict(channels)}


def test_cleared_finished_groups_and_kept_batch_are_averaged(monkeypatch):
    """Two evicted groups (constant) and one kept group: the mean is over all 5 responses with every channel."""
    store = {"a_0": extra(correctness=0, length=0), "a_1": extra(correctness=0, length=0),
             "b_0": extra(correctness=0, length=1), "b_1": extra(correctness=0, length=1),
             "c_0": extra(correctness=1, length=1), "c_1": extra(correctness=0)}
    transfer_queue = TransferQueueStore().install(monkeypatch)
    transfer_queue.fields = {key: {"extra_fields": value} for key, value in store.items()}
    buffer = with_prefilter_metrics(dapo_buffer(), ["correctness", "length"])
    for key in store:
        buffer.partitions["train"][key] = {}
    buffer.finished_keys["train"].update({"a", "b", "c"})
    buffer.failure_keys["train"].add("d")  # a failed group has no responses: nothing to read
    buffer._clear_groups("train", {"a", "b", "d"})
    assert {"a", "b", "d", "a_0", "a_1", "b_0", "b_1"} <= set(transfer_queue.cleared)
    buffer._prefilter_record("train", ["c_0", "c_1"])
    buffer._prefilter_record("val", ["c_0"])  # validation is not a training step's generation
    metrics = buffer.prefilter_metrics()
    assert metrics["rollout_prefilter/responses"] == 5 and metrics["rollout_prefilter/groups"] == 3
    assert metrics["rollout_prefilter/missing_channels"] == 1  # c_1: left out, counted
    assert metrics["rollout_prefilter/length/mean"] == pytest.approx(3 / 5)
    assert metrics["rollout_prefilter/correctness/mean"] == pytest.approx(1 / 5)
