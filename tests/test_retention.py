"""Checkpoint retention across requeues (dara.verl.retention) on checkpoints of verl's own FSDP checkpoint manager
(FSDP2 over gloo, one rank, a tiny Qwen2); a requeued job is a new manager, its rotation list empty."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

from dara.config import compose
from dara.run_folder import CHECKPOINT_TRACKER
from dara.verl.retention import CheckpointLayout, apply_retention, incomplete_reason, read_marker
from data_prep.tiny_model import tiny_qwen2

pytestmark = pytest.mark.slow  # verl, transformers and a gloo process group in the test process (~10 s)


@pytest.fixture(scope="module")
def new_job():
    """A factory of verl checkpoint managers over one FSDP2 model: each call is a fresh job's manager."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    created = not dist.is_initialized()
    if created:
        dist.init_process_group("gloo", init_method=f"file://{tempfile.mktemp()}", rank=0, world_size=1)
    model = tiny_qwen2(64, shape={"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
                                  "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 32},
                       tie_word_embeddings=False)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    contents = OmegaConf.create({"save_contents": ["model", "optimizer", "extra", "hf_model"],
                                 "load_contents": ["model", "optimizer", "extra"]})
    yield lambda: FSDPCheckpointManager(model=model, optimizer=optimizer, lr_scheduler=None,
                                        processing_class=None, checkpoint_config=contents)
    if created:
        dist.destroy_process_group()


def composed(tmp_path, *overrides):
    """The run's config and its checkpoint folder."""
    cfg = compose([f"run.output_root={tmp_path}", "run.checkpoint.keep_last=2", "run.checkpoint.keep_hf_steps=[2]",
                    "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]", *overrides])
    return cfg, Path(cfg.trainer.default_local_dir)


def save(cfg, manager, *steps: int, callback=None) -> None:
    """What verl's v1 trainer's `_save_checkpoint` does: the actor's save, data.pt, the marker, the callback."""
    for step in steps:
        folder = Path(cfg.trainer.default_local_dir) / f"global_step_{step}"
        manager.save_checkpoint(str(folder / "actor"), global_step=step,
                                max_ckpt_to_keep=cfg.trainer.max_actor_ckpt_to_keep)
        torch.save({"step": step}, folder / "data.pt")
        (folder.parent / CHECKPOINT_TRACKER).write_text(str(step))
        if callback is not None:
            callback.on_save(trainer=None, global_step=step, checkpoint_dir=str(folder))


def on_disk(cfg) -> dict[int, str]:
    """{step: what the folder holds} for every global_step_N folder."""
    return dict(sorted((int(path.name.split("_")[-1]), "actor" if (path / "actor").is_dir() else "data.pt only")
                       for path in Path(cfg.trainer.default_local_dir).glob("global_step_*")))


def test_after_a_requeue_the_newest_two_complete_checkpoints_and_the_kept_hf_steps_remain(tmp_path, new_job):
    cfg, ckpt = composed(tmp_path)
    save(cfg, new_job(), 1, 2, 3)
    second = new_job()  # the requeued job: verl's rotation list is empty again
    save(cfg, second, 4, 5)
    assert on_disk(cfg) == {1: "data.pt only", 2: "actor", 3: "actor", 4: "actor", 5: "actor"}  # verl alone
    killed = ckpt / "global_step_6"
    second.save_checkpoint(str(killed / "actor"), global_step=6, max_ckpt_to_keep=2)  # killed before data.pt
    # before saving, verl made room by rotating this job's step 4: the previous job's 2 and 3 stay
    assert on_disk(cfg) == {1: "data.pt only", 2: "actor", 3: "actor", 4: "data.pt only", 5: "actor", 6: "actor"}
    assert incomplete_reason(killed, CheckpointLayout.from_config(cfg)).startswith("no complete data.pt")
    assert read_marker(ckpt) == 5

    lines = []
    plan = apply_retention(cfg, at_start=True, write=lambda line, **_: lines.append(line))  # the third job starts
    assert on_disk(cfg) == {3: "actor", 5: "actor"} and plan.keep == [3, 5]  # the newest two complete ones
    assert read_marker(ckpt) == 5
    kept = tmp_path / cfg.run.name / "hf_checkpoints" / "global_step_2"
    assert load_file(kept / "model.safetensors") and json.loads((kept / "config.json").read_text())["model_type"]
    assert len(lines) == 1 and "kept steps 3, 5" in lines[0] and "6 (past the resume marker" in lines[0]
    assert "4 (incomplete: no actor/" in lines[0] and "HF weights of steps 2 kept first" in lines[0]
    assert apply_retention(cfg, at_start=True, write=lambda *a, **k: lines.append(a)).delete == {}  # idempotent
    assert len(lines) == 1


def test_the_callback_rotates_the_previous_jobs_checkpoints_after_each_save(tmp_path, new_job):
    from dara.verl.checkpoints import KeepEvaluatedSteps

    cfg, ckpt = composed(tmp_path)
    callback = KeepEvaluatedSteps(config=cfg)
    save(cfg, new_job(), 1, 2, 3, callback=callback)
    assert on_disk(cfg) == {2: "actor", 3: "actor"}
    second = new_job()
    save(cfg, second, 4, callback=callback)
    assert on_disk(cfg) == {3: "actor", 4: "actor"}
    save(cfg, second, 5, callback=callback)
    assert on_disk(cfg) == {4: "actor", 5: "actor"}
    assert load_file(tmp_path / cfg.run.name / "hf_checkpoints" / "global_step_2" / "model.safetensors")


def test_a_marker_on_an_incomplete_checkpoint_moves_to_a_complete_one(tmp_path, new_job):
    """A shard or the HF safetensors cut short, or no HF weights, is incomplete (the actor named before a missing
    role); another resume mode changes nothing."""
    cfg, ckpt = composed(tmp_path, "run.checkpoint.keep_last=3")
    save(cfg, new_job(), 1, 2, 3)
    assert apply_retention(composed(tmp_path, "trainer.resume_mode=disable")[0], at_start=True) is None
    folder, layout = ckpt / "global_step_2", CheckpointLayout.from_config(cfg)
    assert on_disk(cfg) == {1: "actor", 2: "actor", 3: "actor"} and incomplete_reason(folder, layout) is None
    weights = folder / "actor" / "huggingface" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    assert incomplete_reason(folder, layout) == "actor/huggingface/model.safetensors missing or cut short"
    critic = CheckpointLayout({**layout.contents, "critic": ("model",)})
    assert incomplete_reason(folder, critic).startswith("actor/")
    weights.unlink()
    assert incomplete_reason(folder, layout) == "actor/huggingface/ holds no weights"
    shard = ckpt / "global_step_3" / "actor" / "model_world_size_1_rank_0.pt"
    shard.write_bytes(shard.read_bytes()[:100])  # cut short by a crash
    assert "model_world_size_1_rank_0.pt missing or cut short" in incomplete_reason(shard.parents[1], layout)
    plan = apply_retention(cfg, at_start=True, write=lambda *a, **k: None)
    assert read_marker(ckpt) == 1 and on_disk(cfg) == {1: "actor"} and "resuming from step 1" in plan.resume_note
    shutil.rmtree(ckpt / "global_step_1" / "actor")  # and the older one rotated away
    apply_retention(cfg, at_start=True, write=lambda *a, **k: None)
    assert read_marker(ckpt) is None and on_disk(cfg) == {}  # nothing to resume: starts over
