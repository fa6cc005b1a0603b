"""Trainer-rank workers for the CPU path.

verl's ``TrainingWorker.__init__`` joins the process group with the backend string
``f"cpu:gloo,{device}:{backend}"``; with the device ``cpu`` that string names the device twice and torch
refuses it ("Duplicate device type cpu"). verl skips its own call when a process group already exists, so these
subclasses join one over plain ``gloo`` first (same rank, world size and rendezvous variables that verl's
``Worker`` sets up), then run verl's constructor unchanged.

The v1 trainer picks its worker classes in ``PPOTrainer._init_resource_pool_mgr``; the project's trainer
swaps verl's classes for these there when ``trainer.device == "cpu"`` (:func:`cpu_worker_class`).
"""

from __future__ import annotations

import os
from datetime import timedelta

import ray
import torch.distributed
from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker


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


def cpu_worker_class(worker) -> type | None:
    """The CPU class standing in for verl's worker class `worker` (a ``ray.remote`` class or a plain one), or
    None where verl's own class runs unchanged."""
    base = worker.__ray_actor_class__ if isinstance(worker, ray.actor.ActorClass) else worker
    return _CPU_WORKERS.get(base) if isinstance(base, type) else None
