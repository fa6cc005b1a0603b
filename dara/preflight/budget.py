"""Checkpoint disk per save and per run, and whether a job reaches its next save within its time limit.

Bytes per parameter of one verl FSDP checkpoint: sharded fp32 model 4 + fp32 Adam (2 states) 8, plus bf16 HF
weights 2 with `hf_model` in `actor.checkpoint.save_contents`. The minutes per step are the cluster file's
`run.hardware.step_minutes_estimate.<model>`: an estimate, printed as one.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from dara.preflight.facts import ModelFacts
from dara.preflight.report import Section

GB = 1e9
CONTENT_BYTES = {"model": 4, "optimizer": 8, "hf_model": 2}


def check_checkpoints(cfg: DictConfig, facts: ModelFacts | None, section: Section) -> None:
    steps, freq = int(cfg.trainer.total_training_steps), int(cfg.trainer.save_freq)
    if freq <= 0:
        section.line(f"trainer.save_freq={freq}: no checkpoints")
        return
    contents = list(OmegaConf.select(cfg, "actor_rollout_ref.actor.checkpoint.save_contents", default=[]) or [])
    per_param = sum(CONTENT_BYTES.get(c, 0) for c in contents)
    saves = steps // freq
    keep = OmegaConf.select(cfg, "trainer.max_actor_ckpt_to_keep", default=None)
    kept_steps = [s for s in (OmegaConf.select(cfg, "run.checkpoint.keep_hf_steps", default=[]) or [])
                  if int(s) % freq == 0 and int(s) <= steps]
    section.line(f"save every {freq} steps of {steps}: {saves} saves; contents {contents} = {per_param} B/param")
    if facts is None:
        section.note("no run.model_facts: disk not estimated")
        return
    per_save = per_param * facts.num_parameters
    section.line(f"per save: {per_param} B x {facts.num_parameters / 1e9:.3f}e9 = {per_save / GB:.1f} GB")
    hf = 2 * facts.num_parameters if "hf_model" in contents else 0
    if keep:
        kept = min(saves, int(keep)) * per_save + len(kept_steps) * hf
        section.line(f"whole run: newest {keep} kept x {per_save / GB:.1f} GB + HF weights of steps {kept_steps} "
                     f"x {hf / GB:.1f} GB = {kept / GB:.1f} GB (without the cap: {saves * per_save / GB:.1f} GB)")
    else:
        section.line(f"whole run: every save kept: {saves} x {per_save / GB:.1f} GB = {saves * per_save / GB:.1f} GB")
        section.note("trainer.max_actor_ckpt_to_keep is unset: nothing caps the checkpoints")


def check_time(cfg: DictConfig, section: Section, time_limit_minutes: float | None = None) -> None:
    hardware = OmegaConf.select(cfg, "run.hardware", default=None)
    if hardware is None or cfg.trainer.device != "cuda":
        section.line(f"trainer.device={cfg.trainer.device}: no step-time estimate")
        return
    estimate = OmegaConf.select(hardware, f"step_minutes_estimate.{cfg.run.model}", default=None)
    if estimate is None:
        section.note(f"no step_minutes_estimate for {cfg.run.model} in cluster {cfg.run.cluster}: not checked")
        return
    limit = float(time_limit_minutes if time_limit_minutes is not None else hardware.job_time_limit_minutes)
    startup = float(hardware.job_startup_minutes)
    per_job = int((limit - startup) // float(estimate))
    steps, freq = int(cfg.trainer.total_training_steps), int(cfg.trainer.save_freq)
    section.line(f"ESTIMATE {estimate} min/step ({cfg.run.model} on {cfg.run.cluster}); job limit {limit:.0f} min - "
                 f"start-up {startup:.0f} min -> {per_job} steps per job; save_freq {freq}; "
                 f"{steps} steps = about {steps * float(estimate) / 60:.1f} h")
    if freq > 0 and per_job < freq:
        section.fail(f"a job runs about {per_job} steps but saves every {freq}: it would requeue from the same "
                     f"checkpoint forever (lower trainer.save_freq to <= {max(per_job, 1)} or raise the time limit)")
    elif freq <= 0 and per_job < steps:
        section.fail(f"no checkpoints (save_freq {freq}) and {steps} steps need more than one job ({per_job} steps)")


def parse_time_limit(text: str | None) -> float | None:
    """Slurm's --time forms: minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S; returns minutes."""
    if not text:
        return None
    days = 0
    if "-" in text:
        head, text = text.split("-", 1)
        days = int(head)
        parts = [int(x) for x in text.split(":")]
        parts += [0] * (3 - len(parts))
        hours, minutes, seconds = parts
    else:
        parts = [int(x) for x in text.split(":")]
        hours, minutes, seconds = {1: (0, parts[0], 0), 2: (0, *parts), 3: tuple(parts)}[len(parts)]
    return days * 1440 + hours * 60 + minutes + seconds / 60
