"""Whether each optimizer update of a step was clipped, from verl's own per-update gradient norms (verl 0.9.1
logs only their mean): `UpdateRecorder` stands in for the actor worker group during `_update_actor` and keeps
each update's (metrics: docs/experiments.md)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

CLIP_ACTIVE = "actor/grad_clip_active"
UNCLIPPED = "actor/grad_unclipped_updates"
TORCH_CLIP_EPS = 1e-6


def _flat(values) -> list[float]:
    if isinstance(values, Iterable) and not isinstance(values, str | bytes):
        return [x for value in values for x in _flat(value)]
    return [float(values)]


class UpdateRecorder:
    def __init__(self, worker_group):
        self.wrapped = worker_group
        self.grad_norms: list[float] = []

    def __getattr__(self, name: str):
        return getattr(self.wrapped, name)

    def update_actor(self, *args, **kwargs):
        output = self.wrapped.update_actor(*args, **kwargs)
        metrics = output["metrics"]
        self.grad_norms = _flat(metrics.get("grad_norm", [])) if hasattr(metrics, "get") else []
        return output


def grad_clip_metrics(grad_norms: list[float], max_norm: float, updates: int, expect_clipped: bool) -> dict:
    """`grad_norms` may repeat each update's norm per rank: the share is the same, the count that share of `updates`."""
    if (norms := np.asarray(grad_norms, dtype=np.float64)).size == 0:
        return {}
    # torch's clip_grad_norm_ multiplies by min(1, max_norm / (norm + 1e-6)): it scales when norm + 1e-6 > max_norm
    share = float((norms + TORCH_CLIP_EPS > max_norm).mean())
    metrics = {CLIP_ACTIVE: share}
    if expect_clipped:
        metrics[UNCLIPPED] = float(round((1.0 - share) * updates))
    return metrics


def updates_per_step(rows: int, mini_batch_prompts: int, group_size: int, epochs: int) -> int:
    """Optimizer updates verl makes on `rows` responses (mini-batches of prompts x G, per epoch)."""
    return int(epochs) * math.ceil(rows / (int(mini_batch_prompts) * int(group_size)))
