"""`python -m results report SWEEP_DIR --out DIR`: one static page (DIR/index.html + PNGs) for a sweep: per recipe
the final and threshold-step tables beside the authors' values, the curves and DARA channels with seed bands, and a
provenance footer (docs/results.md, "The report page"). Inputs: run folders, per-run CSVs and long-format curve
CSVs; summary CSVs (`<metric>_mean` columns) are reference tables, not inputs.
"""

from __future__ import annotations

import hashlib
import html
import json
import logging
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

import dara
from dara.io import atomic_write_text
from results import plots, tables, thresholds
from results.loaders import RunLogError, find_run_folders, load_csv, load_run_folder, run_config
from results.variants import name_variants

log = logging.getLogger(__name__)
DEFAULT_REFERENCE = dara.AUTHORS_REFERENCE
NOT_IN_PAPER = "not in the paper"
# The authors' names for our models and methods (their files: `dara` is DARA-Sym, see SOURCE.md).
MODEL_SIZES = tables.AUTHORS_MODEL_SIZES
# Our training-curve metrics and the authors' columns for the same quantity (tool calling).
AUTHOR_CURVES = {"reward/format/mean": "train_format", "reward/correctness/mean": "train_correctness"}
AUTHOR_CURVE_FILE = "reference/training_dynamics.csv"
AUTHOR_CURVE_TASKS = ("toolrl",)


@dataclass(frozen=True)
class PaperTable:
    """A table of the paper: the per-run columns it summarises and the authors' summary file."""

    title: str
    metrics: tuple[str, ...]
    group_by: tuple[str, ...]
    paper: str
    drop_if: tuple[str, ...] = ()


PAPER_TABLES = (
    PaperTable("Table 1: BFCL v4 at step 100 (runs with step-100 validation format >= 0.8)",
               ("live_accuracy", "non_live_accuracy", "multi_turn_accuracy", "average_accuracy", "average_format"),
               ("model_size", "method", "step"), "paper_bfcl_v4_20260920/final_method_results.csv",
               ("retained==False",)),
    PaperTable("BFCL v4 per model, all seeds (reference/all_seeds.csv)",
               ("v4_live", "v4_non_live", "v4_multi_turn", "v4_average", "v4_average_format"),
               ("model_size", "method"), "reference/all_seeds.csv"),
)


LENGTH_COLUMNS = re.compile(r"average_(length|length_le_\d+|think_words)")


@dataclass
class Section:
    title: str
    blocks: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- inputs
def _csv_kind(frame: pd.DataFrame) -> str:
    """'summary' (<metric>_mean columns), 'curves' (several steps per run) or 'per_run'."""
    if any(str(c).endswith("_mean") for c in frame.columns):
        return "summary"
    keys = [c for c in ("model_size", "task", "model", "method", "seed") if c in frame.columns]
    if "step" in frame.columns and frame.duplicated(keys).any():
        return "curves"
    return "per_run"


def discover(inputs: list[Path], source: str = "auto") -> dict[str, list]:
    """{'runs': [frames], 'per_run': [(path, frame)], 'curves': [(path, frame)]} from folders and files."""
    found: dict[str, list] = {"runs": [], "per_run": [], "curves": [], "skipped": []}
    runs: list[tuple[pd.DataFrame, dict | None]] = []
    for path in map(Path, inputs):
        if not path.exists():
            raise RunLogError(f"{path}: no such file or folder")
        csvs = sorted(path.rglob("*.csv")) if path.is_dir() else [path]
        for run_dir in find_run_folders(path) if path.is_dir() else []:
            try:
                runs.append((load_run_folder(run_dir, source), run_config(run_dir)))
            except RunLogError as error:  # e.g. a run that failed before its first step: left out, named
                log.warning("left out of the report: %s", error)
                found["skipped"].append(str(error))
        for csv in csvs:
            if csv.suffix != ".csv":
                raise RunLogError(f"{csv}: expected a folder or a .csv file")
            frame = _testbed_names(pd.read_csv(csv))
            if "method" not in frame.columns:
                continue
            kind = _csv_kind(frame)
            if kind != "summary":
                found[kind].append((csv, frame))
    found["runs"] = name_variants(runs)  # variants of a method apart (results.variants)
    if not (found["runs"] or found["per_run"] or found["curves"]):
        raise RunLogError(f"nothing to report in {[str(p) for p in inputs]}: no run folders, per-run or curve CSVs")
    return found


def _testbed_names(frame: pd.DataFrame) -> pd.DataFrame:
    """The CPU testbed's CSVs (results/testbed/) name the method `estimator` and the channel instruments
    `density/<c>`, `weight/<c>`: give them the training run's names."""
    if "method" not in frame.columns and "estimator" in frame.columns:
        frame = frame.rename(columns={"estimator": "method"})
    if not any(str(c).startswith("dara/") for c in frame.columns):
        frame = frame.rename(columns={c: f"dara/{c}" for c in frame.columns
                                      if str(c).startswith(("density/", "weight/"))})
    return frame


def _with_author_names(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy with model_size (from our model names) and the authors' method names, to look their values up."""
    frame = _with_model_size(frame)
    if "method" in frame.columns:
        frame["method"] = frame["method"].map(lambda m: tables.OURS_TO_AUTHORS.get(m, m))
    return frame


def _with_model_size(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy with model_size from our model names (where the frame has none)."""
    frame = frame.copy()
    if "model_size" not in frame.columns and "model" in frame.columns:
        frame["model_size"] = frame["model"].map(MODEL_SIZES)
    return frame


# ----------------------------------------------------------------------------- html pieces
def _cell(mean, sd, digits: int = 2, n=None) -> str:
    if mean is None or pd.isna(mean):
        return f'<span class="na">{NOT_IN_PAPER}</span>'
    text = f"{float(mean):.{digits}f}"
    text += f" ± {float(sd):.{digits}f}" if sd is not None and not pd.isna(sd) else ""
    return text + (f" (n={int(n)})" if n is not None and not pd.isna(n) else "")


def _text_cell(column: str, value) -> str:
    """A table cell's text: methods as `results table` names them (the authors' dara labelled DARA-Sym)."""
    return tables.method_label(value) if column == "method" else str(value)


def summary_html(summary: pd.DataFrame, group_by, metrics, paper: bool, caption: str) -> str:
    """mean ± sd per metric, the authors' value (with their n, the seeds behind it) in the next column when
    `paper`."""
    head = [*group_by, "n", "seeds"]
    for m in metrics:
        head += [m, f"{m} (paper)"] if paper else [m]
    rows = []
    for _, row in summary.iterrows():
        cells = [html.escape(_text_cell(c, row[c])) for c in group_by]
        cells += [str(row["n"]), html.escape(str(row["seeds"]))]
        for m in metrics:
            cells.append(_cell(row[f"{m}_mean"], row[f"{m}_sd"]).replace(NOT_IN_PAPER, "–"))
            if paper:
                cells.append(("paper", _cell(row.get(f"paper_{m}_mean"), row.get(f"paper_{m}_sd"),
                                             n=row.get("paper_n"))))
        rows.append("<tr>" + "".join(f'<td class="paper">{c[1]}</td>' if isinstance(c, tuple) else f"<td>{c}</td>"
                                     for c in cells) + "</tr>")
    header = "".join(f'<th class="paper" title="{html.escape(h)}">paper</th>' if h.endswith(" (paper)")
                     else f"<th>{html.escape(h)}</th>" for h in head)
    return (f'<div class="scroll"><table class="summary"><caption>{html.escape(caption)}</caption><thead><tr>{header}'
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div>")


def plain_html(frame: pd.DataFrame, caption: str, css: str = "steps") -> str:
    header = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    body = []
    for _, row in frame.iterrows():
        cells = []
        for column, value in row.items():
            text = "never" if value is None or pd.isna(value) else _text_cell(column, value)
            cells.append(f'<td class="na">{text}</td>' if text in (NOT_IN_PAPER, "never") else f"<td>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="scroll"><table class="{css}"><caption>{html.escape(caption)}</caption><thead><tr>{header}'
            f"</tr></thead><tbody>{''.join(body)}</tbody></table></div>")


def figure_html(path: Path, out_dir: Path, caption: str) -> str:
    rel = html.escape(os.path.relpath(path, out_dir))
    return f'<figure><img src="{rel}" alt="{html.escape(caption)}"><figcaption>{html.escape(caption)}</figcaption></figure>'


# ----------------------------------------------------------------------------- figures
def png_only(written: list[Path]) -> Path:
    """The PNG of a figure plots wrote; the page shows PNGs only, so the rest is deleted."""
    for path in written:
        if path.suffix != ".png":
            path.unlink()
    return next(path for path in written if path.suffix == ".png")


# ----------------------------------------------------------------------------- sections
def _curve_metrics(frame: pd.DataFrame) -> list[str]:
    ours = sorted(c for c in frame.columns if str(c).startswith("reward/") and str(c).endswith("/mean"))
    return ours or [c for c in ("train_format", "train_correctness", "val_format") if c in frame.columns]


def _threshold_metric(frame: pd.DataFrame, requested: str | None) -> str | None:
    if requested:
        if requested not in frame.columns:
            raise RunLogError(f"--threshold-metric {requested!r} is not logged; columns: {list(frame.columns)[:30]}")
        return requested
    return next((c for c in ("reward/format/mean", "train_format") if c in frame.columns), None)


def _group_columns(frame: pd.DataFrame) -> list[str]:
    varying = [c for c in ("study", "group_size") if c in frame.columns and frame[c].nunique() > 1]
    if "model_size" in frame.columns:
        return ["model_size", *varying]
    return (["model"] if "model" in frame.columns else []) + varying


def _author_curves(reference: Path, frame: pd.DataFrame) -> pd.DataFrame | None:
    """The authors' training curves when our runs are of a task they published curves for."""
    path = reference / AUTHOR_CURVE_FILE
    if "task" not in frame.columns or not set(frame["task"]) <= set(AUTHOR_CURVE_TASKS) or not path.exists():
        return None
    return load_csv(path)


def _final_table(frame, metrics, group_by, authors, is_authors) -> str:
    last = tables.select_step(frame, "last", metrics)
    keys = [*group_by, "method", "step"]
    summary = tables.summarise(last, keys, metrics)
    order = frame[[*group_by, "method"]].drop_duplicates()  # the data's own order, as the other tables
    summary = order.merge(summary, on=[*group_by, "method"], how="inner")
    caption = "each run's last logged step: mean ± sd over seeds"
    if is_authors:
        return summary_html(summary, keys, metrics, False, caption + " (this input is the authors' published data)")
    named = _with_author_names(summary)
    summary["_size"], summary["_method"] = named.get("model_size"), named["method"]
    theirs_cols = {AUTHOR_CURVES[m]: m for m in metrics if m in AUTHOR_CURVES}
    if authors is not None and theirs_cols and "model_size" in named.columns:
        at = authors[authors["step"].isin(set(summary["step"]))]
        paper = tables.summarise(at, ["model_size", "method", "step"], list(theirs_cols))
        paper = paper.rename(columns={f"{t}_{s}": f"paper_{m}_{s}" for t, m in theirs_cols.items() for s in ("mean", "sd")})
        paper = paper.rename(columns={"model_size": "_size", "method": "_method", "n": "paper_n"}).drop(columns="seeds")
        summary = summary.merge(paper, on=["_size", "_method", "step"], how="left")
    where = ("the authors' training curves at that step" if authors is not None
             else "no published values for this task")
    return summary_html(summary, keys, metrics, True, f"{caption}; paper: {where}")


def _threshold_table(frame, metric, threshold, group_by, authors, is_authors) -> pd.DataFrame:
    steps = thresholds.threshold_steps(frame, metric, threshold, group_by=group_by)
    if is_authors:
        return steps
    theirs = AUTHOR_CURVES.get(metric)
    paper_col = f"paper step ({theirs})" if theirs else "paper step"
    steps[paper_col] = NOT_IN_PAPER
    if authors is not None and theirs in (authors.columns if authors is not None else ()):
        named = _with_author_names(steps)
        if "model_size" in named.columns:
            paper = thresholds.threshold_steps(authors, theirs, threshold, group_by=["model_size"])
            lookup = {(r.model_size, r.method): r.step for r in paper.itertuples()}
            for i, (size, method) in enumerate(zip(named["model_size"], named["method"], strict=True)):
                if (size, method) in lookup:
                    value = lookup[(size, method)]
                    steps.loc[steps.index[i], paper_col] = "never" if pd.isna(value) else str(int(value))
    return steps


def curves_section(title: str, frame: pd.DataFrame, out_dir: Path, slug: str, reference: Path, *,
                   threshold: float, threshold_metric: str | None, is_authors: bool) -> Section:
    section = Section(title)
    group_by = _group_columns(frame)
    metrics = _curve_metrics(frame)
    metric = _threshold_metric(frame, threshold_metric)
    authors = None if is_authors else _author_curves(reference, frame)
    if metrics:
        section.blocks.append(_final_table(frame, metrics, group_by, authors, is_authors))
    crossings = None
    if metric:
        crossings = _threshold_table(frame, metric, threshold, group_by, authors, is_authors)
        section.blocks.append(plain_html(crossings, f"first step the seed-median {metric} reaches {threshold:g} "
                                                    "(never = not within the run)"))
    if metrics:
        path = png_only(plots.plot_curves(frame, metrics, out_dir / f"{slug}_curves", group_by=group_by,
                                          crossings=(metric, threshold, crossings) if metric else None))
        section.blocks.append(figure_html(path, out_dir, "training curves: seed median (line), min-max over seeds "
                                                         "(band); dashed = the threshold crossing"))
    columns = plots.channel_columns(frame)
    if columns["density"] or columns["weight"]:
        path = png_only(plots.plot_channels(frame, out_dir / f"{slug}_channels", group_by=group_by))
        section.blocks.append(figure_html(path, out_dir, "DARA per channel: active-group density pi_k and weight "
                                                         "w_k (seed median, min-max band)"))
    return section


def per_run_section(path: Path, frame: pd.DataFrame, reference: Path) -> Section:
    """A per-run table summarised like the paper's table it matches (PAPER_TABLES), the paper beside; its
    methods keep their names (tables.with_paper finds the authors' rows under our names)."""
    frame = _with_model_size(frame)
    spec = next((t for t in PAPER_TABLES if set(t.metrics) <= set(frame.columns)), None)
    if spec is None:
        group_by = [c for c in ("study", "group_size", "model_size", "model", "method", "step") if c in frame.columns]
        final = [c for c in frame.columns if str(c).startswith(("final_", "steps_to"))]
        metrics = [c for c in (final or frame.columns) if pd.api.types.is_numeric_dtype(frame[c])
                   and c not in {*group_by, "seed", "n"} and frame[c].notna().any()]
        summary = tables.summarise(frame, group_by, metrics, partial=True)
        return Section(f"{path.name}: per-run table",
                       [summary_html(summary, group_by, metrics, False, f"mean ± sd over seeds ({NOT_IN_PAPER})")])
    for condition in spec.drop_if:
        if tables.parse_condition(condition)[0] in frame.columns:
            frame = tables.drop_rows(frame, condition)
    group_by = [c for c in spec.group_by if c in frame.columns]
    # the three-reward length diagnostics of our BFCL evaluations (results.collect), where every run has them
    extra = [c for c in frame.columns if LENGTH_COLUMNS.fullmatch(str(c)) and frame[c].notna().all()]
    metrics = [*spec.metrics, *extra]
    summary = tables.summarise(frame, group_by, metrics)
    paper = reference / spec.paper
    if paper.exists():
        summary = tables.with_paper(summary, tables.read_paper_table(paper), group_by, metrics)
    caption = f"rebuilt from {path.name}: mean ± sd over seeds; paper = {spec.paper} (n = its seeds)"
    return Section(f"{spec.title}", [summary_html(summary, group_by, metrics, True, caption)])


# ----------------------------------------------------------------------------- provenance
def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]


def _commit() -> str:
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=dara.PROJECT_ROOT).stdout.strip()

    head = git("rev-parse", "--short=12", "HEAD") or "unknown (not a git checkout)"
    return head + (" + uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else "")


# algorithm.dara.dead_channel_weight: the weight DARA applies and logs for a channel active in no group
DEAD_CHANNEL_CONVENTIONS = {"1": "1 (the paper's text)", "w_max": "w_max (the authors' code)"}


def _module_line(run_dir: Path) -> str | None:
    """The run's module of estimators of its own, as its run_info.json records it."""
    info_path = run_dir / "run_info.json"
    try:
        module = json.loads(info_path.read_text()).get("estimator_module") if info_path.exists() else None
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(module, dict):
        return None
    return (f"estimator module: {module.get('path')} (sha256 {str(module.get('sha256', ''))[:12]}, estimators "
            f"{', '.join(module.get('estimators') or [])}) in run {run_dir.name}")


def run_provenance(run_dirs: list[Path]) -> list[str]:
    """Per run: its config file; the data cards and grader its config names (deduplicated); which dead-channel
    weight convention its DARA weights used; the module of estimators of its own, if any."""
    configs, cards, graders, dead, modules = [], {}, set(), {}, []
    for run_dir in run_dirs:
        config = next((p for p in (run_dir / "verl_config.yaml", run_dir / ".hydra" / "config.yaml") if p.exists()), None)
        if config is None:
            continue
        configs.append(f"{config} (sha256 {_sha256(config)})")
        cfg = OmegaConf.load(config)
        convention = str(OmegaConf.select(cfg, "algorithm.dara.dead_channel_weight", default=None) or "1")
        dead.setdefault(convention, []).append(run_dir.name)
        line = _module_line(run_dir)
        if line:
            modules.append(line)
        for key in ("data.train_files", "data.val_files"):
            files = OmegaConf.select(cfg, key, default=None)
            for data in [files] if isinstance(files, str) else list(files or []):
                card = Path(data).parent / "data_card.json"
                if card.exists():
                    cards[str(card)] = _sha256(card)
        reward = OmegaConf.select(cfg, "reward.custom_reward_function", default=None)
        manager = OmegaConf.select(cfg, "reward.reward_manager.name", default=None)
        if reward is not None and reward.get("path"):
            graders.add(f"{reward.path}:{reward.get('name')} via reward manager {manager}")
    lines = [f"config: {c}" for c in configs]
    lines += [f"data card: {card} (sha256 {sha})" for card, sha in cards.items()] or ["data card: none found"]
    lines += [f"grader: {g}" for g in sorted(graders)] or ["grader: not recorded in the run configs"]
    lines += [f"dead-channel weight (a DARA channel active in no group; its advantage is 0 either way): "
              f"{DEAD_CHANNEL_CONVENTIONS.get(c, c)} in {len(names)} run(s): {', '.join(sorted(names))}"
              for c, names in sorted(dead.items())]
    return lines + modules


def source_items(source: Path) -> list[str]:
    """The bullet items of a SOURCE.md, each whole (its continuation lines joined)."""
    items: list[str] = []
    for line in source.read_text(encoding="utf-8").splitlines():
        if line.startswith("- "):
            items.append(line[2:].strip())
        elif items and line.startswith("  ") and line.strip():
            items[-1] += " " + line.strip()
    return items


def _reference_provenance(reference: Path, inputs: list[Path]) -> list:
    """Where the paper's values come from: a link to the reference's SOURCE.md and its source, commit and
    method-name notes quoted whole."""
    source = reference / "SOURCE.md"
    if not source.exists():
        return [f"the authors' published files: {reference} (no SOURCE.md there)"]
    quoted = [item for item in source_items(source)
              if item.split(":", 1)[0] in ("Source", "Commits", "Method names in these files")]
    lines: list = [("the authors' published files, described in SOURCE.md: ", source.resolve().as_uri(), str(source))]
    lines += [f"SOURCE.md: {item}" for item in quoted]
    if any(str(Path(p).resolve()).startswith(str(reference.resolve())) for p in inputs):
        lines.append("grader: the authors' own evaluation (BFCL v4 and their training-time reward), as published")
    return lines


# ----------------------------------------------------------------------------- page
CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1500px;padding:0 1em;color:#222;line-height:1.35}
h1{font-size:1.5em} h2{font-size:1.2em;border-bottom:1px solid #ccc;margin-top:2em}
.scroll{overflow-x:auto} table{border-collapse:collapse;margin:1em 0;font-size:.8em}
caption{text-align:left;color:#555;padding:.3em 0} table.steps{min-width:32em}
th,td{border:1px solid #ddd;padding:.2em .45em;text-align:right;white-space:nowrap} th{background:#f4f4f4}
th.paper,td.paper{background:#f3f7fc}
td:first-child,th:first-child{text-align:left} .na{color:#999;font-style:italic}
figure{margin:1em 0} img{max-width:100%;border:1px solid #eee} figcaption{color:#555;font-size:.85em}
footer{margin-top:3em;border-top:1px solid #ccc;font-size:.8em;color:#444} footer li{word-break:break-all}
"""


def _provenance_item(line) -> str:
    """A footer line: text, or (text, href, link text) for a linked file."""
    if isinstance(line, tuple):
        text, href, label = line
        return f'{html.escape(text)}<a href="{html.escape(href)}">{html.escape(label)}</a>'
    return html.escape(line)


def render_page(title: str, sections: list[Section], provenance: list) -> str:
    toc = "".join(f'<li><a href="#s{i}">{html.escape(s.title)}</a></li>' for i, s in enumerate(sections))
    body = "".join(f'<section id="s{i}"><h2>{html.escape(s.title)}</h2>{"".join(s.blocks)}</section>'
                   for i, s in enumerate(sections))
    foot = "".join(f"<li>{_provenance_item(line)}</li>" for line in provenance)
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1><nav><ul>{toc}</ul></nav>{body}"
            f'<footer><h2>Provenance</h2><ul class="provenance">{foot}</ul></footer></body></html>\n')


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text).strip("_").lower()[:60] or "section"


def build_report(inputs: list[str | Path], out_dir: str | Path, *, reference: str | Path = DEFAULT_REFERENCE,
                 threshold: float = 0.8, threshold_metric: str | None = None, source: str = "auto") -> Path:
    """Write out_dir/index.html and its PNGs for the runs and CSVs in `inputs`; returns the page's path."""
    inputs, out_dir, reference = [Path(p) for p in inputs], Path(out_dir), Path(reference)
    if not reference.is_dir():
        raise RunLogError(f"--reference {reference}: no such folder (the authors' published files, "
                          "reference/dara_authors in the repository)")
    out_dir.mkdir(parents=True, exist_ok=True)
    found = discover(inputs, source)
    sections: list[Section] = []
    for path, frame in found["per_run"]:
        sections.append(per_run_section(path, frame, reference))
    for path, frame in found["curves"]:
        authors = str(path.resolve()).startswith(str(reference.resolve()))
        title = f"{'authors' if authors else 'curves'}: {path.name}"
        sections.append(curves_section(title, frame, out_dir, _slug(f"{path.parent.name}_{path.stem}"), reference,
                                       threshold=threshold, threshold_metric=threshold_metric, is_authors=authors))
    run_dirs = []
    if found["runs"]:
        runs = pd.concat(found["runs"], ignore_index=True, sort=False)
        runs["recipe"] = runs["recipe"].fillna(runs["task"]) if "recipe" in runs.columns else runs.get("task", "runs")
        for recipe, part in runs.groupby("recipe", sort=True):
            part = part.dropna(axis=1, how="all")
            sections.append(curves_section(f"recipe {recipe}: {part['run'].nunique()} runs", part, out_dir,
                                           _slug(f"recipe_{recipe}"), reference, threshold=threshold,
                                           threshold_metric=threshold_metric, is_authors=False))
        for path in inputs:
            run_dirs += find_run_folders(path) if path.is_dir() else []
    if found["skipped"]:
        sections.append(Section("runs left out", [plain_html(pd.DataFrame({"reason": found["skipped"]}),
                                                             "run folders that could not be read")]))
    provenance = [f"commit: {_commit()}"]
    provenance += [f"input: {p}" + (f" (sha256 {_sha256(p)})" if p.is_file() else "") for p in inputs]
    provenance += [f"input table: {p} (sha256 {_sha256(p)})" for kind in ("per_run", "curves") for p, _ in found[kind]]
    provenance += run_provenance(run_dirs) if run_dirs else []
    provenance += _reference_provenance(reference, inputs)
    page = render_page(f"DARA report: {', '.join(p.name for p in inputs)}", sections, provenance)
    target = out_dir / "index.html"
    atomic_write_text(target, page)
    return target
