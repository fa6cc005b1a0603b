"""Run logs and the authors' CSVs as one long DataFrame: a row per (run, step), a column per metric and the run's
identity (``run``, ``method``, ``seed``, the scalars of ``run_info.json``). Inputs: docs/results.md, "Inputs RUNS
accepts"."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from dara.io import METRICS_FILE
from dara.run_folder import RUN_INFO as RUN_INFO_FILE
from dara.run_log import RunLogError, read_metrics
from dara.tracking import read_offline_history, wandb_run_files

log = logging.getLogger(__name__)
_WANDB_TAG_FIELDS = {"method": str, "seed": int, "task": str, "model": str, "estimator": str}


def run_info(run_dir: Path) -> dict:
    path = Path(run_dir) / RUN_INFO_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def scalars(info: dict) -> dict:
    return {k: v for k, v in info.items() if isinstance(v, str | int | float | bool) or v is None}


def _with_identity(frame: pd.DataFrame, info: dict, folder: str, where: str) -> pd.DataFrame:
    """The run_info fields the records lack, and ``run``; method and seed are needed."""
    frame = frame.assign(**{key: value for key, value in info.items() if key not in frame.columns})
    if "run" not in frame.columns:
        frame["run"] = info.get("run_name") or folder
    if missing := [c for c in ("method", "seed") if c not in frame.columns]:
        raise RunLogError(f"{where}: no {missing} (neither in {RUN_INFO_FILE} nor in the records)")
    return frame


def load_jsonl_run(path: Path) -> pd.DataFrame:
    """One run's metrics.jsonl; a re-logged step keeps its last record."""
    path = Path(path)
    if not (rows := read_metrics(path)):
        raise RunLogError(f"{path}: no metric records")
    frame = pd.DataFrame(rows)
    if "step" not in frame.columns:
        raise RunLogError(f"{path}: records lack the 'step' field")
    frame = _with_identity(frame, scalars(run_info(path.parent)), path.parent.name, str(path))
    kept = frame.drop_duplicates(subset=["step"], keep="last")
    if len(kept) < len(frame):
        log.warning("%s: %d duplicated step records dropped (kept the last of each)", path, len(frame) - len(kept))
    return kept.sort_values("step").reset_index(drop=True)


def load_wandb_run(run_dir: Path, files: Sequence[Path] | None = None) -> pd.DataFrame:
    """One run from its wandb files (every start, oldest first; a re-logged step keeps its last value); identity
    from run_info.json, else the run name and dara.tracking's `key:value` tags."""
    run_dir = Path(run_dir)
    files = list(files) if files is not None else wandb_run_files(run_dir)
    if not files:
        raise RunLogError(f"{run_dir}: no wandb run files (wandb/offline-run-*/run-*.wandb)")
    rows: dict[int, dict] = {}
    info: dict = {}
    for path in files:
        run, history = read_offline_history(path)
        info.update({k: v for k, v in (("run_name", run.get("display_name")), ("recipe", run.get("run_group")))
                     if v is not None})
        for key, _, value in (str(tag).partition(":") for tag in run.get("tags", [])):
            if key in _WANDB_TAG_FIELDS and value:
                info[key] = _WANDB_TAG_FIELDS[key](value)
        for row in history:
            rows.setdefault(row["step"], {}).update(row)
    if not rows:
        raise RunLogError(f"{run_dir}: the wandb run files hold no logged step")
    frame = pd.DataFrame([rows[step] for step in sorted(rows)]).drop(columns="run", errors="ignore")
    info |= scalars(run_info(run_dir))
    return _with_identity(frame, info, run_dir.name, f"{run_dir} (wandb tags)")


def load_run_folder(run_dir: Path, source: str = "auto") -> pd.DataFrame:
    """One run folder: its metrics.jsonl, or its wandb files (``wandb``, or ``auto`` without a metrics.jsonl)."""
    if source not in ("auto", "jsonl", "wandb"):
        raise ValueError(f"unknown source {source!r}; choose one of auto, jsonl, wandb")
    jsonl = Path(run_dir) / METRICS_FILE
    use_jsonl = source == "jsonl" or (source == "auto" and jsonl.exists())
    return load_jsonl_run(jsonl) if use_jsonl else load_wandb_run(run_dir)


def find_run_folders(folder: Path) -> list[Path]:
    folder = Path(folder)
    found = {p.parent for p in folder.rglob(METRICS_FILE)}
    return sorted(found | {p.parents[2] for p in folder.rglob("run-*.wandb") if p.parents[1].name == "wandb"})


def load_csv(path: Path) -> pd.DataFrame:
    frame = pd.read_csv(path)
    if "method" not in frame.columns:
        raise RunLogError(f"{path}: a results CSV needs a 'method' column; it has {list(frame.columns)}")
    return frame


def run_config(run_dir: Path) -> dict | None:
    config = run_info(run_dir).get("config")
    return config if isinstance(config, dict) else None


def load_runs(paths: str | Path | Sequence[str | Path], source: str = "auto") -> pd.DataFrame:
    from results.variants import name_variants
    runs: list[tuple[pd.DataFrame, dict | None]] = []
    for path in map(Path, [paths] if isinstance(paths, str | Path) else paths):
        if path.is_dir():
            folders = find_run_folders(path)
            if not folders:
                raise RunLogError(f"{path}: no {METRICS_FILE} or wandb run at or below this folder")
            runs.extend((load_run_folder(p, source), run_config(p)) for p in folders)
        elif path.suffix == ".wandb":
            runs.append((load_wandb_run(path.parents[2], [path]), run_config(path.parents[2])))
        elif path.suffix == ".jsonl":
            runs.append((load_jsonl_run(path), run_config(path.parent)))
        elif path.suffix == ".csv":
            runs.append((load_csv(path), None))
        elif not path.exists():
            raise RunLogError(f"{path}: no such file or folder")
        else:
            raise RunLogError(f"{path}: expected a run folder, a .jsonl, a .wandb or a .csv file")
    return pd.concat(name_variants(runs), ignore_index=True, sort=False)


def require_columns(frame: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    if missing := [c for c in columns if c not in frame.columns]:
        raise RunLogError(f"{what} needs column(s) {missing}; the data has: {', '.join(map(str, frame.columns))}")


def format_seeds(seeds: Iterable) -> str:
    """Seeds as the authors' tables write them: "0,1,2"."""
    return ",".join(map(str, sorted({int(s) for s in seeds if pd.notna(s)})))
