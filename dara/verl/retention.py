"""Checkpoint retention across jobs (verl keeps its rotation list in memory: a requeued job never rotates the
previous job's), at start (with `trainer.resume_mode=auto`) and after each save (dara.verl.checkpoints): the
newest complete checkpoints are kept, the evaluated steps' HF weights first hard-linked aside, and the resume
marker moved to a complete one (docs/experiments.md, "Retention across requeues"). Complete follows verl's
save order; `.pt` zips write their directory last and safetensors state their length, so a file cut short
shows without reading it."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from dara.io import atomic_write_text
from dara.run_folder import CHECKPOINT_TRACKER

STEP_FOLDER = re.compile(r"global_step_(\d+)")
_SHARDS = {"model": "model", "optimizer": "optim", "extra": "extra_state"}  # save_contents -> file prefix


@dataclass(frozen=True)
class CheckpointLayout:
    contents: dict[str, tuple[str, ...]]  # role folder -> checkpoint.save_contents
    fsdp: bool = True  # FSDP's per-rank shard files; otherwise only the role folders are checked

    @classmethod
    def from_config(cls, cfg) -> CheckpointLayout:
        def contents(node: str) -> tuple[str, ...]:
            value = OmegaConf.select(cfg, f"{node}.checkpoint.save_contents", default=None)
            return tuple(value) if value is not None else ("model", "optimizer", "extra")

        roles = {"actor": contents("actor_rollout_ref.actor")}
        critic = OmegaConf.select(cfg, "critic.enable", default=None)
        if critic or (critic is None and str(cfg.algorithm.adv_estimator) == "gae"):  # verl's need_critic
            roles["critic"] = contents("critic")
        return cls(roles, fsdp=str(OmegaConf.select(cfg, "actor_rollout_ref.actor.strategy", default="fsdp"))
                   .startswith("fsdp"))


def _zip_complete(path: Path) -> bool:
    return path.is_file() and zipfile.is_zipfile(path)  # a torch.save file writes its zip directory last


def _safetensors_complete(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
    except (OSError, ValueError, struct.error):
        return False
    end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    return path.stat().st_size == 8 + length + end


def _hf_export_reason(folder: Path) -> str | None:
    if not (folder / "config.json").is_file():
        return "huggingface/config.json missing"
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError):
            return "huggingface/ index unreadable"
    elif (folder / "model.safetensors").is_file():
        shards = ["model.safetensors"]
    else:
        return "huggingface/ holds no weights"
    for shard in shards:
        if not _safetensors_complete(folder / shard):
            return f"huggingface/{shard} missing or cut short"
    return None


def _role_reason(folder: Path, role: str, contents: tuple[str, ...]) -> str | None:
    try:
        world_size = int(json.loads((folder / "fsdp_config.json").read_text())["world_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return f"{role}/fsdp_config.json missing or unreadable"
    for content, prefix in _SHARDS.items():
        if content not in contents:
            continue
        for rank in range(world_size):
            name = f"{prefix}_world_size_{world_size}_rank_{rank}.pt"
            if not _zip_complete(folder / name):
                return f"{role}/{name} missing or cut short"
    if "hf_model" in contents:
        reason = _hf_export_reason(folder / "huggingface")
        if reason:
            return f"{role}/{reason}"
    return None


def incomplete_reason(folder: str | os.PathLike, layout: CheckpointLayout) -> str | None:
    folder = Path(folder)
    if not _zip_complete(folder / "data.pt"):
        return "no complete data.pt (the save did not finish)"
    for role, contents in layout.contents.items():
        if not (folder / role).is_dir():
            return f"no {role}/ (rotated away by verl, or never saved)"
        reason = _role_reason(folder / role, role, contents) if layout.fsdp else (
            None if any((folder / role).iterdir()) else f"{role}/ is empty")
        if reason:
            return reason
    return None


def read_marker(checkpoint_dir: str | os.PathLike) -> int | None:
    try:
        return int((Path(checkpoint_dir) / CHECKPOINT_TRACKER).read_text().strip())
    except (OSError, ValueError):
        return None


@dataclass
class RetentionPlan:
    keep: list[int] = field(default_factory=list)
    delete: dict[int, str] = field(default_factory=dict)  # step -> why
    keep_hf: list[int] = field(default_factory=list)  # complete steps whose HF weights go to kept_dir first
    marker: int | None = None  # the marker after the plan (None: no resume point)
    marker_before: int | None = None
    resume_note: str = ""


def _resume_point(marker: int | None, complete: list[int]) -> tuple[int | None, str]:
    """(step to resume from, why it moved) given the marker and the complete steps (oldest first)."""
    if marker is None or marker in complete:
        return marker, ""
    older = [s for s in complete if s < marker]
    if older:
        return older[-1], f"the marker's step {marker} is incomplete; resuming from step {older[-1]}"
    if complete:
        return complete[-1], (f"the marker's step {marker} is incomplete; resuming from step {complete[-1]}, "
                              "whose metrics line was not logged")
    return None, f"the marker's step {marker} is incomplete and no complete checkpoint is left; starting over"


def plan_retention(checkpoint_dir, layout: CheckpointLayout, keep_last: int | None, keep_hf_steps=(),
                   kept_dir: str | os.PathLike | None = None, at_start: bool = True) -> RetentionPlan:
    """What to keep and delete (module docstring); changes nothing."""
    root = Path(checkpoint_dir)
    matches = [(STEP_FOLDER.fullmatch(path.name), path) for path in (root.iterdir() if root.is_dir() else ())]
    folders = {int(m.group(1)): path for m, path in matches if m and (path.is_dir() or path.is_symlink())}
    reasons = {step: incomplete_reason(path, layout) for step, path in folders.items()}
    complete = sorted(s for s, r in reasons.items() if r is None)
    plan = RetentionPlan(marker_before=read_marker(checkpoint_dir))
    if at_start:
        plan.marker, plan.resume_note = _resume_point(plan.marker_before, complete)
        limit = -1 if plan.marker is None else plan.marker
        plan.delete.update({step: "past the resume marker: the run redoes it" for step in folders
                            if step > limit})
        complete = [s for s in complete if s <= limit]
    else:
        plan.marker = plan.marker_before
    plan.delete.update({step: f"incomplete: {reason}" for step, reason in reasons.items()
                        if reason is not None and step not in plan.delete})
    plan.keep = complete[-keep_last:] if keep_last and keep_last > 0 else complete
    plan.delete.update({step: f"older than the newest {keep_last}" for step in complete
                        if step not in plan.keep})
    hf_steps = {int(s) for s in keep_hf_steps or []}
    plan.keep_hf = [step for step in sorted(plan.delete)
                    if step in hf_steps and kept_dir is not None and reasons[step] is None
                    and not (Path(kept_dir) / f"global_step_{step}").is_dir()
                    and (folders[step] / "actor" / "huggingface").is_dir()]
    return plan


def keep_tree(source: Path, target: Path) -> int:
    """Hard-link (across file systems: copy) every file of `source` into `target`, atomically; returns files."""
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


def _remove(path: Path) -> str | None:
    try:
        if path.is_symlink() or path.is_file():
            path.unlink()
        else:
            shutil.rmtree(path)
    except OSError as error:
        return f"{path.name} ({error.strerror or error})"
    return None


def apply_retention(cfg, at_start: bool = True, write=print) -> RetentionPlan | None:
    """The run's retention policy on its checkpoint folder; one line when it changes anything."""
    if at_start and str(OmegaConf.select(cfg, "trainer.resume_mode", default="auto")) != "auto":
        return None
    if (checkpoint_dir := OmegaConf.select(cfg, "trainer.default_local_dir", default=None)) is None:
        return None
    checkpoint_dir, policy = Path(checkpoint_dir), OmegaConf.select(cfg, "run.checkpoint", default=None) or {}
    kept_dir = policy.get("kept_dir", None)
    if at_start and kept_dir and Path(kept_dir).is_dir():
        for staging in Path(kept_dir).glob("global_step_*.tmp"):  # a copy a killed job did not finish
            _remove(staging)
    if not checkpoint_dir.is_dir():
        return None
    keep_last = OmegaConf.select(cfg, "trainer.max_actor_ckpt_to_keep", default=None)
    plan = plan_retention(checkpoint_dir, CheckpointLayout.from_config(cfg), keep_last,
                          policy.get("keep_hf_steps", None), kept_dir, at_start=at_start)
    for step in plan.keep_hf:
        keep_tree(checkpoint_dir / f"global_step_{step}" / "actor" / "huggingface", Path(kept_dir) / f"global_step_{step}")
    tracker, marker_changed = checkpoint_dir / CHECKPOINT_TRACKER, plan.marker != plan.marker_before
    if marker_changed and plan.marker is None:
        tracker.unlink(missing_ok=True)
    elif marker_changed:
        atomic_write_text(tracker, str(plan.marker))
    failed = [f for step in sorted(plan.delete) if (f := _remove(checkpoint_dir / f"global_step_{step}"))]
    if plan.delete or marker_changed or failed:
        deleted = "; ".join(f"{s} ({why})" for s, why in sorted(plan.delete.items()))
        parts = [f"[dara] checkpoints: kept steps {', '.join(map(str, plan.keep)) or 'none'}",
                 deleted and f"deleted {deleted}",
                 plan.keep_hf and f"HF weights of steps {', '.join(map(str, plan.keep_hf))} kept first",
                 plan.resume_note, failed and f"could not delete {', '.join(failed)}"]
        write("; ".join(p for p in parts if p), flush=True)
    return plan
