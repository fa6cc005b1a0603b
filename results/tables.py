"""Seed tables: mean and sample sd (ddof=1) per group and metric in the authors' columns (``n``, ``seeds``,
``<metric>_mean``, ``<metric>_sd``); their method names: docs/results.md, "Method labels"."""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from results.loaders import RunLogError, format_seeds, load_runs, require_columns
from results.variants import check_one_configuration

_OPS = {"<=": operator.le, ">=": operator.ge, "==": operator.eq, "!=": operator.ne, "<": operator.lt, ">": operator.gt}
_CONDITION = re.compile(r"^\s*(?P<col>[^<>=!\s]+)\s*(?P<op><=|>=|==|!=|<|>)\s*(?P<value>.+?)\s*$")
AUTHORS_METHODS = {"dara": ("DARA-Sym", "dara_sym")}  # the authors' names that are not ours: what, ours
AUTHORS_NOTE = "The authors' `dara` is DARA-Sym: their tool-calling code of that time scaled both signs."
# The authors' names -> ours (SOURCE.md: `gd2po_hard` is GD2PO-Hard as the paper ran it, `gdpo_saw` GDPO with SAW).
AUTHORS_TO_OURS = {"dara": "dara_sym", "gd2po_hard": "gd2po_hard_after", "gdpo_saw": "saw"}
OURS_TO_AUTHORS = {ours: theirs for theirs, ours in AUTHORS_TO_OURS.items()}
AUTHORS_MODEL_SIZES = {"qwen2.5-1.5b-instruct": "1.5B", "qwen2.5-3b-instruct": "3B"}
# Names only the authors' files use: a table holding one is in their naming (their `rvpo` is ours too).
AUTHORS_ONLY = frozenset({"dara", "gdpo_saw"})
_AT_STEP = re.compile(r"^(?P<metric>.+)@(?P<step>\d+)$")  # "val_format@100": a curve value at one step


def parse_condition(text: str) -> tuple[str, str, object]:
    if not (match := _CONDITION.match(text)):
        raise ValueError(f"cannot read condition {text!r}; write it as COLUMN OP VALUE, OP one of {list(_OPS)}")
    raw = match["value"]
    if raw in ("True", "False"):
        return match["col"], match["op"], raw == "True"
    try:
        return match["col"], match["op"], float(raw)
    except ValueError:
        return match["col"], match["op"], raw.strip("'\"")


def drop_rows(frame: pd.DataFrame, condition: str) -> pd.DataFrame:
    """Drop the rows for which ``condition`` holds; a row without a value is kept (exclusion needs evidence)."""
    col, op, value = parse_condition(condition)
    require_columns(frame, [col], f"--drop-if {condition!r}")
    holds = frame[col].map(lambda x: bool(pd.notna(x) and _OPS[op](x, value))).astype(bool)
    return frame[~holds].reset_index(drop=True)


def attach_curve_value(frame: pd.DataFrame, curves: pd.DataFrame, spec: str) -> pd.DataFrame:
    """Add column METRIC@STEP: each run's curve value at that step, matched on the identity columns both have."""
    if not (match := _AT_STEP.match(spec)):
        raise ValueError(f"--attach expects METRIC@STEP (e.g. val_format@100), got {spec!r}")
    metric, step = match["metric"], int(match["step"])
    require_columns(curves, ["step", metric], f"--attach {spec}")
    keys = [c for c in ("model_size", "task", "model", "method", "seed") if c in frame.columns and c in curves.columns]
    if not {"method", "seed"} <= set(keys):
        raise RunLogError(f"--attach {spec}: both tables need 'method' and 'seed' columns to be matched")
    at_step = curves.loc[curves["step"] == step, [*keys, metric]].dropna(subset=[metric])
    if at_step.duplicated(keys).any():
        raise RunLogError(f"--attach {spec}: several curve rows per run at step {step} (keys {keys})")
    return frame.merge(at_step.rename(columns={metric: spec}), on=keys, how="left")


def summarise(frame: pd.DataFrame, group_by: Sequence[str], metrics: Sequence[str], *,
              partial: bool = False) -> pd.DataFrame:
    """Mean and sample sd of each metric over each group's runs; a missing value is an error unless ``partial``."""
    require_columns(frame, [*group_by, *metrics], "table")
    check_one_configuration(frame, group_by, "table")
    rows = []
    for key, part in frame.groupby(list(group_by), sort=False, dropna=False):
        row = {**dict(zip(group_by, key, strict=True)), "n": len(part),
               "seeds": format_seeds(part["seed"]) if "seed" in part.columns else ""}
        for metric in metrics:
            values = part[metric].dropna().astype(float).to_numpy()
            if len(values) < len(part) and not partial:
                raise RunLogError(f"table: group {row} has {len(part) - len(values)} run(s) without {metric!r}")
            row[f"{metric}_mean"] = float(values.mean()) if len(values) else math.nan
            row[f"{metric}_sd"] = float(values.std(ddof=1)) if len(values) > 1 else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def select_step(frame: pd.DataFrame, step: str | int | None, metrics: Sequence[str]) -> pd.DataFrame:
    """Curves -> one row per run: the rows at ``step``, or each run's last with all metrics (``'last'``)."""
    if step is None or "step" not in frame.columns:
        return frame
    run_key = [c for c in ("run", "model_size", "method", "seed") if c in frame.columns]
    have = frame.dropna(subset=list(metrics))
    if str(step) == "last":
        return have.sort_values("step").groupby(run_key, sort=False, dropna=False).tail(1).reset_index(drop=True)
    return have[have["step"] == int(step)].reset_index(drop=True)


def read_paper_table(path: str | Path) -> pd.DataFrame:
    table = pd.read_csv(path)
    return table.rename(columns={c: c[: -len("_std")] + "_sd" for c in table.columns if c.endswith("_std")})


def markdown_table(frame: pd.DataFrame, empty: str = "", float_format: str = "{:.4g}") -> str:
    def cell(value) -> str:
        return empty if pd.isna(value) else float_format.format(value) if isinstance(
            value, float | np.floating) else str(value)

    lines = ["| " + " | ".join(map(str, frame.columns)) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def mean_sd(mean: float, sd: float, digits: int, pm: str) -> str:
    plus = f"{pm}{sd:.{digits}f}" if sd is not None and not pd.isna(sd) else ""
    return "–" if mean is None or pd.isna(mean) else f"{mean:.{digits}f}{plus}"


def method_label(method) -> str:
    return f"{method} ({AUTHORS_METHODS[method][0]})" if method in AUTHORS_METHODS else str(method)


def with_paper(summary: pd.DataFrame, paper: pd.DataFrame, group_by: Sequence[str], metrics: Sequence[str]):
    """Add ``paper_<metric>_mean``/``_sd`` and ``paper_n`` beside ours; unless ours is in the authors' naming, their
    methods are matched under our names (AUTHORS_TO_OURS)."""
    if "method" in paper.columns and "method" in summary.columns and not set(map(str, summary["method"])) & AUTHORS_ONLY:
        paper = paper.assign(method=paper["method"].replace(AUTHORS_TO_OURS))
    if not (keys := [c for c in group_by if c in paper.columns]):
        raise RunLogError(f"paper table shares none of the group columns {list(group_by)}")
    if not (cols := [c for m in metrics for c in (f"{m}_mean", f"{m}_sd") if c in paper.columns]):
        raise RunLogError(f"paper table has none of the metrics {list(metrics)} (as <metric>_mean columns)")
    cols += ["n"] if "n" in paper.columns and "n" not in keys else []
    theirs = paper[[*keys, *cols]].rename(columns={c: f"paper_{c}" for c in cols})
    return summary.merge(theirs, on=keys, how="left")


def render(summary: pd.DataFrame, group_by: Sequence[str], metrics: Sequence[str], fmt: str, digits: int = 2) -> str:
    if fmt == "csv":
        return summary.to_csv(index=False, lineterminator="\n")
    pm = " ± " if fmt == "md" else " $\\pm$ "
    header = [*group_by, "n"]
    for m in metrics:
        header.append(m)
        if f"paper_{m}_mean" in summary.columns:
            header.append(f"{m} (paper)")
    body = []
    for _, row in summary.iterrows():
        cells = [method_label(row[c]) if c == "method" else str(row[c]) for c in group_by] + [str(row["n"])]
        for m in metrics:
            cells.append(mean_sd(row[f"{m}_mean"], row[f"{m}_sd"], digits, pm))
            if f"paper_{m}_mean" in summary.columns:
                cells.append(mean_sd(row[f"paper_{m}_mean"], row.get(f"paper_{m}_sd", math.nan), digits, pm))
        body.append(cells)
    if fmt == "md":
        authors = "method" in group_by and summary["method"].isin(list(AUTHORS_METHODS)).any()
        return markdown_table(pd.DataFrame(body, columns=header)) + (f"\n{AUTHORS_NOTE}\n" if authors else "")
    if fmt != "latex":
        raise ValueError(f"unknown table format {fmt!r}; choose md, csv or latex")

    def esc(text: str) -> str:
        return text.replace("_", "\\_").replace("%", "\\%")

    lines = ["\\begin{tabular}{" + "l" * len(group_by) + "r" * (len(header) - len(group_by)) + "}", "\\toprule",
             " & ".join(esc(h) for h in header) + " \\\\", "\\midrule"]
    lines += [" & ".join(esc(c) if i < len(group_by) else c for i, c in enumerate(cells)) + " \\\\" for cells in body]
    return "\n".join([*lines, "\\bottomrule", "\\end{tabular}"]) + "\n"


def build_table(runs: Sequence[str | Path], metrics: Sequence[str], *, group_by: Sequence[str] = ("method",),
                step: str | int | None = None, drop_if: Sequence[str] = (),
                attach: Sequence[tuple[str | Path, str]] = (), paper: str | Path | None = None) -> pd.DataFrame:
    frame = load_runs(runs)
    for curve_path, spec in attach:
        frame = attach_curve_value(frame, load_runs([curve_path]), spec)
    frame = select_step(frame, step, metrics)
    for condition in drop_if:
        frame = drop_rows(frame, condition)
    summary = summarise(frame, group_by, metrics)
    if paper is not None:
        summary = with_paper(summary, read_paper_table(paper), group_by, metrics)
    return summary
