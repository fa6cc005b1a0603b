"""wandb for every training run, set through the Ray runtime env for verl's `Tracking` (docs/training.md,
"wandb"): offline unless online is asked or `auto` finds a key and a host answering within PROBE_TIMEOUT_S;
the run id from the run folder; rows by verl's `training/global_step` (`StepMetricWandb`).
`read_offline_history` reads a `.wandb` file back with wandb's own reader."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

from dara.config import library_estimator

MODES = ("auto", "offline", "online", "disabled")
OFFLINE_GLOB = "wandb/offline-run-*/run-*.wandb"
ONLINE_GLOB = "wandb/run-*/run-*.wandb"
_STARTED = re.compile(r"\d{8}_\d{6}")  # a wandb run folder's start time: offline-run-20261130_133738-<id>
DEFAULT_BASE_URL = "https://api.wandb.ai"
PROBE_TIMEOUT_S = 5.0
STEP_METRIC = "training/global_step"  # verl puts it in every training step's metrics


def probe_wandb_host(base_url: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None when `base_url` answers a HEAD request (any status) within `timeout` s, else why not (in a thread, so
    a hanging name lookup is bounded too)."""
    outcome: list[str | None] = []

    def request() -> None:
        try:
            urllib.request.urlopen(urllib.request.Request(base_url, method="HEAD"), timeout=timeout).close()
            outcome.append(None)
        except urllib.error.HTTPError:  # the host answered (with an error status)
            outcome.append(None)
        except Exception as error:  # noqa: BLE001 (whatever stops the request: the host is not usable)
            reason = getattr(error, "reason", error)
            outcome.append(f"{type(reason).__name__}: {reason}" if str(reason) else type(reason).__name__)

    thread = threading.Thread(target=request, name="wandb-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    if not outcome:
        return f"no answer within {timeout:g} s"
    if outcome[0] and "timed out" in outcome[0]:
        return f"no answer within {timeout:g} s ({outcome[0]})"
    return outcome[0]


Probe = Callable[[str, float], "str | None"]


def choose_wandb_mode(requested: str | None, environ: Mapping[str, str] = os.environ,
                      probe: Probe = probe_wandb_host, timeout: float = PROBE_TIMEOUT_S) -> tuple[str, str]:
    """(mode, note): the note says why `auto` chose offline despite a key ("" otherwise)."""
    requested = "auto" if requested is None else str(requested)
    if requested not in MODES:
        raise ValueError(f"run.wandb_mode={requested!r} is not one of {list(MODES)}")
    if requested != "auto":
        return requested, ""
    if not environ.get("WANDB_API_KEY"):
        return "offline", ""
    url = environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL
    if (why := probe(url, timeout)) is None:
        return "online", ""
    return "offline", (f"[dara] wandb: {url} did not answer from this node ({why}); logging offline "
                       "(run.wandb_mode=online forces online)")


def wandb_run_id(output_dir: str | os.PathLike) -> str:
    return f"dara-{hashlib.sha256(str(Path(output_dir).resolve()).encode()).hexdigest()[:16]}"


def wandb_env(cfg, environ: Mapping[str, str] = os.environ, mode: str | None = None) -> dict[str, str]:
    run = cfg.run
    tags = {"task": run.task, "model": run.model, "method": run.method,
            "estimator": library_estimator(str(cfg.algorithm.adv_estimator)) or cfg.algorithm.adv_estimator,
            "seed": run.seed}
    return {"WANDB_MODE": mode or choose_wandb_mode(run.get("wandb_mode", None), environ)[0],
            "WANDB_DIR": str(run.output_dir), "WANDB_RUN_ID": wandb_run_id(run.output_dir), "WANDB_RESUME": "allow",
            "WANDB_RUN_GROUP": str(run.get("recipe", None) or run.task), "WANDB_SILENT": "true",
            # comma-separated; wandb caps a tag at 64 characters
            "WANDB_TAGS": ",".join(f"{key}:{value}".replace(",", ";")[:64] for key, value in tags.items())}


def apply_wandb_env(cfg, environ: Mapping[str, str] = os.environ, probe: Probe = probe_wandb_host) -> dict[str, str]:
    """Put `wandb_env` into `ray_kwargs.ray_init.runtime_env.env_vars` (when wandb is a logger); returns it."""
    from omegaconf import open_dict

    if "wandb" not in list(cfg.trainer.logger or []):
        return {}
    mode, note = choose_wandb_mode(cfg.run.get("wandb_mode", None), environ, probe)
    if note:
        print(note, flush=True)
    env = wandb_env(cfg, environ, mode=mode)
    with open_dict(cfg):
        cfg.ray_kwargs.ray_init.runtime_env.env_vars.update(env)
    return env


def wandb_run_files(run_dir: str | os.PathLike) -> list[Path]:
    """The `.wandb` logs of a run folder (one per start), oldest first."""
    files = [*Path(run_dir).glob(OFFLINE_GLOB), *Path(run_dir).glob(ONLINE_GLOB)]
    return sorted(files, key=lambda path: m.group(0) if (m := _STARTED.search(path.parent.name)) else "")


def inspect_records(wandb_file: str | os.PathLike, timeout: float = 120) -> list[dict]:
    env = {**os.environ, "WANDB_MODE": "offline"}  # no telemetry upload from the reader
    result = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(wandb_file)],
                            capture_output=True, text=True, timeout=timeout, env=env)
    if result.returncode != 0:
        raise ValueError(f"{wandb_file}: wandb could not read the run log: {result.stderr.strip()[-500:]}")
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def _wandb_step(history: dict) -> int:
    return int(history.get("step", {}).get("num", history.get("item", {}).get("_step", 0)))


def read_offline_history(wandb_file: str | os.PathLike) -> tuple[dict, list[dict]]:
    """(run record, history rows) of one `.wandb` file; `step` of a row is the training step (STEP_METRIC, else
    `_step`); a step logged twice (redone after a resume) keeps the later row."""
    run, rows = {}, {}
    for record in inspect_records(wandb_file):
        if record.get("type") == "run":
            run = record["run"]
        elif record.get("type") == "history":
            history = record["history"]
            item = history.get("item", {})
            row = {k: v for k, v in item.items() if not k.startswith("_")}
            row["step"] = int(item[STEP_METRIC]) if STEP_METRIC in item else _wandb_step(history)
            rows[row["step"]] = row
    return run, list(rows.values())


class StepMetricWandb:
    """verl's wandb backend logging by training step: `_step` is the training step while above every `_step`
    logged before, else the next one. `floor`: the highest `_step` of earlier offline starts."""

    def __init__(self, backend, floor: int = -1):
        self._backend = backend
        backend.define_metric(STEP_METRIC)
        backend.define_metric("*", step_metric=STEP_METRIC)
        self._last = max(int(backend.run.step) - 1, int(floor))

    def log(self, data, step):
        wandb_step = int(step) if int(step) > self._last else self._last + 1
        self._backend.log({**data, STEP_METRIC: int(step)}, step=wandb_step)
        self._last = wandb_step

    def __getattr__(self, name):  # finish() and anything else verl asks of the module
        return getattr(self._backend, name)


def log_by_step_metric(tracking, run_dir: str | os.PathLike | None) -> None:
    """Replace verl's wandb backend in a `Tracking` by `StepMetricWandb` (once)."""
    loggers = getattr(tracking, "logger", None)
    backend = loggers.get("wandb") if isinstance(loggers, dict) else None
    if backend is None or isinstance(backend, StepMetricWandb) or getattr(backend, "run", None) is None:
        return
    floor = -1
    if run_dir is not None:
        current = Path(backend.run.dir).parent.resolve()
        earlier = [f for f in wandb_run_files(run_dir) if f.parent.resolve() != current]
        for path in reversed(earlier):  # the highest `_step` of the newest earlier start that logged a row
            try:
                records = inspect_records(path)
            except (ValueError, OSError, subprocess.TimeoutExpired):
                continue  # a log wandb cannot read: nothing to continue from
            if steps := [_wandb_step(r["history"]) for r in records if r.get("type") == "history"]:
                floor = max(steps)
                break
    loggers["wandb"] = StepMetricWandb(backend, floor)
