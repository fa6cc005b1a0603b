"""The authors' math dynamic sampling (dara/verl/rounds.py): their row order and selection against plain loops
written from the rule (their `_balance_batch` and `fit()`), on verl 0.9.1's own replay-buffer code over
test_verl_prefilter.py's in-memory TransferQueue; a CPU run: tests/test_smoke_math.py."""

from __future__ import annotations

import random
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import transfer_queue as tq
from omegaconf import OmegaConf
from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions

from dara.config import compose
from dara.verl.prefilter import with_prefilter_metrics
from dara.verl.rounds import (
    DynamicSamplingShortError,
    RoundsReplayBuffer,
    RoundsSettings,
    round_row_order,
    rounds_settings,
)
from dara.verl.trainer import DaraTrainer
from tests.test_verl_prefilter import TransferQueueStore


def loop_order(seq_lens: list[int], world_size: int) -> list[int]:
    """Their `_balance_batch` written out: workload 24576 s + s^2, verl's partitions, each partition sorted
    by (workload, row), then its even positions and its odd positions reversed, partitions in turn."""
    work = [24576 * s + s * s for s in seq_lens]
    parts = min(world_size, len(work))
    order = []
    for partition in get_seqlen_balanced_partitions(work, k_partitions=parts, equal_size=len(work) % parts == 0):
        ranked = sorted(partition, key=lambda row: (work[row], row))
        order += ranked[0::2] + ranked[1::2][::-1]
    return order


@pytest.mark.parametrize("rows, world_size", [(8, 1), (12, 2), (96, 8), (1536, 8), (10, 4), (3, 8)])
def test_round_row_order_is_their_balance_batch_order(rows, world_size):
    rng = random.Random(rows * 31 + world_size)
    seq_lens = [rng.randint(200, 9024) for _ in range(rows)]
    seq_lens[: rows // 4] = [seq_lens[0]] * (rows // 4)  # ties: broken by the row index
    order = round_row_order(seq_lens, world_size)
    assert order == loop_order(seq_lens, world_size)
    assert sorted(order) == list(range(rows))


def group(lengths: list[int], length_rewards: list[int], correctness: list[int] | None = None):
    correctness = correctness or [0] * len(lengths)
    return list(zip(lengths, correctness, length_rewards, strict=True))


class Rounds:
    """`submit_round`: the next planned round into the store, generated and scored; `seen`: every row's tag and sum."""

    def __init__(self, store: TransferQueueStore, plan: list[list]):
        self.store, self.plan, self.submitted, self.seen = store, list(plan), [], {}

    def __call__(self, prompts: int) -> list[str]:
        groups = self.plan.pop(0)
        assert len(groups) == prompts
        uids = [f"r{len(self.submitted) + 1}p{i}" for i in range(prompts)]
        for uid, responses in zip(uids, groups, strict=True):
            failed = responses == "fail"
            self.store.tags["train"][uid] = {"is_prompt": True, "status": "failure" if failed else "finished",
                                             "global_steps": 1}
            for session, (seq_len, correct, short) in enumerate([] if failed else responses):
                key = f"{uid}_{session}_0"
                self.store.tags["train"][key] = {"status": "success", "seq_len": seq_len, "global_steps": 1}
                self.seen[key] = {**self.store.tags["train"][key], "sum": float(correct + short)}
                self.store.fields[key] = {"rm_scores": torch.tensor([0.0, float(correct + short)]),
                                          "extra_fields": {"reward_extra_info": {"correctness": correct,
                                                                                 "length": short}}}
        self.submitted.append(uids)
        return uids


def buffer_for(plan, monkeypatch, round_prompts=4, max_rounds=3, world_size=2, channels=()):
    submit = Rounds(TransferQueueStore().install(monkeypatch), plan)
    buffer = RoundsReplayBuffer(RoundsSettings(round_prompts, max_rounds, "reward"), submit_round=submit,
                                world_size=lambda: world_size, trainer_mode="sync",
                                trainer_config=OmegaConf.create({}), max_off_policy_threshold=None,
                                max_off_policy_strategy="drop", sampler_kwargs=OmegaConf.create({}),
                                refill_fn=lambda n: None, poll_interval=0.0)
    return with_prefilter_metrics(buffer, list(channels)), submit, submit.store


def expected_batch(seen: dict, submitted: list[list[str]], batch_size: int, world_size: int) -> list[str]:
    """The rule as a loop: per round, rows (prompt, session) in their order; informative = summed rewards not all
    equal over >= 2 responses; the first batch_size informative uids over the rounds; all their rows."""
    ordered, informative = [], set()
    for uids in submitted:
        keys = [k for u in uids for k in sorted(k for k in seen if k.startswith(u + "_"))]
        order = loop_order([seen[k]["seq_len"] for k in keys], world_size)
        ordered += [keys[i] for i in order]
        for uid in uids:
            sums = [seen[k]["sum"] for k in keys if k.startswith(uid + "_")]
            if len(sums) >= 2 and len(set(sums)) > 1:
                informative.add(uid)
    kept = []
    for uid in [k.split("_")[0] for k in ordered]:
        if uid in informative and uid not in kept and len(kept) < batch_size:
            kept.append(uid)
    return [k for k in ordered if k.split("_")[0] in kept]


CONSTANT = group([10, 20], [0, 0])


@pytest.mark.parametrize("plan, options, batch_size, metrics", [
    # two rounds: 2 of 4 informative (a constant and a single-response group), then 3 of 4; the pre-filter
    # metrics over all 15 responses of both rounds
    ([[group([100, 300], [1, 0]), group([50, 60], [1, 1]), group([900, 20], [0, 1]), group([70], [1])],
      [group([40, 41], [1, 0]), group([500, 501], [0, 0]), group([10, 800], [1, 0], [1, 0]), group([333, 334], [0, 1])]],
     {"channels": ("correctness", "length")}, 4,
     {"filter/rounds": 2, "filter/drawn_groups": 8, "filter/kept_groups": 4, "filter/informative_groups": 5,
      "filter/acceptance_rate": 5 / 8, "rollout_prefilter/responses": 15, "rollout_prefilter/groups": 8,
      "rollout_prefilter/length/mean": 8 / 15}),
    # one round suffices; an informative group past the first 3 is discarded
    ([[group([100, 300], [1, 0]), group([50, 60], [1, 0]), group([900, 20], [0, 1]), group([7, 8], [1, 0])]],
     {"world_size": 1}, 3, {"filter/rounds": 1, "filter/kept_groups": 3, "filter/informative_groups": 4}),
    # a failed group is dropped and counted
    ([[group([10, 20], [1, 0]), "fail", group([30, 40], [0, 1]), group([50, 60], [1, 0])]], {}, 3,
     {"filter/rounds": 1, "filter/failed_groups": 1, "filter/kept_groups": 3}),
    # no cap: rounds go on until the batch is full
    ([[CONSTANT] * 2] * 5 + [[group([1, 2], [1, 0]), group([3, 4], [0, 1])]], {"round_prompts": 2, "max_rounds": 0},
     2, {"filter/rounds": 6, "filter/kept_groups": 2}),
])
def test_rounds_keep_the_first_informative_groups(monkeypatch, plan, options, batch_size, metrics):
    buffer, submit, store = buffer_for(plan, monkeypatch, **options)
    batch, found = buffer.sample(1, "train", batch_size)
    assert batch.keys == expected_batch(submit.seen, submit.submitted, batch_size, options.get("world_size", 2))
    assert [tag["seq_len"] for tag in batch.tags] == [submit.seen[k]["seq_len"] for k in batch.keys]
    assert {key: found[key] for key in metrics} == pytest.approx(metrics)
    # every dropped group left the store (prompt entry and rows), and the kept groups' prompt entries
    left = store.tags["train"]
    assert {k.split("_")[0] for k in left} == {k.split("_")[0] for k in batch.keys}
    assert not any(tag.get("is_prompt") for tag in left.values())


def test_cap_reached_short_raises_the_one_line_error(monkeypatch):
    constant = group([10, 20], [1, 1])
    plan = [[constant, group([5, 6], [1, 0]), constant, constant]] * 2
    buffer, _, _ = buffer_for(plan, monkeypatch, max_rounds=2)
    with pytest.raises(DynamicSamplingShortError) as error:
        buffer.sample(7, "train", 4)
    message = str(error.value)
    assert "\n" not in message and "acceptance 0.250" in message and "run.dynamic_sampling.max_rounds=2" in message
    assert message.startswith("step 7: 2 of the 4 informative groups after 2 round(s) of 4 prompts")


@pytest.mark.parametrize("block, expected", [
    ({"mode": "rounds", "round_prompts": 768, "max_rounds": 2}, RoundsSettings(768, 2, "reward")),
    ({"mode": "replay"}, None), ({}, None),
    ({"mode": "round"}, "run.dynamic_sampling.mode='round'"),
    ({"mode": "rounds", "round_prompts": 0, "max_rounds": 2}, "run.dynamic_sampling.round_prompts=0"),
    ({"mode": "rounds", "round_prompts": 768, "max_rounds": None}, "run.dynamic_sampling.max_rounds=None"),
])
def test_settings_of_the_rounds_mode_and_a_bad_key_named(block, expected):
    config = OmegaConf.create({"run": {"dynamic_sampling": block}, "algorithm": {"filter_groups": {"metric": "reward"}}})
    if isinstance(expected, str):
        with pytest.raises(ValueError, match=re.escape(expected)):
            rounds_settings(config)
    else:
        assert rounds_settings(config) == expected


def test_a_round_is_verls_own_refill_and_returns_the_dispatched_uids_in_order(monkeypatch):
    """A round is dispatched with the `refill_fn` verl hands its replay buffer (verl's own prompt refill: dataloader
    batches, new uids, pending entries in TransferQueue, the agent-loop manager) and returns the uids in order."""
    cfg = compose(["algorithm.reward_channels=[format,correctness]", "run.dynamic_sampling.mode=rounds",
                   "run.dynamic_sampling.round_prompts=2", "run.dynamic_sampling.max_rounds=2",
                   "data.train_batch_size=4"])
    trainer = DaraTrainer(cfg)
    assert trainer.replay_buffer.refill_fn.__self__ is trainer  # verl's own refill of this trainer
    batches = [{"raw_prompt": np.array([f"prompt {i}", f"prompt {i + 1}"], dtype=object),
                "input_ids": torch.full((2, 3), i)} for i in range(0, 8, 2)]
    trainer.train_dataloader, trainer.train_dataloader_it, trainer.global_steps = batches, None, 1
    entries, dispatched = [], []
    monkeypatch.setattr(tq, "kv_batch_put", lambda keys, partition_id, tags, **_: entries.append((keys, tags)))
    manager = trainer.agent_loop_manager = SimpleNamespace(generate_sequences=lambda batch: dispatched.append(
        ([str(u) for u in batch["uid"]], list(batch["raw_prompt"]))))
    uids = trainer._submit_round(4)
    assert trainer.agent_loop_manager is manager  # the recorder is gone after the round
    ((sent, prompts),) = dispatched
    assert uids == sent and len(set(uids)) == 4 and prompts == [f"prompt {i}" for i in range(4)]
    ((keys, tags),) = entries
    assert keys == uids and all(tag == {"is_prompt": True, "status": "pending", "global_steps": 1} for tag in tags)
