"""The verl binding: the plugin's registrations, every estimator through verl's own advantage path, the trainer.

The private verl and vLLM names the binding relies on are pinned in tests/test_verl_seams.py.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from tensordict import TensorDict
from verl.protocol import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.ray_trainer import compute_advantage

from dara.estimators import ESTIMATOR_NAMES, compute_advantages
from dara.verl.estimators import (
    CURRENT_CHANNELS,
    ChannelBatch,
    channels_for_step,
    estimator_options,
    verl_estimator_name,
)
from dara.verl.trainer import DaraTrainer, channel_scores_from_extra_fields

CHANNELS = ["correctness", "format"]


def algorithm_config(**overrides):
    weights = overrides.pop("weights", None)
    base = {"adv_estimator": "dara_asym", "reward_channels": CHANNELS, "norm_adv_by_std_in_grpo": True,
            "dara": {"weights": weights, "w_max": 5.0, "reward_ranges": {"correctness": [-3.0, 3.0], "format": [0.0, 1.0]},
                     "tau": 0.8,
                     "gamma": 0.5, "form": "sym", "query_weight": "before_whiten"}}
    base.update(overrides)
    return OmegaConf.create(base)


def real_batch(seed=0, groups=6, group_size=4, prompt_len=5, response_len=7):
    """A DataProto shaped as verl builds it: prompts | responses, score on the last valid token."""
    gen = torch.Generator().manual_seed(seed)
    n = groups * group_size
    lengths = torch.randint(1, response_len + 1, (n,), generator=gen)
    response_mask = (torch.arange(response_len)[None, :] < lengths[:, None]).long()
    attention_mask = torch.cat([torch.ones(n, prompt_len, dtype=torch.long), response_mask], dim=1)
    correctness = torch.randint(-3, 4, (n,), generator=gen).double()
    fmt = (torch.rand(n, generator=gen) < 0.3).double()
    scores = torch.stack([correctness, fmt], dim=1)
    token_rewards = torch.zeros(n, response_len)
    token_rewards[torch.arange(n), lengths - 1] = scores.sum(1).float()
    uids = np.array([f"uid-{i // group_size}" for i in range(n)], dtype=object)
    data = DataProto(
        batch=TensorDict({"prompts": torch.zeros(n, prompt_len, dtype=torch.long),
                          "responses": torch.zeros(n, response_len, dtype=torch.long),
                          "attention_mask": attention_mask, "response_mask": response_mask,
                          "token_level_rewards": token_rewards}, batch_size=n),
        non_tensor_batch={"uid": uids, "correctness": correctness.numpy().astype(np.float32),
                          "format": fmt.numpy().astype(np.float32)},
    )
    return data, scores


@pytest.mark.parametrize("name", ESTIMATOR_NAMES)
def test_every_estimator_through_verl_compute_advantage(name):
    data, scores = real_batch()
    algorithm = algorithm_config(adv_estimator=name, weights=[1.0, 5.0] if name == "static" else None)
    with channels_for_step(ChannelBatch(scores, CHANNELS)) as channels:
        out = compute_advantage(data, adv_estimator=verl_estimator_name(name), config=algorithm)
    mask = data.batch["response_mask"]
    if name == "grpo":  # verl's meaning: the summed token-level reward
        expected, _ = compute_advantages("grpo", data.batch["token_level_rewards"].sum(-1), data.non_tensor_batch["uid"],
                                         mask)
    else:
        expected, _ = compute_advantages(name, scores, data.non_tensor_batch["uid"], mask,
                                         **estimator_options(algorithm, CHANNELS))
    torch.testing.assert_close(out.batch["advantages"], expected)
    torch.testing.assert_close(out.batch["returns"], expected)
    assert f"density/{CHANNELS[1]}" in channels.metrics and f"energy/{CHANNELS[0]}" in channels.metrics
    assert CURRENT_CHANNELS.get() is None  # published for the step only


def test_grpo_matches_verl_own_grpo():
    data, scores = real_batch(seed=1)
    with channels_for_step(ChannelBatch(scores, CHANNELS)):
        ours = compute_advantage(data, adv_estimator="dara_grpo", config=algorithm_config()).batch["advantages"].clone()
    theirs = compute_advantage(data, adv_estimator="grpo", config=algorithm_config()).batch["advantages"]
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


def test_gdpo_matches_verl_builtin_gdpo():
    data, scores = real_batch(seed=2)
    with channels_for_step(ChannelBatch(scores, CHANNELS)):
        ours = compute_advantage(data, adv_estimator="dara_gdpo", config=algorithm_config()).batch["advantages"].clone()
    verl_cfg = OmegaConf.create({"gdpo_reward_keys": CHANNELS, "norm_adv_by_std_in_grpo": True})
    theirs = compute_advantage(data, adv_estimator="gdpo", config=verl_cfg).batch["advantages"]
    torch.testing.assert_close(ours, theirs * data.batch["response_mask"], rtol=1e-4, atol=1e-4)


def test_registered_estimator_refuses_a_call_without_channels():
    data, _ = real_batch()
    with pytest.raises(ValueError, match="needs per-channel rewards"):
        compute_advantage(data, adv_estimator="dara_asym", config=algorithm_config())


def test_plugin_registers_with_verl_on_import():
    """`import verl` loaded the package's entry point (dara.verl.plugin): verl's own lookups find everything."""
    from hydra.core.config_store import ConfigStore
    from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls
    from verl.plugin.platform import PlatformRegistry
    from verl.trainer.ppo.v1 import get_trainer_cls

    from dara.verl.cpu.platform import PlatformCPU
    from dara.verl.reward_manager import DaraParallelRewardManager

    assert get_trainer_cls("dara_sync") is DaraTrainer
    assert PlatformRegistry.get("cpu") is PlatformCPU
    assert get_reward_manager_cls("dara_parallel") is DaraParallelRewardManager
    assert {"dara_run_schema.yaml", "dara_algo_schema.yaml"} <= set(ConfigStore.instance().list("/"))


def test_plugin_imports_nothing_of_verl_until_verl_asks():
    """At `import verl` the plugin only registers hooks; the trainer arrives with verl's trainer registry."""
    probe = ("import sys, verl; before = sorted(m for m in sys.modules if m.startswith('dara.verl.'));"
             "import verl.trainer.ppo.v1; print(before, 'dara.verl.trainer' in sys.modules)")
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", probe], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "VERL_PLATFORM": "cpu"})
    assert done.returncode == 0, done.stderr[-2000:]
    before, after = done.stdout.strip().rsplit(" ", 1)
    assert before == "['dara.verl.cpu', 'dara.verl.cpu.platform', 'dara.verl.cpu.ray_local', 'dara.verl.plugin']"
    assert after == "True"


def test_trainer_is_verls_sync_trainer_without_rewriting_its_mode():
    from verl.trainer.ppo.v1 import PPOTrainerSync
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    from dara.config import compose
    from dara.verl.prefilter import PrefilterRecorder

    cfg = compose(["algorithm.reward_channels=[format,correctness]"])
    trainer = DaraTrainer(cfg)
    assert isinstance(trainer, PPOTrainerSync) and trainer.trainer_mode == "sync"
    assert cfg.trainer.v1.trainer_mode == "dara_sync"  # the config keeps the name that selected the class
    buffer = trainer.replay_buffer  # verl chose its synchronous buffer by the mode's name
    assert type(buffer).__mro__[1:3] == (PrefilterRecorder, ReplayBuffer) and buffer.trainer_mode == "sync"


def test_cpu_worker_classes_replace_verls_only_on_cpu():
    """verl's own _init_resource_pool_mgr picks the workers; the trainer swaps in the gloo ones when device=cpu."""
    from omegaconf import open_dict
    from verl.workers.engine_workers import ActorRolloutRefWorker

    from dara.config import compose
    from dara.verl.cpu.workers import CPUActorRolloutRefWorker

    cfg = compose([])
    for device, expected in (("cpu", CPUActorRolloutRefWorker), ("cuda", ActorRolloutRefWorker)):
        with open_dict(cfg):
            cfg.trainer.device = device
        trainer = object.__new__(DaraTrainer)  # only the config is read by this step
        trainer.config = cfg
        trainer._init_resource_pool_mgr()
        classes = [worker.__ray_actor_class__ for worker in trainer.role_worker_mapping.values()]
        assert classes and all(cls is expected for cls in classes), (device, classes)


def test_seam_registry_names():
    registry = core_algos.ADV_ESTIMATOR_REGISTRY
    for name in ESTIMATOR_NAMES:
        assert registry[verl_estimator_name(name)].__module__ == "dara.verl.estimators"
    assert verl_estimator_name("grpo") == "dara_grpo" and verl_estimator_name("dara_asym") == "dara_asym"
    # verl keeps its own gdpo under the bare name
    assert registry["gdpo"].__module__ == "verl.trainer.ppo.core_algos"


def test_seam_compute_advantage_passes_config_and_index():
    seen = {}

    @core_algos.register_adv_est("dara_test_probe")
    def probe(**kwargs):
        seen.update(kwargs)
        return kwargs["response_mask"].float(), kwargs["response_mask"].float()

    data, _ = real_batch()
    marker = object()
    compute_advantage(data, adv_estimator="dara_test_probe", config=marker)
    assert seen["config"] is marker
    assert list(seen["index"]) == list(data.non_tensor_batch["uid"])
    assert set(seen) == {"token_level_rewards", "response_mask", "config", "index"}


def test_seam_reward_extra_info_lives_in_extra_fields(monkeypatch):
    """verl's agent loop (AgentLoopWorkerTQ, run on two outputs of one session) stores what the reward worker
    returned under each trajectory's extra_fields["reward_extra_info"] in TransferQueue: where the project's
    advantage step reads the channels."""
    import asyncio

    import transfer_queue as tq
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    put = []

    async def kv_batch_put(**kwargs):  # TransferQueue, a service verl talks to over Ray: the one call it makes
        put.append(kwargs)

    monkeypatch.setattr(tq, "async_kv_batch_put", kv_batch_put)
    scored = []

    class RewardWorkerHandle:  # what a Ray reward worker (verl's RewardLoopWorker) answers, for one session
        class compute_score:  # noqa: N801
            @staticmethod
            async def remote(data):
                scored.append(len(data))
                return {"reward_score": 4.0, "reward_extra_info": {"correctness": 3.0, "format": 1.0, "score": 4.0}}

    worker = object.__new__(AgentLoopWorkerTQ.__ray_actor_class__)  # the attributes the postprocess reads
    worker.reward_loop_worker_handles, worker.processor = [RewardWorkerHandle()], None
    worker.mm_processor_kwargs, worker.distillation_enabled = None, False
    outputs = [AgentLoopOutput(prompt_ids=[1, 2, 3], response_ids=[4, 5], response_mask=[1, 1],
                               metrics=AgentLoopMetrics()),
               AgentLoopOutput(prompt_ids=[1, 2, 3, 4, 5, 6], response_ids=[7], response_mask=[1],
                               metrics=AgentLoopMetrics())]
    asyncio.run(worker._agent_loop_postprocess(outputs, validate=False, uid="u7", session_id=2, global_steps=3))

    assert scored == [2]  # one reward call for the session's outputs
    (call,) = put
    assert call["keys"] == ["u7_2_0", "u7_2_1"] and call["partition_id"] == "train"
    extra_fields = list(call["fields"]["extra_fields"])
    assert [e["reward_extra_info"] for e in extra_fields] == [{"correctness": 3.0, "format": 1.0, "score": 4.0}] * 2
    assert channel_scores_from_extra_fields(extra_fields, CHANNELS).tolist() == [[3.0, 1.0], [3.0, 1.0]]
    assert [row.tolist() for row in call["fields"]["rm_scores"].unbind()] == [[0.0, 4.0], [4.0]]


def test_channel_scores_from_extra_fields():
    fields = [{"reward_extra_info": {"correctness": 3.0, "format": 1.0, "score": 4.0}},
              {"reward_extra_info": {"correctness": -3.0, "format": 0.0, "score": -3.0}}]
    scores = channel_scores_from_extra_fields(fields, CHANNELS)
    assert scores.tolist() == [[3.0, 1.0], [-3.0, 0.0]]
    with pytest.raises(ValueError, match=r"'length'.*returned keys \['correctness', 'format', 'score'\]"):
        channel_scores_from_extra_fields(fields, ["correctness", "length"])
    fields[1]["reward_extra_info"]["format"] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        channel_scores_from_extra_fields(fields, CHANNELS)


def test_group_filter_counts_and_checkpoint_marker_hold_back(tmp_path):
    from transfer_queue import KVBatchMeta
    from verl.trainer.ppo.v1 import PPOTrainerSync

    from dara.verl.trainer import CHECKPOINT_TRACKER, group_filter_counts

    batch = KVBatchMeta(keys=["a_0_0", "a_1_0", "b_0_0", "pad9_0_0"],
                        tags=[{}, {}, {}, {"is_padding": True}])
    counts = group_filter_counts(batch, {"training/filter_groups/evicted_samples": 3,
                                         "training/filter_groups/discarded_surplus_samples": 1})
    assert counts == {"filter/kept_groups": 2.0, "filter/drawn_groups": 6.0}

    class VerlLikeSave(PPOTrainerSync):  # what verl's _save_checkpoint does to the marker, in isolation
        def _save_checkpoint(self):
            (tmp_path / CHECKPOINT_TRACKER).write_text(str(self.global_steps))

        def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
            pass

    class Trainer(DaraTrainer, VerlLikeSave):  # DaraTrainer's super() is VerlLikeSave, then verl's
        def __init__(self):
            self.config = OmegaConf.create({"trainer": {"default_local_dir": str(tmp_path)},
                                            "algorithm": {"reward_channels": CHANNELS,
                                                          "filter_groups": {"enable": False}}})
            self.run_log = RunLog(tmp_path / "metrics.jsonl")

    from dara.run_log import RunLog, read_metrics

    trainer = Trainer()
    for step in (1, 2):
        trainer.global_steps = step
        trainer._save_checkpoint()
        marker = tmp_path / CHECKPOINT_TRACKER
        # until the step's metrics are logged, a resume starts from the previous checkpoint
        assert (marker.read_text() if marker.exists() else None) == (None if step == 1 else "1")
        trainer._compute_metrics(batch, {}, {}, step, 0)
        assert marker.read_text() == str(step)
    # with verl's group filter on (run.dynamic_sampling.mode=replay), each logged step says what it drew and kept
    trainer.config.algorithm.filter_groups.enable = True
    trainer._compute_metrics(batch, {"training/filter_groups/evicted_samples": 3}, {}, 3, 0)
    logged = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in logged] == [1, 2, 3] and "filter/kept_groups" not in logged[0]
    assert (logged[2]["filter/kept_groups"], logged[2]["filter/drawn_groups"]) == (2.0, 5.0)


def test_reward_flag_counts():
    from dara.verl.trainer import reward_flag_counts

    fields = [{"reward_extra_info": {"format": 1.0, "reward_timeout": 1, "reward_error": 0}},
              {"reward_extra_info": {"format": 0.0, "reward_timeout": 0, "reward_error": 1}},
              {"reward_extra_info": {"format": 0.0, "reward_timeout": 1, "reward_error": 0}}]
    assert reward_flag_counts(fields) == {"reward/timeouts": 2.0, "reward/errors": 1.0}
    assert reward_flag_counts([{"reward_extra_info": {"format": 1.0}}]) == {}


