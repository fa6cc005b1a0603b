"""wandb for every training run: the settings verl's tracker hands to `wandb.init`, and reading them back.

verl's `Tracking` calls `wandb.init(project=trainer.project_name, name=trainer.experiment_name,
config=<the resolved config>)` inside the trainer's Ray actor and logs every step's metrics (verl's own,
`reward/<c>/mean`, the `dara/` instruments, pre-filter means) exactly as it does for its `file` backend.
wandb reads everything else from its environment, which the project sets through the Ray runtime env:

- mode: `offline` unless `run.wandb_mode=online`, or `run.wandb_mode=auto` and the environment holds a
  `WANDB_API_KEY` (its value is never read here); `disabled` turns wandb off;
- run id: derived from the run folder's absolute path, so a resumed run (same folder) continues the same
  wandb run (`WANDB_RESUME=allow`);
- group: `run.recipe` (the paper table or figure; defaults to the task); tags: task, model, method,
  estimator, seed; files under `<run folder>/wandb/`.

`read_offline_history` reads an offline run's `.wandb` file back with wandb's own reader (`wandb leet
inspect --json`, which parses the transaction log in wandb-core).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

MODES = ("auto", "offline", "online", "disabled")
OFFLINE_GLOB = "wandb/offline-run-*/run-*.wandb"
ONLINE_GLOB = "wandb/run-*/run-*.wandb"
_STARTED = re.compile(r"\d{8}_\d{6}")  # a wandb run folder's start time: offline-run-20261130_133738-<id>


def wandb_mode(requested: str | None, environ: Mapping[str, str] = os.environ) -> str:
    """The wandb mode of a run: `online` only when asked for, or `auto` with an API key in the environment."""
    requested = "auto" if requested is None else str(requested)
    if requested not in MODES:
        raise ValueError(f"run.wandb_mode={requested!r} is not one of {list(MODES)}")
    if requested == "auto":
        return "online" if environ.get("WANDB_API_KEY") else "offline"
    return requested


def wandb_run_id(output_dir: str | os.PathLike) -> str:
    """A stable wandb run id for a run folder: the same folder (a resumed run) gives the same id."""
    digest = hashlib.sha256(str(Path(output_dir).resolve()).encode()).hexdigest()
    return f"dara-{digest[:16]}"


def _tag(key: str, value) -> str:
    return f"{key}:{value}".replace(",", ";")[:64]  # WANDB_TAGS is comma-separated; wandb caps tags at 64


def wandb_tags(cfg) -> list[str]:
    run = cfg.run
    return [_tag("task", run.task), _tag("model", run.model), _tag("method", run.method),
            _tag("estimator", cfg.algorithm.adv_estimator), _tag("seed", run.seed)]


def wandb_enabled(cfg) -> bool:
    return "wandb" in list(cfg.trainer.logger or [])


def wandb_env(cfg, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The WANDB_* variables for the trainer's Ray actor (resolved config `cfg`)."""
    run = cfg.run
    return {
        "WANDB_MODE": wandb_mode(run.get("wandb_mode", None), environ),
        "WANDB_DIR": str(run.output_dir),
        "WANDB_RUN_ID": wandb_run_id(run.output_dir),
        "WANDB_RESUME": "allow",
        "WANDB_RUN_GROUP": str(run.get("recipe", None) or run.task),
        "WANDB_TAGS": ",".join(wandb_tags(cfg)),
        "WANDB_SILENT": "true",
    }


def apply_wandb_env(cfg, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Put `wandb_env` into `ray_kwargs.ray_init.runtime_env.env_vars` (when wandb is a logger); returns it."""
    from omegaconf import open_dict

    if not wandb_enabled(cfg):
        return {}
    env = wandb_env(cfg, environ)
    with open_dict(cfg):
        cfg.ray_kwargs.ray_init.runtime_env.env_vars.update(env)
    return env


def wandb_run_files(run_dir: str | os.PathLike) -> list[Path]:
    """The `.wandb` transaction logs of a run folder (one per start of the run), oldest first."""
    run_dir = Path(run_dir)
    files = [*run_dir.glob(OFFLINE_GLOB), *run_dir.glob(ONLINE_GLOB)]

    def started(path: Path) -> str:
        match = _STARTED.search(path.parent.name)
        return match.group(0) if match else ""

    return sorted(files, key=started)


def inspect_records(wandb_file: str | os.PathLike, timeout: float = 120) -> list[dict]:
    """Every record of a `.wandb` file as wandb's own reader prints it (`wandb leet inspect --json`)."""
    env = {**os.environ, "WANDB_MODE": "offline"}  # no telemetry upload from the reader
    result = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(wandb_file)],
                            capture_output=True, text=True, timeout=timeout, env=env)
    if result.returncode != 0:
        raise ValueError(f"{wandb_file}: wandb could not read the run log: {result.stderr.strip()[-500:]}")
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def read_offline_history(wandb_file: str | os.PathLike) -> tuple[dict, list[dict]]:
    """(run record, history rows) of one `.wandb` file; each row is the logged metrics plus `step`."""
    run, rows = {}, []
    for record in inspect_records(wandb_file):
        if record.get("type") == "run":
            run = record["run"]
        elif record.get("type") == "history":
            history = record["history"]
            row = {k: v for k, v in history.get("item", {}).items() if not k.startswith("_")}
            row["step"] = int(history.get("step", {}).get("num", history.get("item", {}).get("_step", 0)))
            rows.append(row)
    return run, rows
