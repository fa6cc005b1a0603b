"""The checkpoint policy's verl seam: keep the evaluated steps' HF weights after verl rotates checkpoints.

verl 0.9.1 keeps the newest `trainer.max_actor_ckpt_to_keep` checkpoints (the rest are deleted) and calls
`trainer.checkpoint_callback_class`'s `on_save` on the driver after each save. At a step listed in
`run.checkpoint.keep_hf_steps`, this callback hard-links the save's HF export (`actor/huggingface`, written when
`actor.checkpoint.save_contents` holds `hf_model`) into `run.checkpoint.kept_dir/global_step_<N>`: rotation
then frees the sharded model and optimizer but the evaluated weights stay (hard links cost no extra disk).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from omegaconf import OmegaConf
from verl.trainer.ppo.checkpoint_callback import CheckpointCallback


def keep_tree(source: Path, target: Path) -> int:
    """Hard-link (copy across file systems) every file of `source` into `target`, atomically; returns files."""
    staging = target.with_name(target.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    count = 0
    for path in sorted(source.rglob("*")):
        if not path.is_file():
            continue
        dest = staging / path.relative_to(source)
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, dest)
        except OSError:
            shutil.copy2(path, dest)
        count += 1
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)
    return count


class KeepEvaluatedSteps(CheckpointCallback):
    def on_save(self, trainer, global_step: int, checkpoint_dir: str, async_save: bool = False, **kwargs) -> None:
        policy = OmegaConf.select(self.config, "run.checkpoint", default=None)
        if policy is None or int(global_step) not in {int(s) for s in policy.keep_hf_steps or []}:
            return
        source = Path(checkpoint_dir) / "actor" / "huggingface"
        if not source.is_dir():
            print(f"[dara] step {global_step}: no HF export in {source} (actor.checkpoint.save_contents lacks "
                  "hf_model); nothing kept", flush=True)
            return
        target = Path(policy.kept_dir) / f"global_step_{global_step}"
        files = keep_tree(source, target)
        print(f"[dara] step {global_step}: HF weights kept in {target} ({files} files)", flush=True)
