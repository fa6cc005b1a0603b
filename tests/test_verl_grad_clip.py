"""Whether each optimizer update was clipped (dara/verl/grad_clip.py); a real CPU run that expects every update
clipped with a clip no norm reaches: tests/test_training.py."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from dara.console import step_warnings
from dara.verl.grad_clip import UpdateRecorder, grad_clip_metrics, updates_per_step


def test_clip_share_is_where_torch_clip_grad_norm_scales_counting_unclipped_updates_of_the_step():
    assert grad_clip_metrics([0.3, 0.2, 0.9, 0.06], 0.05, 4, True) == {
        "actor/grad_clip_active": 1.0, "actor/grad_unclipped_updates": 0.0}
    # each rank's copy of the same 4 norms: the same share and count
    assert grad_clip_metrics([0.3, 0.04, 0.9, 0.03] * 4, 0.05, 4, True) == {
        "actor/grad_clip_active": 0.5, "actor/grad_unclipped_updates": 2.0}
    assert grad_clip_metrics([0.3, 0.04], 0.05, 2, False) == {"actor/grad_clip_active": 0.5}
    assert grad_clip_metrics([], 1.0, 4, True) == {}
    assert updates_per_step(2048, 128, 4, 1) == 4  # tool calling: 512 x 4 responses, mini-batch 128 prompts
    assert updates_per_step(8192, 64, 16, 1) == 8 and updates_per_step(32, 8, 4, 2) == 2  # math; 2 epochs
    for norm, threshold in [(0.3, 0.05), (0.05, 0.05), (0.01, 0.05), (2.0, 1.0)]:  # what verl's FSDP engine calls
        param = torch.nn.Parameter(torch.zeros(2))
        param.grad = torch.tensor([norm, 0.0])
        torch.nn.utils.clip_grad_norm_([param], max_norm=threshold)
        clipped = not torch.equal(param.grad, torch.tensor([norm, 0.0]))
        assert grad_clip_metrics([norm], threshold, 1, False)["actor/grad_clip_active"] == float(clipped)


def test_update_recorder_keeps_the_per_update_norms_and_the_console_warns_on_unclipped_updates():
    group = SimpleNamespace(world_size=4, update_actor=lambda batch: {
        "metrics": {"grad_norm": [0.2, 0.07, 0.3], "pg_loss": [0.1] * 3}})
    recorder = UpdateRecorder(group)
    assert recorder.update_actor("batch") == {"metrics": {"grad_norm": [0.2, 0.07, 0.3], "pg_loss": [0.1] * 3}}
    assert recorder.grad_norms == [0.2, 0.07, 0.3] and recorder.world_size == 4 and recorder.wrapped is group
    assert step_warnings({"step": 3, "actor/grad_unclipped_updates": 2.0}) == [
        "[dara] warning: step 3: 2 optimizer update(s) not clipped (run.expect_clipped_updates)"]
    assert step_warnings({"step": 3, "actor/grad_unclipped_updates": 0.0, "actor/grad_clip_active": 1.0}) == []
