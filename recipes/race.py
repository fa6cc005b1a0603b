"""What the CPU races share (recipes/cpu_headline.py, recipes/race_format.py): the settings a protocol fixes,
the threshold rule a pilot applies, and running a batch of runs in turn with progress and a summary.

A race is run like a study: its rule, endpoints, seeds and abort rule are committed in its recipe module before
the pilot; the pilot (the baselines only, on seeds apart from the race's) writes protocol.json once; every race
run reads its settings from that file, so nothing is tuned after a DARA run is seen.
"""

from __future__ import annotations

import math
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from recipes.runner import PROJECT_ROOT, RecipeError, Run, is_finished, train_command

SMOOTHING_STEPS = 3       # trailing mean over steps of the seed-median curve (per-step rates are noisy)
LEVEL_SHARE = 0.8         # the threshold sits at this share of the slower baseline's best level
THRESHOLD_GRID = 0.05
THRESHOLD_RANGE = (0.1, 0.8)  # 0.8: the authors' threshold, the most the rule may ask


def settings_overrides(settings: dict) -> tuple[str, ...]:
    """Hydra overrides of a settings block (a pilot's, or a protocol's: the same keys)."""
    return (f"trainer.total_training_steps={int(settings['steps'])}",
            f"actor_rollout_ref.rollout.temperature={float(settings['temperature'])}",
            f"actor_rollout_ref.rollout.n={int(settings['group_size'])}",
            f"data.train_batch_size={int(settings['prompts_per_step'])}",
            f"trainer.save_freq={int(settings['save_freq'])}",
            "trainer.max_actor_ckpt_to_keep=1")


def smoothed_level(steps: Sequence[int], values: Sequence[float], window: int = SMOOTHING_STEPS) -> float:
    """The maximum of the trailing `window`-step mean of a curve (steps ascending)."""
    ordered = [value for _, value in sorted(zip(steps, values, strict=True))]
    if len(ordered) < window:
        raise RecipeError(f"a pilot curve has {len(ordered)} steps, fewer than the {window} the rule smooths over")
    return max(sum(ordered[i - window:i]) / window for i in range(window, len(ordered) + 1))


def threshold_from_levels(levels: dict[str, float]) -> float:
    """LEVEL_SHARE x the lowest level, rounded down to THRESHOLD_GRID, clipped to THRESHOLD_RANGE."""
    low, high = THRESHOLD_RANGE
    raw = LEVEL_SHARE * min(levels.values())
    return round(min(high, max(low, math.floor(raw / THRESHOLD_GRID + 1e-9) * THRESHOLD_GRID)), 4)


def pilot_levels(frame, metric: str, methods: Sequence[str]) -> tuple[dict, dict]:
    """Per pilot method: the smoothed level of its seed-median curve, and that curve ({step: value})."""
    levels, curves = {}, {}
    for method in methods:
        part = frame[frame["method"] == method].dropna(subset=[metric])
        if part.empty:
            raise RecipeError(f"the pilot has no {metric} for {method}")
        median = part.groupby("step")[metric].median().sort_index()
        levels[method] = round(float(smoothed_level(list(median.index), list(median.values))), 4)
        curves[method] = {int(step): round(float(value), 4) for step, value in median.items()}
    return levels, curves


def run_in_turn(batch: Sequence[Run], label: str, python: str = sys.executable,
                after_run: Callable[[Run], None] | None = None) -> int:
    """Each unfinished run in turn (an interrupted one resumes from its last checkpoint: the same folder);
    one line per finished run with the time left; ``after_run`` is called on each run that finished.
    Returns the number of failed runs."""
    todo = [run for run in batch if not is_finished(run)]
    print(f"[{label}] {len(batch)} runs: {len(batch) - len(todo)} finished (skipped), {len(todo)} to run", flush=True)
    failed, spent = [], []
    for index, run in enumerate(todo, 1):
        started = time.monotonic()
        code = subprocess.call(train_command(run, python), cwd=PROJECT_ROOT)
        spent.append(time.monotonic() - started)
        left = sum(spent) / len(spent) * (len(todo) - index)
        status = "done" if code == 0 else f"FAILED (exit {code})"
        if code:
            failed.append(run.name)
        elif after_run is not None:
            after_run(run)
        print(f"[{label}] {index}/{len(todo)} {run.method} seed {run.seed}: {status} in {spent[-1] / 60:.1f} min, "
              f"~{left / 60:.0f} min left", flush=True)
    print(f"[{label}] {len(todo) - len(failed)} ran, {len(batch) - len(todo)} skipped, {len(failed)} failed"
          + (f": {', '.join(failed)}" if failed else ""), flush=True)
    return len(failed)


def describe_plan(race: Sequence[Run]) -> str:
    return "\n".join(f"{index:2d}. method {run.method:10s} seed {run.seed}  {run.name}"
                     for index, run in enumerate(race, 1))
