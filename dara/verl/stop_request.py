"""Stop at the next step boundary on request, with a checkpoint there: how a job leaves before its time limit.

A request is the file `<run folder>/stop_request` holding why (scripts/slurm/train.sbatch writes it on Slurm's
pre-timeout signal, `python -m recipes gpu_smoke` to force a stop). `DaraTrainer.on_step_end` looks for it after
every step: unless verl saves this step anyway, it saves with verl's own `_save_checkpoint`, ends `fit` after the
step is logged, and deletes the request; rerunning the command resumes from that checkpoint.
"""

from __future__ import annotations

from pathlib import Path

from dara.io import atomic_write_text
from dara.run_folder import STOP_REQUEST


def request_stop(run_dir: str | Path, reason: str) -> Path:
    path = Path(run_dir) / STOP_REQUEST
    atomic_write_text(path, reason.strip() + "\n")
    return path


def stop_requested(run_dir: str | Path) -> str | None:
    """The reason of a pending stop request, or None."""
    try:
        return (Path(run_dir) / STOP_REQUEST).read_text().strip() or "no reason given"
    except FileNotFoundError:
        return None


def clear_stop_request(run_dir: str | Path) -> None:
    (Path(run_dir) / STOP_REQUEST).unlink(missing_ok=True)

