"""Checkpoint disk per save and per run, free space at the checkpoint folder, and progress within the time
limit (docs/experiments.md, "Preflight"). Bytes per parameter of a verl 0.9.1 FSDP checkpoint: model 4 (fp32)
+ Adam 8, + 4 for the fp32 HF export (`hf_model`). A save is written before the oldest is deleted: the disk
holds the retained saves plus one. A job makes progress when it checkpoints before its limit: at the step
boundary after the pre-timeout signal (when a step plus a save fit in `signal_lead_minutes`), else at its
newest `save_freq` step.
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from dara.preflight.facts import ModelFacts
from dara.preflight.report import Section
from dara.slurm_time import format_time_limit

GB = 1e9
CONTENT_BYTES = {"model": 4, "optimizer": 8, "hf_model": 4}
SAVE_GB_PER_S = 1.0  # ESTIMATE: a shared file system's write rate for one save (the signal save must fit)


@dataclass(frozen=True)
class DiskPlan:
    per_param: int
    per_save: float  # bytes of one save
    hf: float  # bytes of one HF export
    saves: int
    keep: int | None
    kept_steps: tuple[int, ...]

    @property
    def retained(self) -> float:
        return (min(self.saves, self.keep) if self.keep else self.saves) * self.per_save + len(self.kept_steps) * self.hf

    @property
    def peak(self) -> float:
        return self.retained + (self.per_save if self.saves else 0)


def disk_plan(cfg: DictConfig, facts: ModelFacts | None) -> DiskPlan | None:
    steps, freq = int(cfg.trainer.total_training_steps), int(cfg.trainer.save_freq)
    if freq <= 0 or facts is None:
        return None
    contents = list(OmegaConf.select(cfg, "actor_rollout_ref.actor.checkpoint.save_contents", default=[]) or [])
    per_param = sum(CONTENT_BYTES.get(c, 0) for c in contents)
    keep = OmegaConf.select(cfg, "trainer.max_actor_ckpt_to_keep", default=None)
    kept = tuple(int(s) for s in OmegaConf.select(cfg, "run.checkpoint.keep_hf_steps", default=[]) or []
                 if int(s) % freq == 0 and int(s) <= steps)
    hf = CONTENT_BYTES["hf_model"] * facts.num_parameters if "hf_model" in contents else 0
    return DiskPlan(per_param, per_param * facts.num_parameters, hf, steps // freq, int(keep) if keep else None, kept)


def check_checkpoints(cfg: DictConfig, facts: ModelFacts | None, section: Section) -> None:
    steps, freq = int(cfg.trainer.total_training_steps), int(cfg.trainer.save_freq)
    contents = list(OmegaConf.select(cfg, "actor_rollout_ref.actor.checkpoint.save_contents", default=[]) or [])
    plan = disk_plan(cfg, facts)
    if plan is None:
        section.line(f"trainer.save_freq={freq}, contents {contents}: " + ("no checkpoints" if freq <= 0 else
                                                                          "no run.model_facts, disk not estimated"))
        return
    saves = f"{plan.per_save / GB:.1f} GB"
    section.line(f"save every {freq} steps of {steps}: {plan.saves} saves; contents {contents} = {plan.per_param} "
                 "B/param (model 4 fp32 + optimizer 8 + fp32 HF export 4)")
    section.line(f"per save: {plan.per_param} B x {facts.num_parameters / 1e9:.3f}e9 = {saves}")
    if plan.keep:
        section.line(f"whole run: newest {plan.keep} kept x {saves} + HF weights of steps {list(plan.kept_steps)} x "
                     f"{plan.hf / GB:.1f} GB = {plan.retained / GB:.1f} GB (without the cap: "
                     f"{plan.saves * plan.per_save / GB:.1f} GB); with one save in flight {plan.peak / GB:.1f} GB")
    else:
        section.line(f"whole run: every save kept: {plan.saves} x {saves} = {plan.retained / GB:.1f} GB")
        section.note("trainer.max_actor_ckpt_to_keep is unset: nothing caps the checkpoints")


def check_disk(cfg: DictConfig, facts: ModelFacts | None, section: Section, *, usage=shutil.disk_usage) -> None:
    plan, folder = disk_plan(cfg, facts), Path(str(cfg.trainer.default_local_dir))
    if plan is None:
        section.line(f"{folder}: no checkpoints planned (trainer.save_freq={cfg.trainer.save_freq}) or no model facts")
        return
    kept_dir = OmegaConf.select(cfg, "run.checkpoint.kept_dir", default=None)
    there = sum(os.lstat(os.path.join(root, name)).st_size for top in (folder, kept_dir) if top and os.path.isdir(top)
                for root, _, files in os.walk(top) for name in files)
    needed = max(0.0, plan.peak - there)
    mount = folder.absolute()
    while not mount.exists() and mount != mount.parent:  # the file system the folder will be on
        mount = mount.parent
    free = usage(mount).free
    section.line(f"free at {mount}: {free / GB:.1f} GB; the run needs {plan.peak / GB:.1f} GB (retained "
                 f"{plan.retained / GB:.1f} + one save in flight {plan.per_save / GB:.1f}) - {there / GB:.1f} GB "
                 f"already there = {needed / GB:.1f} GB more")
    if free < needed:
        section.fail(f"only {free / GB:.1f} GB free at {mount} for {folder}, the run needs {needed / GB:.1f} GB more; "
                     "free space, move run.output_root, or keep fewer checkpoints (run.checkpoint.keep_last, "
                     "keep_hf_steps)")


def step_minutes(cfg: DictConfig, calibration=None) -> tuple[float, str] | None:
    """(minutes per step, where the figure comes from), or None."""
    model, cluster = str(cfg.run.model), str(OmegaConf.select(cfg, "run.cluster", default=""))
    measured = calibration.step_minutes(cluster, model) if calibration is not None else None
    if measured is not None:
        return measured, f"CALIBRATED ({calibration.describe()})"
    estimates = OmegaConf.select(cfg, "run.hardware.step_minutes_estimate", default=None) or {}
    if model in estimates:  # keys hold dots (qwen2.5-...): looked up as keys, not as a dotted path
        return float(estimates[model]), f"ESTIMATE (cluster file {cluster})"
    return None


def check_time(cfg: DictConfig, facts: ModelFacts | None, section: Section, time_limit_minutes: float | None = None,
               calibration=None) -> None:
    hardware = OmegaConf.select(cfg, "run.hardware", default=None)
    if hardware is None or cfg.trainer.device != "cuda":
        section.line(f"trainer.device={cfg.trainer.device}: no step-time estimate")
        return
    found = step_minutes(cfg, calibration)
    if found is None:
        section.fail(f"no step_minutes_estimate for {cfg.run.model} in cluster {cfg.run.cluster} (add it to the "
                     "cluster file, or pass a gpu_smoke --calibration file)")
        return
    step, source = found
    requested = time_limit_minutes is not None
    limit = float(time_limit_minutes if requested else hardware.job_time_limit_minutes)
    startup, lead = float(hardware.job_startup_minutes), float(hardware.signal_lead_minutes)
    steps, freq = int(cfg.trainer.total_training_steps), int(cfg.trainer.save_freq)
    per_job = int((limit - startup) // step)
    section.line(f"{step:g} min/step {source}; job limit {format_time_limit(limit)} "
                 f"({'--time' if requested else 'the cluster file job_time_limit_minutes'}) - start-up {startup:g} min "
                 f"-> {per_job} steps per job; save_freq {freq}; {steps} steps = about {steps * step / 60:.1f} h")
    plan = disk_plan(cfg, facts)
    save = (plan.per_save if plan else 0.0) / GB / SAVE_GB_PER_S / 60
    in_flight = round(step + save, 1)  # decided on the printed figure, so the line and the verdict agree
    clean = in_flight <= lead
    section.line(f"pre-timeout signal {lead:g} min before the limit: the trainer stops at its next step boundary "
                 f"with a checkpoint; a step + a save = {step:g} + {save:.1f} min (at {SAVE_GB_PER_S:g} GB/s, "
                 f"estimate) = {in_flight:.1f} min {'<=' if clean else '>'} {lead:g} min: "
                 + ("it stops before the limit" if clean else "the step in flight may outlast the limit"))
    if per_job < 1:
        section.fail(f"a job of {format_time_limit(limit)} spends {startup:g} min starting and cannot finish one "
                     f"{step:g}-min step: it would end without a checkpoint and is not requeued (raise --time to >= "
                     f"{format_time_limit(startup + 2 * step)})")
        return
    kept = per_job if clean else (per_job // freq * freq if freq > 0 else 0)  # steps a job keeps
    if not kept:
        needed = startup + (freq if freq > 0 else steps) * step
        section.fail(f"a job runs about {per_job} steps but saves every {freq if freq > 0 else 'never'}, and a "
                     f"{step:g}-min step + save outlasts the {lead:g}-min warning: a job could end without a new "
                     f"checkpoint and is then not requeued (trainer.save_freq <= {per_job}, or --time >= "
                     f"{format_time_limit(needed)})")
        return
    jobs = math.ceil(steps / kept)
    if per_job >= steps:
        section.verdict = f"all {steps} steps fit in one job"
    elif clean:
        section.verdict = "each job stops at the pre-timeout signal with a checkpoint and requeues itself"
        section.line(f"each job: about {per_job} steps, the last one checkpointed at the signal; {steps} steps = "
                     f"{steps} / {per_job} -> about {jobs} jobs")
    else:
        section.verdict = ("each job requeues itself when Slurm ends it at the limit, from its newest save_freq "
                           "checkpoint")
        section.line(f"each job: about {per_job} steps, checkpointed every {freq}: the newest at its step {kept}, "
                     f"so about {per_job - kept} step(s) ({(per_job - kept) * step:g} min) and the step in flight are "
                     f"redone by the next job; {steps} steps = {steps} / {kept} -> about {jobs} jobs")
