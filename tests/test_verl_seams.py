"""The verl binding: the private verl, vLLM and Ray names it reaches and every verl method it overrides, pinned to
verl 0.9.1's parameter names (a registry: a key it holds), as docs/training.md's seam table lists exactly; the
plugin's registrations, verl's advantage call, the trainer's step helpers (the whole advantage step:
tests/test_verl_advantage_seam.py)."""

from __future__ import annotations

import asyncio
import inspect
import os
import pkgutil
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import transfer_queue as tq
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls
from verl.plugin.platform import PlatformBase
from verl.protocol import DataProto
from verl.single_controller.base.worker_group import WorkerGroup
from verl.single_controller.ray.base import RayWorkerGroup
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.trainer.ppo.v1 import PPOTrainerSync, get_trainer_cls
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
from verl.workers.engine_workers import ActorRolloutRefWorker

from dara.config import compose
from dara.estimators import ESTIMATOR_NAMES
from dara.run_folder import CHECKPOINT_TRACKER
from dara.run_log import RunLog, read_metrics
from dara.verl.cpu.platform import PlatformCPU
from dara.verl.cpu.workers import CPUActorRolloutRefWorker
from dara.verl.estimators import ChannelBatch, channels_for_step, verl_estimator_name
from dara.verl.reward_manager import DaraParallelRewardManager
from dara.verl.trainer import DaraTrainer, channel_scores_from_extra_fields, reward_flag_counts

DOC = Path(__file__).resolve().parents[1] / "docs" / "training.md"
SECTION = "## How the binding extends verl"
TRAINER = "verl.trainer.ppo.v1.trainer_base:PPOTrainer"
BUFFER = "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer"
VLLM_EXTENSION = "verl.workers.rollout.vllm_rollout.utils:vLLMColocateWorkerExtension"


@dataclass
class Seam:
    target: str  # "module:qualified.name"
    parameters: str = ""  # a callable's parameter names, in order
    registry_key: object = None  # a registry (dict): a key verl 0.9.1 holds
    name: str = ""  # as the table's first column writes it; default: the qualified name

    def __post_init__(self):
        self.name = self.name or self.target.split(":")[1]


SEAMS = [
    # the trainer (dara.verl.trainer.DaraTrainer on verl's PPOTrainerSync)
    Seam(f"{TRAINER}.__init__", "self config"), Seam(f"{TRAINER}.init", "self"),
    Seam(f"{TRAINER}.fit", "self agent_loop_manager"), Seam(f"{TRAINER}.prepare_step", "self"),
    Seam("verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync.on_step_end", "self"),
    Seam(f"{TRAINER}._init_resource_pool_mgr", "self"), Seam(f"{TRAINER}._compute_advantage", "self batch metrics"),
    Seam(f"{TRAINER}._update_actor", "self batch metrics"),
    Seam(f"{TRAINER}._compute_metrics", "self batch metrics timing_raw global_steps epoch"),
    Seam(f"{TRAINER}._save_checkpoint", "self"),
    # the replay buffer (dara.verl.rounds, dara.verl.prefilter)
    Seam(f"{BUFFER}.__init__", "self trainer_mode trainer_config max_off_policy_threshold max_off_policy_strategy "
         "sampler_kwargs poll_interval refill_fn filter_groups_metric train_batch_size gen_batch_size "
         "max_inflight_gen_batches sync_refill_failed_groups"),
    Seam(f"{BUFFER}.sample", "self global_steps partition_id batch_size"),
    Seam(f"{BUFFER}._clear_groups", "self partition_id uids"),
    # checkpoints, the seeded rollout, the CPU runtime
    Seam("verl.trainer.ppo.checkpoint_callback:CheckpointCallback.on_save",
         "self trainer global_step checkpoint_dir async_save kwargs"),
    Seam("verl.experimental.agent_loop.single_turn_agent_loop:SingleTurnAgentLoop.run",
         "self sampling_params priority kwargs"),
    Seam("verl.workers.engine_workers:TrainingWorker.__init__", "self config"),
    Seam("verl.workers.engine_workers:ActorRolloutRefWorker.__init__", "self config role distillation_config kwargs"),
    Seam("ray.actor:ActorClass", name="ActorClass.__ray_actor_class__"),  # checked in test_seam_signature
    Seam(f"{VLLM_EXTENSION}.update_weights_from_ipc", "self peft_config base_sync_done use_shm"),
    Seam(f"{VLLM_EXTENSION}._update_weights", "self weights peft_config base_sync_done"),
    Seam(f"{VLLM_EXTENSION}._get_zmq_handle", "self"),
    # the pre-flight's list of rollouts (dara.preflight.rollout)
    Seam("verl.workers.rollout.base:_ROLLOUT_REGISTRY", registry_key=("vllm", "async"),
         name="rollout.base._ROLLOUT_REGISTRY"),
    Seam("verl.workers.rollout.replica:RolloutReplicaRegistry._registry", registry_key="vllm"),
]


def where(seam: Seam) -> str:
    return (f"verl seam {seam.name} ({seam.target}) is not what the binding was written against; see its row in "
            f"docs/training.md '{SECTION[3:]}' for what relies on it")


@pytest.mark.parametrize("seam", SEAMS, ids=lambda seam: seam.name)
def test_seam_signature(seam):
    if seam.target == "ray.actor:ActorClass":  # cpu_worker_class reads the class under verl's ray.remote(...)
        import ray

        class Probe:
            pass

        assert ray.remote(Probe).__ray_actor_class__ is Probe, where(seam)
        return
    try:
        value = pkgutil.resolve_name(seam.target)
    except (ImportError, AttributeError) as error:
        pytest.fail(f"{where(seam)}: {type(error).__name__}: {error}")
    if seam.registry_key is not None:
        assert isinstance(value, dict) and seam.registry_key in value, f"{where(seam)}: {value!r:.300}"
        return
    # Ray's tracing adds `_ray_trace_ctx` to a class's methods once the class went through ray.remote (in place)
    found = " ".join(name for name in inspect.signature(value).parameters if name != "_ray_trace_ctx")
    assert found == seam.parameters, f"{where(seam)}: parameters {found!r}, expected {seam.parameters!r}"


def seam_table() -> list[list[str]]:
    text = DOC.read_text()
    section = text[text.index(SECTION):].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]  # after header, rule


def test_the_seam_table_lists_exactly_the_pinned_names():
    pinned, private_elsewhere = set(), set()
    for cells in seam_table():
        names = set(re.findall(r"`([A-Za-z_][\w.]*)`", cells[0]))
        if "test_seam_signature" in cells[-1]:
            pinned |= names
        else:
            private_elsewhere |= {name for name in names if "._" in name}
    expected = {seam.name for seam in SEAMS}
    assert pinned == expected, (sorted(pinned - expected), sorted(expected - pinned))
    assert not private_elsewhere, f"private names in {DOC.name}'s seam table that no test pins: {private_elsewhere}"


def test_public_attributes_the_binding_reads():
    """Not signatures: attributes verl sets that the binding reads (placement, rounds)."""
    group = object.__new__(RayWorkerGroup)
    WorkerGroup.__init__(group, resource_pool=None)
    assert group.workers == []  # dara.verl.placement: the list verl appends each rank's actor handle to

    def refill(n):
        return n

    buffer = ReplayBuffer(trainer_mode="sync", trainer_config=OmegaConf.create({}), max_off_policy_threshold=None,
                          max_off_policy_strategy="drop", sampler_kwargs=OmegaConf.create({}), refill_fn=refill)
    assert buffer.refill_fn is refill and buffer.poll_interval > 0  # dara.verl.rounds takes both over


def test_cpu_platform_overrides_only_verls_methods():
    """Every method the CPU platform defines is one of verl's PlatformBase (a renamed one would be dead code)."""
    own = {name for name, value in vars(PlatformCPU).items() if not name.startswith("__")
           and (callable(value) or isinstance(value, property))}
    assert own and own <= set(dir(PlatformBase)), sorted(own - set(dir(PlatformBase)))
    assert not getattr(PlatformCPU, "__abstractmethods__", None)


CHANNELS = ["correctness", "format"]


def test_gdpo_matches_verl_builtin_gdpo():
    """On a DataProto as verl builds it; a registered estimator called without the step's channels refuses."""
    gen, n, response_len = torch.Generator().manual_seed(2), 24, 7
    lengths = torch.randint(1, response_len + 1, (n,), generator=gen)
    response_mask = (torch.arange(response_len)[None, :] < lengths[:, None]).long()
    scores = torch.stack([torch.randint(-3, 4, (n,), generator=gen).double(),
                          (torch.rand(n, generator=gen) < 0.3).double()], dim=1)
    prompts, responses = torch.zeros(n, 5, dtype=torch.long), torch.zeros(n, response_len, dtype=torch.long)
    data = DataProto(batch=TensorDict({"prompts": prompts, "responses": responses, "response_mask": response_mask,
                                       "attention_mask": torch.cat([prompts + 1, response_mask], 1),
                                       "token_level_rewards": torch.zeros(n, response_len)}, batch_size=n),
                     non_tensor_batch={"uid": np.array([f"uid-{i // 4}" for i in range(n)], dtype=object),
                                       **{c: scores[:, k].numpy().astype(np.float32) for k, c in enumerate(CHANNELS)}})
    with channels_for_step(ChannelBatch(scores, CHANNELS)):
        ours = compute_advantage(data, adv_estimator="dara_gdpo", config=OmegaConf.create(
            {"norm_adv_by_std_in_grpo": True, "dara": {}})).batch["advantages"].clone()
    verl_cfg = OmegaConf.create({"gdpo_reward_keys": CHANNELS, "norm_adv_by_std_in_grpo": True})
    theirs = compute_advantage(data, adv_estimator="gdpo", config=verl_cfg).batch["advantages"]
    torch.testing.assert_close(ours, theirs * data.batch["response_mask"], rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="needs per-channel rewards"):
        compute_advantage(data, adv_estimator="dara_asym", config=OmegaConf.create({"dara": {}}))


def test_plugin_registers_with_verl_on_import():
    """`import verl` loaded the package's entry point (dara.verl.plugin): verl's own lookups find everything."""
    assert get_trainer_cls("dara_sync") is DaraTrainer
    assert get_reward_manager_cls("dara_parallel") is DaraParallelRewardManager
    assert {"dara_run_schema.yaml", "dara_algo_schema.yaml"} <= set(ConfigStore.instance().list("/"))
    registry = core_algos.ADV_ESTIMATOR_REGISTRY
    assert all(registry[verl_estimator_name(name)].__module__ == "dara.verl.estimators" for name in ESTIMATOR_NAMES)
    assert verl_estimator_name("grpo") == "dara_grpo" and verl_estimator_name("dara_asym") == "dara_asym"
    assert registry["gdpo"].__module__ == "verl.trainer.ppo.core_algos"  # verl keeps its own under the bare name


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


def test_cpu_worker_classes_replace_verls_only_on_cpu():
    """verl's own _init_resource_pool_mgr picks the workers; the trainer swaps in the gloo ones when device=cpu."""
    for device, expected in (("cpu", CPUActorRolloutRefWorker), ("cuda", ActorRolloutRefWorker)):
        trainer = object.__new__(DaraTrainer)  # only the config is read by this step
        trainer.config = compose([f"trainer.device={device}"])
        trainer._init_resource_pool_mgr()
        classes = [worker.__ray_actor_class__ for worker in trainer.role_worker_mapping.values()]
        assert classes and all(cls is expected for cls in classes), (device, classes)


def test_seam_reward_extra_info_lives_in_extra_fields(monkeypatch):
    """verl's agent loop (two outputs of one session) stores what the reward worker returned in each trajectory's
    extra_fields["reward_extra_info"] in TransferQueue, where the advantage step reads the channels and flags."""
    put, scored, info = [], [], {"correctness": 3.0, "format": 1.0, "score": 4.0, "reward_timeout": 1}

    async def kv_batch_put(**kwargs):  # TransferQueue, a service verl talks to over Ray: the one call it makes
        put.append(kwargs)

    async def remote(data):  # what a Ray reward worker (verl's RewardLoopWorker) answers, for one session
        scored.append(len(data))
        return {"reward_score": 4.0, "reward_extra_info": info}

    monkeypatch.setattr(tq, "async_kv_batch_put", kv_batch_put)
    worker = object.__new__(AgentLoopWorkerTQ.__ray_actor_class__)  # the attributes the postprocess reads
    worker.reward_loop_worker_handles = [SimpleNamespace(compute_score=SimpleNamespace(remote=remote))]
    worker.processor = worker.mm_processor_kwargs = None
    worker.distillation_enabled = False
    outputs = [AgentLoopOutput(prompt_ids=[1] * p, response_ids=[4] * r, response_mask=[1] * r,
                               metrics=AgentLoopMetrics()) for p, r in ((3, 2), (6, 1))]
    asyncio.run(worker._agent_loop_postprocess(outputs, validate=False, uid="u7", session_id=2, global_steps=3))
    (call,) = put
    assert scored == [2] and call["keys"] == ["u7_2_0", "u7_2_1"] and call["partition_id"] == "train"
    extra_fields = list(call["fields"]["extra_fields"])
    assert [e["reward_extra_info"] for e in extra_fields] == [info] * 2
    assert channel_scores_from_extra_fields(extra_fields, CHANNELS).tolist() == [[3.0, 1.0], [3.0, 1.0]]
    assert [row.tolist() for row in call["fields"]["rm_scores"].unbind()] == [[0.0, 4.0], [4.0]]
    extra_fields[1] = {"reward_extra_info": {"correctness": -3.0, "format": 0.0, "reward_error": 1}}
    assert reward_flag_counts(extra_fields) == {"reward/timeouts": 1.0, "reward/errors": 1.0}
    assert reward_flag_counts([{"reward_extra_info": {"format": 1.0}}]) == {}
    with pytest.raises(ValueError, match=r"'length'.*returned keys \['correctness', 'format', 'reward_timeout', "):
        channel_scores_from_extra_fields(extra_fields, ["correctness", "length"])
    extra_fields[1]["reward_extra_info"]["format"] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        channel_scores_from_extra_fields(extra_fields, CHANNELS)


def test_group_filter_counts_and_checkpoint_marker_hold_back(tmp_path):
    from dara.verl.trainer import group_filter_counts

    batch = KVBatchMeta(keys=["a_0_0", "a_1_0", "b_0_0", "pad9_0_0"], tags=[{}, {}, {}, {"is_padding": True}])
    assert group_filter_counts(batch, {"training/filter_groups/evicted_samples": 3,
                                       "training/filter_groups/discarded_surplus_samples": 1}) == {
        "filter/kept_groups": 2.0, "filter/drawn_groups": 6.0}

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

    trainer = Trainer()
    marker = tmp_path / CHECKPOINT_TRACKER
    for step in (1, 2):  # until the step's metrics are logged, a resume starts from the previous checkpoint
        trainer.global_steps = step
        trainer._save_checkpoint()
        assert (marker.read_text() if marker.exists() else None) == (None if step == 1 else "1")
        trainer._compute_metrics(batch, {}, {}, step, 0)
        assert marker.read_text() == str(step)
    # with verl's group filter on (run.dynamic_sampling.mode=replay), each logged step says what it drew and kept
    trainer.config.algorithm.filter_groups.enable = True
    trainer._compute_metrics(batch, {"training/filter_groups/evicted_samples": 3}, {}, 3, 0)
    logged = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in logged] == [1, 2, 3] and "filter/kept_groups" not in logged[0]
    assert (logged[2]["filter/kept_groups"], logged[2]["filter/drawn_groups"]) == (2.0, 5.0)
