"""Pre-filter metrics seam (dara/verl/prefilter.py): what it relies on in verl 0.9.1's v1 replay buffer,
and what it records. The end-to-end check (every step of a CPU run logs them) is tests/test_smoke_math.py."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from omegaconf import OmegaConf
from verl.trainer.ppo.v1 import trainer_base
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

from dara.verl import prefilter
from dara.verl.prefilter import PrefilterReplayBuffer, channel_rows, with_prefilter_metrics
from dara.verl.trainer import ChannelTrainerMixin


def test_seam_replay_buffer_clears_every_dropped_group_through_clear_groups():
    """Evicted groups (the DAPO filter) and the drained surplus both leave TransferQueue through
    `_clear_groups(partition_id, uids)`; `sample` returns (batch, metrics) that the trainer merges."""
    assert list(inspect.signature(ReplayBuffer._clear_groups).parameters) == ["self", "partition_id", "uids"]
    assert "self._clear_groups(partition_id, evicted_uids)" in inspect.getsource(ReplayBuffer._evict_terminal_groups)
    sample = inspect.getsource(ReplayBuffer.sample)
    assert "self._clear_groups(partition_id, surplus_uids)" in sample
    assert "return self._materialize_batch(" in sample and "eviction_metrics" in sample
    assert list(inspect.signature(ReplayBuffer.sample).parameters) == [
        "self", "global_steps", "partition_id", "batch_size"]
    assert "tq.kv_clear" in inspect.getsource(ReplayBuffer._clear_groups)
    assert issubclass(ReplayBufferAsync, ReplayBuffer)


def test_seam_trainer_builds_the_buffer_in_one_method_and_merges_sample_metrics():
    base = trainer_base.PPOTrainer
    assert "self.replay_buffer = self._build_replay_buffer()" in inspect.getsource(base.__init__)
    step = inspect.getsource(base._step_once)
    assert "self.replay_buffer.sample(" in step and "metrics.update(off_policy_metrics)" in step
    assert "_build_replay_buffer" in vars(ChannelTrainerMixin)


def sync_buffer():
    return ReplayBuffer(trainer_mode="sync", trainer_config=OmegaConf.create({}), max_off_policy_threshold=None,
                        max_off_policy_strategy="drop", sampler_kwargs=OmegaConf.create({}),
                        refill_fn=lambda n: None, filter_groups_metric="reward", train_batch_size=2,
                        gen_batch_size=1, max_inflight_gen_batches=2)


def test_with_prefilter_metrics_keeps_verls_buffer_and_its_state():
    buffer = sync_buffer()
    state = dict(vars(buffer))
    assert with_prefilter_metrics(buffer, []) is buffer and type(buffer) is ReplayBuffer
    wrapped = with_prefilter_metrics(buffer, ["correctness", "length"])
    assert wrapped is buffer and type(wrapped) is PrefilterReplayBuffer and isinstance(wrapped, ReplayBuffer)
    assert {k: v for k, v in vars(wrapped).items() if k in state} == state
    assert wrapped.prefilter_channels == ("correctness", "length")
    assert wrapped.prefilter_metrics() == {"rollout_prefilter/responses": 0.0, "rollout_prefilter/groups": 0.0}


def extra(**channels):
    return {"reward_extra_info": dict(channels)}


def test_channel_rows_reads_reward_extra_info_and_counts_missing():
    rows, missing = channel_rows([extra(correctness=1, length=0), extra(correctness=0), {"other": 1}],
                                 ["correctness", "length"])
    assert rows.tolist() == [[1.0, 0.0]] and missing == 2


def test_cleared_finished_groups_and_kept_batch_are_averaged(monkeypatch):
    """Two evicted groups (constant) and one kept group: the mean is over all 6 responses."""
    store = {"a_0": extra(correctness=0, length=0), "a_1": extra(correctness=0, length=0),
             "b_0": extra(correctness=0, length=1), "b_1": extra(correctness=0, length=1),
             "c_0": extra(correctness=1, length=1), "c_1": extra(correctness=0, length=0)}
    cleared = []
    monkeypatch.setattr(prefilter.tq, "kv_batch_get", lambda keys, partition_id, select_fields: {
        "extra_fields": [store[k] for k in keys]})
    monkeypatch.setattr(prefilter.tq, "kv_clear",  # TransferQueue (the store), the same module verl uses
                        lambda partition_id, keys: cleared.extend(keys))
    buffer = with_prefilter_metrics(sync_buffer(), ["correctness", "length"])
    for key in store:
        buffer.partitions["train"][key] = {}
    buffer.finished_keys["train"].update({"a", "b", "c"})
    buffer.failure_keys["train"].add("d")  # a failed group has no responses: nothing to read
    buffer._clear_groups("train", {"a", "b", "d"})
    assert {"a", "b", "d", "a_0", "a_1", "b_0", "b_1"} <= set(cleared)
    buffer._prefilter_record("train", ["c_0", "c_1"])
    buffer._prefilter_record("val", ["c_0"])  # validation is not a training step's generation
    metrics = buffer.prefilter_metrics()
    assert metrics["rollout_prefilter/responses"] == 6 and metrics["rollout_prefilter/groups"] == 3
    assert metrics["rollout_prefilter/length/mean"] == pytest.approx(np.mean([0, 0, 1, 1, 1, 0]))
    assert metrics["rollout_prefilter/correctness/mean"] == pytest.approx(1 / 6)
