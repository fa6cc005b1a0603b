"""Trainer-rank workers for the CPU path, and the trainer mixin that selects them.

verl's ``TrainingWorker.__init__`` joins the process group with the backend string
``f"cpu:gloo,{device}:{backend}"``; with the device ``cpu`` that string names the device twice and torch
refuses it ("Duplicate device type cpu"). verl skips its own call when a process group already exists, so these
subclasses join one over plain ``gloo`` first (same rank, world size and rendezvous variables that verl's
``Worker`` sets up), then run verl's constructor unchanged.

The v1 trainer picks its worker classes in ``PPOTrainer._init_resource_pool_mgr``; :class:`CPUWorkersMixin`
swaps verl's classes for these when ``trainer.device == "cpu"`` and changes nothing otherwise, so a project
trainer can always inherit it. ``cpu_sync`` (``trainer.v1.trainer_mode=cpu_sync``) is verl's stock synchronous
trainer with the mixin.
"""

from __future__ import annotations

import os
from datetime import timedelta

import ray
import torch.distributed
from verl.trainer.ppo.v1 import PPOTrainerSync, register_trainer
from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker

CPU_SYNC_TRAINER = "cpu_sync"


def join_gloo_process_group(timeout_s: float | None = None) -> bool:
    """Join the default process group over gloo if none exists; returns whether this call created it."""
    if torch.distributed.is_initialized():
        return False
    torch.distributed.init_process_group(
        backend="gloo",
        rank=int(os.environ.get("RANK", 0)),
        world_size=int(os.environ.get("WORLD_SIZE", 1)),
        timeout=timedelta(seconds=timeout_s) if timeout_s is not None else None,
        init_method=os.environ.get("DIST_INIT_METHOD", None),
    )
    return True


class CPUTrainingWorker(TrainingWorker):
    """verl's TrainingWorker (actor, ref, critic engines) with a gloo process group."""

    def __init__(self, *args, **kwargs):
        join_gloo_process_group()
        super().__init__(*args, **kwargs)


class CPUActorRolloutRefWorker(ActorRolloutRefWorker):
    """verl's fused actor/rollout/ref worker whose inner engines are :class:`CPUTrainingWorker`."""

    actor_worker_cls = CPUTrainingWorker
    ref_worker_cls = CPUTrainingWorker

    def __init__(self, *args, **kwargs):
        join_gloo_process_group()
        super().__init__(*args, **kwargs)


_CPU_WORKERS = {ActorRolloutRefWorker: CPUActorRolloutRefWorker, TrainingWorker: CPUTrainingWorker}


def _remote_base(worker) -> type | None:
    """The plain class behind a ``ray.remote`` actor class (or the class itself)."""
    if isinstance(worker, ray.actor.ActorClass):
        return worker.__ray_actor_class__
    return worker if isinstance(worker, type) else None


class CPUWorkersMixin:
    """Put before verl's trainer class: ``class MyTrainer(CPUWorkersMixin, PPOTrainerSync)``."""

    def _init_resource_pool_mgr(self):
        super()._init_resource_pool_mgr()
        if self.config.trainer.device != "cpu":
            return
        for role, worker in list(self.role_worker_mapping.items()):
            replacement = _CPU_WORKERS.get(_remote_base(worker))
            if replacement is not None:
                self.role_worker_mapping[role] = ray.remote(replacement)


@register_trainer(CPU_SYNC_TRAINER)
class CPUPPOTrainerSync(CPUWorkersMixin, PPOTrainerSync):
    """verl's synchronous v1 trainer, runnable with ``trainer.device=cpu``."""


def _task_runner_class():
    from verl.trainer.main_ppo import TaskRunnerV1

    base = TaskRunnerV1.__ray_actor_class__

    class CPUTaskRunner(base):
        """verl's TaskRunnerV1 that registers ``cpu_sync`` in its own process before verl looks the trainer up."""

        def run(self, config):
            import dara.verl.cpu.workers  # noqa: F401  (Ray ships this class by value: import the registration)

            return super().run(config)

    CPUTaskRunner.__module__ = __name__
    CPUTaskRunner.__qualname__ = "CPUTaskRunner"
    return ray.remote(CPUTaskRunner)


CPUTaskRunner = _task_runner_class()
