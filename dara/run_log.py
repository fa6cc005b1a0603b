"""`metrics.jsonl` (one flat JSON object per step; a resumed run drops the steps past its checkpoint) and a
console line per step."""

from __future__ import annotations

import json
import math
import os
import time
from numbers import Number
from pathlib import Path

from dara.io import JsonlError, atomic_write_jsonl, read_jsonl
from dara.run_folder import METRICS_FILE

__all__ = ["METRICS_FILE", "RunLog", "RunLogError", "read_metrics", "reward_means"]

RunLogError = JsonlError


def read_metrics(path: str | Path) -> list[dict]:
    return read_jsonl(path)[0]


def reward_means(scores, channels) -> dict[str, float]:
    """"reward/<channel>/mean" of each column of scores [N, K]."""
    return {f"reward/{c}/mean": float(scores[:, k].mean()) for k, c in enumerate(channels)}


class RunLog:
    def __init__(self, path: Path, total_steps: int | None = None, resumed_step: int = 0):
        self.path, self.total_steps = Path(path), total_steps
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():  # a resumed run never repeats a step
            atomic_write_jsonl(self.path, [r for r in read_metrics(self.path) if int(r.get("step", 0)) <= resumed_step])
        self._last_time = time.monotonic()

    @classmethod
    def from_config(cls, config, resumed_step: int = 0) -> RunLog | None:
        if not (run := config.get("run", None)) or not run.get("output_dir", None):
            return None
        return cls(Path(run.output_dir) / METRICS_FILE, config.trainer.get("total_training_steps", None), resumed_step)

    def write(self, step: int, metrics: dict, channels: list[str]) -> None:
        record = {"step": int(step)}
        for key, value in metrics.items():
            if isinstance(value, Number):  # bool too
                value = float(value)
            elif hasattr(value, "item") and getattr(value, "size", 1) == 1:  # numpy / torch scalars
                value = float(value.item())
            if isinstance(value, float) and math.isfinite(value):
                record[key] = value
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        now = time.monotonic()
        elapsed, self._last_time = now - self._last_time, now
        print(format_step(record, channels, self.total_steps, f"{elapsed:.1f}s"), flush=True)


def format_step(record: dict, channels: list[str], total_steps: int | None, timing: str) -> str:
    """`[dara] step 3/3 | reward ... | density ... | weight ... | <timing>` (per channel, where logged)."""
    def cols(prefix, suffix=""):
        return " ".join(f"{c} {record[f'{prefix}{c}{suffix}']:.3f}" for c in channels
                        if f"{prefix}{c}{suffix}" in record)

    return (f"[dara] step {record['step']}{f'/{total_steps}' if total_steps else ''} | reward "
            f"{cols('reward/', '/mean')} | density {cols('dara/density/')} | weight {cols('dara/weight/')} | {timing}")


def clock(seconds: float) -> str:
    """1:02:03 / 2:03 (h:mm:ss or m:ss)."""
    hours, rest = divmod(int(round(max(0.0, seconds))), 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class Progress:
    """Follows metrics.jsonl from the driver: a console line per new step with the time elapsed and left, (total -
    step) x the mean of the last `window` step durations (the first: verl's `timing_s/step`, without start-up)."""

    def __init__(self, path: str | Path, channels: list[str], total_steps: int | None, window: int = 5):
        self.path, self.channels, self.total_steps, self.window = Path(path), channels, total_steps, window
        self.start = time.monotonic()
        self._offset = self.path.stat().st_size if self.path.exists() else 0  # steps of an earlier session
        self._last, self._durations = None, []

    def _new_records(self) -> list[dict]:
        size = self.path.stat().st_size if self.path.exists() else 0
        if size < self._offset:  # rewritten (a resume dropped steps past its checkpoint)
            self._offset = size
        if size <= self._offset:
            return []
        with open(self.path, "rb") as handle:
            handle.seek(self._offset)
            data = handle.read(size - self._offset)
        complete = data[: data.rfind(b"\n") + 1]
        self._offset += len(complete)
        records = []
        for line in complete.decode("utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn line; read_metrics reports it where the file is read for results
            if isinstance(record, dict) and "step" in record:
                records.append(record)
        return records

    def poll_records(self) -> list[tuple[str, dict]]:
        out = []
        for record in self._new_records():
            now = time.monotonic()
            duration = float(record.get("timing_s/step", now - self.start)) if self._last is None else now - self._last
            self._last = now
            self._durations = (self._durations + [duration])[-self.window:]
            timing = f"{clock(now - self.start)} elapsed"
            if self.total_steps:
                left = (int(self.total_steps) - int(record["step"])) * sum(self._durations) / len(self._durations)
                timing += f", ~{clock(left)} left"
            out.append((format_step(record, self.channels, self.total_steps, timing), record))
        return out

    def poll(self) -> list[str]:
        return [line for line, _ in self.poll_records()]
