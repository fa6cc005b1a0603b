"""BFCL checkpoint dynamics (docs/results.md, "BFCL checkpoint dynamics from our checkpoints"): the evaluations
``EVAL_ROOT/<run_name>/step_<N>/summary.json`` (the base model as ``EVAL_ROOT/base/step_0``, step 0 of every curve
of its model) as a table per model size, method and step in the authors' columns, and the figure with the
authors' ``dynamics_export/plot_data.csv`` beside.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from dara.io import atomic_write_text
from results import plots
from results.collect import summary_row
from results.loaders import RunLogError, require_columns
from results.tables import AUTHORS_MODEL_SIZES, read_paper_table, summarise
from results.variants import BASE_METHOD, name_variants

STEP_FOLDER = re.compile(r"step_(?P<step>\d+)")
BASE = "base"
PAPER_FILE = "paper_bfcl_v4_20260920/dynamics_export/plot_data.csv"


def evaluation_folders(root: str | Path) -> list[Path]:
    """Every ``<run>/step_<N>`` folder below ``root`` that holds a summary.json, in run and step order."""
    root = Path(root)
    if not root.is_dir():
        raise RunLogError(f"{root}: no such folder of checkpoint evaluations")
    found = [p.parent for p in root.glob("*/step_*/summary.json") if STEP_FOLDER.fullmatch(p.parent.name)]
    return sorted(found, key=lambda p: (p.parent.name, int(STEP_FOLDER.fullmatch(p.name)["step"])))


def _evaluation_row(folder: Path) -> tuple[pd.DataFrame, dict | None]:
    row, config = summary_row(folder / "summary.json")
    if row["bench"] != "bfcl":
        raise RunLogError(f"{folder}: not a BFCL evaluation (bench={row['bench']!r})")
    step = int(STEP_FOLDER.fullmatch(folder.name)["step"])
    if row.get("step") is not None and int(row["step"]) != step:
        raise RunLogError(f"{folder}: its summary scores step {row['step']}, its folder names step {step}")
    if row["missing_cases"]:
        raise RunLogError(f"{folder}: {row['missing_cases']} BFCL cases unscored; finish the evaluation first")
    row["step"] = step
    row.setdefault("model_size", AUTHORS_MODEL_SIZES.get(str(row.get("model")), row.get("model")))
    return pd.DataFrame([row]), config


def checkpoint_scores(root: str | Path) -> pd.DataFrame:
    """One row per checkpoint evaluation: the run's identity, the step and its BFCL scores (results.collect's
    columns); variants of a method apart, each with the method it was trained as (``base_method``)."""
    folders = evaluation_folders(root)
    if not folders:
        raise RunLogError(f"{root}: no <run>/step_<N>/summary.json below it")
    scores = pd.concat(name_variants([_evaluation_row(f) for f in folders]), ignore_index=True, sort=False)
    trained_as = scores[BASE_METHOD] if BASE_METHOD in scores.columns else pd.Series(index=scores.index, dtype=object)
    return scores.assign(**{BASE_METHOD: trained_as.fillna(scores["method"])})


def checkpoint_table(scores: pd.DataFrame, metrics: Sequence[str], group_by: Sequence[str] = ("model_size",)):
    """Per group, method and step: n, seeds, mean and sd of each metric; the base model's step-0 scores
    start every method's curve of its model that has no step 0 of its own."""
    require_columns(scores, [*group_by, "method", BASE_METHOD, "step", *metrics], "checkpoint dynamics")
    base = scores[scores["method"] == BASE]
    trained = scores[scores["method"] != BASE]
    starts = []
    for key, part in trained.groupby([*group_by, "method", BASE_METHOD], sort=False, dropna=False):
        if (part["step"] == 0).any():
            continue
        mask = pd.Series(True, index=base.index)
        for column, value in zip(group_by, key[: len(group_by)], strict=True):
            mask &= base[column] == value
        starts.append(base[mask].assign(method=key[-2], **{BASE_METHOD: key[-1]}))
    frame = pd.concat([trained, *starts], ignore_index=True, sort=False) if starts else trained
    if frame.empty:
        raise RunLogError("checkpoint dynamics: no evaluation of a trained checkpoint")
    table = summarise(frame, [*group_by, "method", BASE_METHOD, "step"], metrics)
    return table.sort_values([*group_by, "method", "step"], kind="stable").reset_index(drop=True)


def build_dynamics(root: str | Path, metrics: Sequence[str], out_prefix: str | Path, *,
                   paper: str | Path | None, group_by: Sequence[str] = ("model_size",)) -> list[Path]:
    """Our checkpoint table (``<prefix>.csv``, the authors' columns) and the figure (``<prefix>.png``/``.pdf``)."""
    table = checkpoint_table(checkpoint_scores(root), metrics, group_by)
    theirs = None
    if paper is not None:
        if not Path(paper).is_file():
            raise RunLogError(f"--paper {paper}: no such file (the authors' {PAPER_FILE})")
        theirs = read_paper_table(paper)
    written = plots.plot_checkpoints(table, metrics, out_prefix, group_by=group_by, paper=theirs)
    csv = Path(f"{out_prefix}.csv")
    atomic_write_text(csv, table.to_csv(index=False, lineterminator="\n"))
    return [csv, *written]
