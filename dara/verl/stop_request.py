"""Stop at the next step boundary with a checkpoint there: `<run folder>/stop_request` holds why (train.sbatch
writes it on Slurm's pre-timeout signal); `DaraTrainer.on_step_end` checkpoints, ends `fit` and deletes it."""

from __future__ import annotations

from pathlib import Path

from dara.io import atomic_write_text
from dara.run_folder import STOP_REQUEST


def request_stop(run_dir: str | Path, reason: str) -> Path:
    path = Path(run_dir) / STOP_REQUEST
    atomic_write_text(path, reason.strip() + "\n")
    return path


def stop_requested(run_dir: str | Path) -> str | None:
    try:
        return (Path(run_dir) / STOP_REQUEST).read_text().strip() or "no reason given"
    except FileNotFoundError:
        return None


def clear_stop_request(run_dir: str | Path) -> None:
    (Path(run_dir) / STOP_REQUEST).unlink(missing_ok=True)

