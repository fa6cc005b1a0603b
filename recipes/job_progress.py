"""Did this Slurm job make progress (a checkpoint newer than its first)? scripts/slurm/train.sbatch asks at the job's
end, before requeueing itself. Prints one line and exits 0 (progress: requeue), 1 (none: not requeued; the line says
what `--time` or `trainer.save_freq` would let it progress) or 2 (the run finished). Quick: it also runs between
Slurm's SIGTERM at the time limit and its SIGKILL."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from dara.run_folder import CHECKPOINT_TRACKER, METRICS_FILE
from dara.slurm_time import format_time_limit

STEP_SECONDS = "timing_s/step"  # verl's per-step timing in each metrics record


def latest_checkpoint(checkpoint_dir: str | Path) -> int:
    try:
        return int((Path(checkpoint_dir) / CHECKPOINT_TRACKER).read_text().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def steps_since(run_dir: str | Path, step: int) -> list[dict]:
    """This job's metrics records: those after the starting checkpoint (a resume drops the later ones)."""
    path = Path(run_dir) / METRICS_FILE
    records = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return [record for record in records if int(record.get("step", 0)) > step]


PROGRESS, NO_PROGRESS, FINISHED = 0, 1, 2  # the exit status


def verdict(*, since: int, latest: int, records: list[dict], elapsed_min: float, time_limit: str | None,
            save_freq: int, lead_min: float, total_steps: int | None = None) -> tuple[int, str]:
    ran = len(records)
    if total_steps and records and int(records[-1]["step"]) >= total_steps:
        return FINISHED, f"the run logged its last step ({total_steps}): finished, not requeued"
    seconds = [float(r[STEP_SECONDS]) for r in records if STEP_SECONDS in r]
    step_min = sum(seconds) / len(seconds) / 60 if seconds else None
    pace = f"{step_min:.1f} min/step" if step_min is not None else "no step timing"
    if latest > since:
        return PROGRESS, (f"progress: checkpoint global_step_{latest} is new (this job: {ran} step(s), {pace}, "
                      f"{elapsed_min:.0f} min)")
    limit = time_limit or "its time limit"
    if step_min is None:
        return NO_PROGRESS, (f"not requeued: no checkpoint since this job started (latest: step {since}) and no step "
                       f"finished in {elapsed_min:.0f} min of {limit}: start-up and one step take longer; resubmit "
                       f"with a longer --time (at least start-up + one step + the {lead_min:g}-min signal lead)")
    startup = max(0.0, elapsed_min - ran * step_min)
    per_save = save_freq if save_freq > 0 else 1
    needed = startup + per_save * step_min + lead_min
    return NO_PROGRESS, (f"not requeued: no checkpoint since this job started (latest: step {since}): it ran {ran} "
                   f"step(s) in {elapsed_min:.0f} min of {limit} ({pace}, about {startup:.0f} min start-up), and a "
                   f"step outlasts the {lead_min:g}-min warning before the limit; resubmit with --time >= "
                   f"{format_time_limit(needed)} (save_freq {save_freq}) or trainer.save_freq <= {max(ran, 1)}")


def main(argv: list[str] | None = None) -> int:
    top = argparse.ArgumentParser(prog="python -m recipes.job_progress", description=__doc__.splitlines()[0])
    top.add_argument("--run-dir", required=True)
    top.add_argument("--checkpoint-dir", required=True)
    top.add_argument("--since-checkpoint", type=int, required=True, help="the latest checkpoint at the job's start")
    top.add_argument("--job-start", type=float, required=True, help="unix time the job started")
    top.add_argument("--total-steps", type=int, default=None, help="trainer.total_training_steps")
    top.add_argument("--time-limit", default=None, help="the job's --time (squeue %%l)")
    top.add_argument("--save-freq", type=int, default=0)
    top.add_argument("--signal-lead", type=float, default=5.0, help="minutes between the signal and the limit")
    args = top.parse_args(argv)
    status, line = verdict(since=args.since_checkpoint, latest=latest_checkpoint(args.checkpoint_dir),
                           records=steps_since(args.run_dir, args.since_checkpoint),
                           elapsed_min=(time.time() - args.job_start) / 60, time_limit=args.time_limit,
                           save_freq=args.save_freq, lead_min=args.signal_lead, total_steps=args.total_steps)
    print(f"[dara-slurm] {line}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
