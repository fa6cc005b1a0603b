"""The private verl, vLLM and Ray names the binding reaches, and every verl method it overrides, pinned to verl
0.9.1's parameter names (a registry: a key it holds); docs/training.md's seam table lists exactly these names."""

from __future__ import annotations

import inspect
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

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
    from omegaconf import OmegaConf
    from verl.single_controller.base.worker_group import WorkerGroup
    from verl.single_controller.ray.base import RayWorkerGroup
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

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
    from verl.plugin.platform import PlatformBase

    from dara.verl.cpu.platform import PlatformCPU

    own = {name for name, value in vars(PlatformCPU).items() if not name.startswith("__")
           and (callable(value) or isinstance(value, property))}
    assert own and own <= set(dir(PlatformBase)), sorted(own - set(dir(PlatformBase)))
    assert not getattr(PlatformCPU, "__abstractmethods__", None)
