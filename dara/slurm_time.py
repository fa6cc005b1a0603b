"""Slurm's `--time` form, read and written. Standard library only: recipes.job_progress imports it in the
seconds between Slurm's SIGTERM at the time limit and its SIGKILL, where importing dara.preflight (seconds)
would not fit."""

from __future__ import annotations

import math

# scripts/slurm/train.sbatch's #SBATCH --signal=B:USR1@300: the schema's run.hardware.signal_lead_minutes default
DEFAULT_SIGNAL_LEAD_MINUTES = 5.0


def parse_time_limit(text: str | None) -> float | None:
    """Slurm's --time forms: minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S; returns minutes (None: not given or
    UNLIMITED)."""
    if not text or str(text).upper() in ("UNLIMITED", "INFINITE", "NOT_SET"):
        return None
    text = str(text)
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


def format_time_limit(minutes: float) -> str:
    """Minutes in Slurm's --time form D-HH:MM:SS (or H:MM:SS under a day), rounded up to the minute."""
    total = int(math.ceil(minutes))
    days, rest = divmod(total, 1440)
    hours, mins = divmod(rest, 60)
    return f"{days}-{hours:02d}:{mins:02d}:00" if days else f"{hours}:{mins:02d}:00"
