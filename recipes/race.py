"""What the CPU races share (recipes/cpu_headline.py, race_format.py, race_length.py): the protocol's settings, the
pilot's threshold rule and abort-rule crossing, writing the protocol once, running runs in turn, and keeping each
finished run's logs in the results folder (committed as the race goes, restored in a fresh clone).
"""

from __future__ import annotations

import functools
import json
import math
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from dara.io import atomic_write_text
from recipes.runner import PROJECT_ROOT, RecipeError, Run, is_finished, train_command
from results import headline

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


def load_protocol(path: str | Path) -> dict:
    """The committed protocol (results.headline.load_protocol); a missing or broken file is a RecipeError naming
    it (run the race's --pilot first)."""
    try:
        return headline.load_protocol(path)
    except headline.ProtocolError as error:
        raise RecipeError(str(error)) from None


def race_settings(protocol_file: Path, settings: dict) -> dict:
    """The settings a race's runs take: the committed protocol's; before the pilot has written it (listing, a
    dry run), the pre-registered ones the protocol copies. Running the race needs the protocol
    (``run_keeping_logs``)."""
    return load_protocol(protocol_file) if Path(protocol_file).exists() else dict(settings)


# ----------------------------------------------------------------------------------- the pilot
def crossing_step(frame, method: str, sparse: str, dense: str) -> int | None:
    """The first step at which ``method``'s seed-median density of ``sparse`` reaches that of ``dense``."""
    part = frame[frame["method"] == method]
    medians = part.groupby("step")[[f"dara/density/{sparse}", f"dara/density/{dense}"]].median().sort_index()
    reached = medians[medians[f"dara/density/{sparse}"] >= medians[f"dara/density/{dense}"]]
    return int(reached.index[0]) if len(reached) else None


def run_pilot(args, protocol_file: Path, batch: Sequence[Run], derive: Callable, label: str) -> dict | None:
    """A race's pilot: refuse when the protocol exists, run ``batch`` in turn, derive the protocol from its runs
    (``derive(frame)``, which applies the abort rule) and write it once. Returns the protocol, None when a pilot
    run failed."""
    from results.loaders import load_runs

    if protocol_file.exists():
        raise RecipeError(f"{protocol_file} exists: the protocol is derived once and committed")
    if run_in_turn(batch, f"{label} pilot", args.python_exe):
        return None
    protocol = derive(load_runs([str(run.output_dir) for run in batch]))
    atomic_write_text(protocol_file, json.dumps(protocol, indent=2) + "\n")
    return protocol


# ----------------------------------------------------------------------------------- the logs a race keeps
LOG_FILES = ("metrics.jsonl", "run_info.json")


def keep_logs(run: Run, logs_dir: Path) -> Path:
    """Copy a finished run's metrics.jsonl and run_info.json into the committed logs folder (atomically)."""
    target = logs_dir / run.name
    for name in LOG_FILES:
        atomic_write_text(target / name, (run.output_dir / name).read_text())
    return target


def restore_logs(batch: Sequence[Run], logs_dir: Path) -> int:
    """A run whose logs are committed but whose folder is gone (a fresh clone) gets them back, so it counts as
    finished and is skipped. Returns how many were restored."""
    restored = 0
    for run in batch:
        kept = logs_dir / run.name
        if (kept / "metrics.jsonl").is_file() and not is_finished(run):
            run.output_dir.mkdir(parents=True, exist_ok=True)
            for name in LOG_FILES:
                shutil.copyfile(kept / name, run.output_dir / name)
            restored += 1
    return restored


def commit_logs(run: Run, logs_dir: Path, label: str, attempts: int = 5) -> bool:
    """Keep the run's logs and commit that folder alone (a session may end at any time). Another git command
    holding the index is waited out; a commit that still fails is one line and the race goes on (the logs stay
    kept: a person, or the next run's commit, commits them)."""
    relative = str(keep_logs(run, logs_dir).relative_to(PROJECT_ROOT))
    message = f"results/{label}: {run.method} seed {run.seed} ({run.name})"
    for attempt in range(attempts):
        added = subprocess.run(["git", "add", "--", relative], cwd=PROJECT_ROOT, capture_output=True)
        if added.returncode == 0 and subprocess.run(["git", "commit", "-q", "-m", message, "--", relative],
                                                    cwd=PROJECT_ROOT, capture_output=True).returncode == 0:
            return True
        time.sleep(2 * (attempt + 1))
    print(f"[{label}] could not commit {relative}: kept there, commit it by hand", flush=True)
    return False


def run_keeping_logs(race: Sequence[Run], args, label: str, logs_dir: Path, protocol_file: Path) -> int:
    """The race in turn, once its pilot has written the protocol: committed logs restored first, each finished
    run's logs kept (``args.commit``: and committed). Returns the exit code."""
    load_protocol(protocol_file)  # no race run before the protocol: a RecipeError naming --pilot
    restored = restore_logs(race, logs_dir)
    if restored:
        print(f"[{label}] {restored} finished runs restored from {logs_dir.relative_to(PROJECT_ROOT)}", flush=True)
    if getattr(args, "commit", False):
        after = functools.partial(commit_logs, logs_dir=logs_dir, label=label)
    else:
        after = functools.partial(keep_logs, logs_dir=logs_dir)
    return 1 if run_in_turn(race, label, args.python_exe, after_run=after) else 0
