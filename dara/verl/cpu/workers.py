"""Trainer-rank workers for the CPU path: verl joins the process group with `"cpu:gloo,cpu:gloo"`, which torch
refuses ("Duplicate device type cpu"), and skips that when a group exists: these join one over plain gloo first."""

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
        backend="gloo", rank=int(os.environ.get("RANK", 0)), world_size=int(os.environ.get("WORLD_SIZE", 1)),
        timeout=timedelta(seconds=timeout_s) if timeout_s is not None else None,
        init_method=os.environ.get("DIST_INIT_METHOD", None))
    return True


class CPUTrainingWorker(TrainingWorker):
    def __init__(self, *args, **kwargs):
        join_gloo_process_group()
        super().__init__(*args, **kwargs)


class CPUActorRolloutRefWorker(ActorRolloutRefWorker):
    actor_worker_cls = ref_worker_cls = CPUTrainingWorker

    def __init__(self, *args, **kwargs):
        join_gloo_process_group()
        super().__init__(*args, **kwargs)


_CPU_WORKERS = {ActorRolloutRefWorker: CPUActorRolloutRefWorker, TrainingWorker: CPUTrainingWorker}


def cpu_worker_class(worker) -> type | None:
    """The CPU class for verl's worker class `worker` (`ray.remote` or plain), or None."""
    base = worker.__ray_actor_class__ if isinstance(worker, ray.actor.ActorClass) else worker
    return _CPU_WORKERS.get(base) if isinstance(base, type) else None
