"""Whether each optimizer update was clipped (dara/verl/grad_clip.py), and the tool-calling settings that make
every update clipped as the authors' were (conf/task/toolrl.yaml). A real CPU run that expects every update
clipped with a clip no norm reaches (each step logs its unclipped update, the console warns):
tests/test_training.py."""

from __future__ import annotations

from pathlib import Path

import torch

from dara.console import step_warnings
from dara.verl.grad_clip import UpdateRecorder, grad_clip_metrics, updates_per_step

ROOT = Path(__file__).resolve().parent.parent


def test_clip_share_and_unclipped_count():
    assert grad_clip_metrics([0.3, 0.2, 0.9, 0.06], 0.05, 4, True) == {
        "actor/grad_clip_active": 1.0, "actor/grad_unclipped_updates": 0.0}
    # each rank's copy of the same 4 norms: the same share and count
    assert grad_clip_metrics([0.3, 0.04, 0.9, 0.03] * 4, 0.05, 4, True) == {
        "actor/grad_clip_active": 0.5, "actor/grad_unclipped_updates": 2.0}
    assert grad_clip_metrics([0.3, 0.04], 0.05, 2, False) == {"actor/grad_clip_active": 0.5}
    assert grad_clip_metrics([], 1.0, 4, True) == {}


def test_the_share_is_where_torch_clip_grad_norm_scales():
    """A norm above the threshold is scaled by torch's clip_grad_norm_ (what verl's FSDP engine calls); one at
    or below it is left as it is."""
    for norm, threshold in [(0.3, 0.05), (0.05, 0.05), (0.01, 0.05), (2.0, 1.0)]:
        grad = torch.tensor([norm, 0.0])
        param = torch.nn.Parameter(torch.zeros(2))
        param.grad = grad.clone()
        torch.nn.utils.clip_grad_norm_([param], max_norm=threshold)
        clipped = not torch.equal(param.grad, grad)
        assert grad_clip_metrics([norm], threshold, 1, False)["actor/grad_clip_active"] == float(clipped)


def test_updates_per_step_counts_mini_batches():
    assert updates_per_step(2048, 128, 4, 1) == 4  # tool calling: 512 x 4 responses, mini-batch 128 prompts
    assert updates_per_step(8192, 64, 16, 1) == 8  # math
    assert updates_per_step(32, 8, 4, 2) == 2


class WorkerGroup:
    world_size = 4

    def __init__(self, norms):
        self.norms = norms

    def update_actor(self, batch):
        return {"metrics": {"grad_norm": list(self.norms), "pg_loss": [0.1] * len(self.norms)}}


def test_update_recorder_keeps_the_per_update_norms_and_passes_the_rest_through():
    group = WorkerGroup([0.2, 0.07, 0.3])
    recorder = UpdateRecorder(group)
    output = recorder.update_actor("batch")
    assert output == {"metrics": {"grad_norm": [0.2, 0.07, 0.3], "pg_loss": [0.1] * 3}}
    assert recorder.grad_norms == [0.2, 0.07, 0.3] and recorder.world_size == 4 and recorder.wrapped is group


def test_console_warns_on_unclipped_updates():
    assert step_warnings({"step": 3, "actor/grad_unclipped_updates": 2.0}) == [
        "[dara] warning: step 3: 2 optimizer update(s) not clipped (run.expect_clipped_updates)"]
    assert step_warnings({"step": 3, "actor/grad_unclipped_updates": 0.0, "actor/grad_clip_active": 1.0}) == []
