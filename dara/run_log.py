"""The run folder's per-step log: `metrics.jsonl` (one flat JSON object per step) and a console line.

A resumed run (after preemption) first drops the lines of steps past its checkpoint, so every step
appears exactly once however often the run was interrupted.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from numbers import Number
from pathlib import Path

METRICS_FILE = "metrics.jsonl"
log = logging.getLogger(__name__)


def _flat_float(value):
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, Number):
        return float(value)
    if hasattr(value, "item") and getattr(value, "size", 1) == 1:  # numpy / torch scalars
        return float(value.item())
    return None


class RunLogError(ValueError):
    """A run log that cannot be read as documented."""


def read_metrics(path: str | Path) -> list[dict]:
    """All records of a JSONL run log, in order.

    A truncated *last* line (a writer killed mid-line) is dropped with a warning; any other bad line is
    an error naming the file and line, never skipped silently.
    """
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            if number == len(lines):
                log.warning("%s: dropped a truncated last line (%s)", path, err)
                continue
            raise RunLogError(f"{path}:{number}: not valid JSON ({err})") from err
        if not isinstance(record, dict):
            raise RunLogError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
        records.append(record)
    return records


class RunLog:
    def __init__(self, path: Path, total_steps: int | None = None, resumed_step: int = 0):
        self.path = Path(path)
        self.total_steps = total_steps
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._truncate_after(resumed_step)
        self._last_time = time.monotonic()

    @classmethod
    def from_config(cls, config, resumed_step: int = 0) -> RunLog | None:
        run = config.get("run", None)
        if not run or not run.get("output_dir", None):
            return None
        total = config.trainer.get("total_training_steps", None)
        return cls(Path(run.output_dir) / METRICS_FILE, total_steps=total, resumed_step=resumed_step)

    def _truncate_after(self, step: int) -> None:
        """Keep only records of steps <= `step` (atomic rewrite), so a resumed run never repeats a step."""
        if not self.path.exists():
            return
        kept = [r for r in read_metrics(self.path) if int(r.get("step", 0)) <= step]
        tmp = self.path.with_suffix(".jsonl.tmp")
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(r) + "\n" for r in kept)
        os.replace(tmp, self.path)

    def write(self, step: int, metrics: dict, channels: list[str]) -> None:
        record = {"step": int(step)}
        for key, value in metrics.items():
            number = _flat_float(value)
            if number is not None and math.isfinite(number):
                record[key] = number
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        print(self.step_line(record, channels), flush=True)

    def step_line(self, record: dict, channels: list[str]) -> str:
        now = time.monotonic()
        elapsed, self._last_time = now - self._last_time, now
        total = f"/{self.total_steps}" if self.total_steps else ""

        def cols(prefix, suffix=""):
            return " ".join(f"{c} {record[f'{prefix}{c}{suffix}']:.3f}" for c in channels
                            if f"{prefix}{c}{suffix}" in record)

        return (f"[dara] step {record['step']}{total} | reward {cols('reward/', '/mean')} | "
                f"density {cols('dara/density/')} | weight {cols('dara/weight/')} | {elapsed:.1f}s")
