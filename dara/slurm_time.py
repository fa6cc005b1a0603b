"""Slurm's `--time` form, read and written. Standard library only: recipes.job_progress imports it between Slurm's
SIGTERM at the time limit and its SIGKILL, where importing dara.preflight (seconds) would not fit."""

from __future__ import annotations

import math

# scripts/slurm/train.sbatch's #SBATCH --signal=B:USR1@300: the schema's run.hardware.signal_lead_minutes default
DEFAULT_SIGNAL_LEAD_MINUTES = 5.0


def parse_time_limit(text: str | None) -> float | None:
    """Minutes of Slurm's --time forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (None: not given or UNLIMITED)."""
    if not text or str(text).upper() in ("UNLIMITED", "INFINITE", "NOT_SET"):
        return None
    days, _, rest = str(text).rpartition("-")
    parts = [int(x) for x in rest.split(":")]
    hours, minutes, seconds = (parts + [0] * (3 - len(parts)) if days  # D-H[:M[:S]]; else M, M:S, H:M:S
                               else {1: (0, parts[0], 0), 2: (0, *parts), 3: tuple(parts)}[len(parts)])
    return int(days or 0) * 1440 + hours * 60 + minutes + seconds / 60


def format_time_limit(minutes: float) -> str:
    """Minutes in Slurm's --time form D-HH:MM:SS (or H:MM:SS under a day), rounded up to the minute."""
    days, rest = divmod(int(math.ceil(minutes)), 1440)
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00" if days else f"{rest // 60}:{rest % 60:02d}:00"
