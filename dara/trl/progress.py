"""`StepLineCallback`: one console line per logged step, the reward, density and weight of each function.

The same line as the verl path's (dara.console), read from TRL's logs: `rewards/<name>/mean`,
`dara/density/<name>`, `dara/weight/<name>`. Needs `logging_steps=1` for a line every step.
"""

from __future__ import annotations

import time

from transformers import TrainerCallback

from dara.run_log import clock


def step_line(step: int, max_steps: int, logs: dict, elapsed: float) -> str | None:
    """`[dara.trl] step s/S | reward a x b y | density ... | weight ... | loss l | m:ss elapsed`, or None
    when the logs hold no reward (an evaluation or end-of-training record)."""
    names = [key[len("rewards/"):-len("/mean")] for key in logs if key.startswith("rewards/") and key.endswith("/mean")]
    if not names:
        return None

    def part(title: str, prefix: str, suffix: str = "", digits: int = 3) -> str:
        values = [f"{name} {logs[prefix + name + suffix]:.{digits}f}" for name in names
                  if logs.get(prefix + name + suffix) is not None]
        return f"{title} {' '.join(values)}" if values else ""
    parts = [part("reward", "rewards/", "/mean"), part("density", "dara/density/"), part("weight", "dara/weight/")]
    if logs.get("loss") is not None:
        parts.append(f"loss {logs['loss']:.4f}")
    parts.append(f"{clock(elapsed)} elapsed")
    return f"[dara.trl] step {step}/{max_steps} | " + " | ".join(p for p in parts if p)


class StepLineCallback(TrainerCallback):
    """Prints `step_line` on the main process at every log."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.lines: list[str] = []

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        line = step_line(state.global_step, state.max_steps, logs, time.perf_counter() - self.started)
        if line is not None:
            self.lines.append(line)
            print(line, flush=True)
