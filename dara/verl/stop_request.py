"""Stop at the next step boundary on request, with a checkpoint there: how a job leaves before its time limit.

A request is the file `<run folder>/stop_request` (`dara.run_folder.STOP_REQUEST`), holding one line saying why.
scripts/slurm/train.sbatch writes it when Slurm's pre-timeout signal arrives (`--signal=B:USR1@<lead>`), and
`python -m recipes gpu_smoke` writes it to force a stop. The trainer looks for it at the end of every step
(`on_step_end`, where verl itself saves): unless this step was a `save_freq` step or the last, it saves with
verl's own `_save_checkpoint` (so the project's checkpoint-marker hold-back and verl's rotation apply as to any
save), then ends `fit` after this step's metrics are logged (verl's loop runs while `global_steps <=
total_training_steps`), and deletes the request. `python -m dara.train` then returns normally with the run
unfinished; rerunning it resumes from that checkpoint (`trainer.resume_mode=auto`).

The check itself is `DaraTrainer.on_step_end` (dara/verl/trainer.py).
"""

from __future__ import annotations

from pathlib import Path

from dara.io import atomic_write_text
from dara.run_folder import STOP_REQUEST


def request_stop(run_dir: str | Path, reason: str) -> Path:
    """Ask the run in `run_dir` to checkpoint and stop at its next step boundary."""
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

