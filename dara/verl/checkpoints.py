"""`trainer.checkpoint_callback_class`, called after each save: at a step of `run.checkpoint.keep_hf_steps` the HF
export is hard-linked into `run.checkpoint.kept_dir`, then the retention policy (dara.verl.retention) applies."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf
from verl.trainer.ppo.checkpoint_callback import CheckpointCallback

from dara.verl.retention import apply_retention, keep_tree


class KeepEvaluatedSteps(CheckpointCallback):
    def on_save(self, trainer, global_step: int, checkpoint_dir: str, async_save: bool = False, **kwargs) -> None:
        policy, step = OmegaConf.select(self.config, "run.checkpoint", default=None), int(global_step)
        source = Path(checkpoint_dir) / "actor" / "huggingface"
        keep = policy is not None and step in {int(s) for s in policy.keep_hf_steps or []}
        if keep and not source.is_dir():
            print(f"[dara] step {step}: no HF export in {source} (actor.checkpoint.save_contents lacks "
                  "hf_model); nothing kept", flush=True)
        elif keep:
            target = Path(policy.kept_dir) / f"global_step_{step}"
            files = keep_tree(source, target)
            print(f"[dara] step {step}: HF weights kept in {target} ({files} files)", flush=True)
        if not async_save:  # an asynchronous save may still be writing: its completeness cannot be judged yet
            apply_retention(self.config, at_start=False)
