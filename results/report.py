"""`python -m results report INPUTS --out DIR`: one static page (DIR/index.html + PNGs) of run folders, per-run and
curve CSVs: tables beside the authors' values, figures, provenance (docs/results.md, "The report page")."""

from __future__ import annotations

import hashlib
import html
import logging
import os
import re
import subprocess
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

import dara
from dara.io import atomic_write_text
from results import plots, tables, thresholds
from results.loaders import RunLogError, find_run_folders, load_csv, load_run_folder, run_config, run_info
from results.variants import name_variants

log = logging.getLogger(__name__)
DEFAULT_REFERENCE = dara.AUTHORS_REFERENCE
NOT_IN_PAPER = "not in the paper"
# Our training-curve metrics and the authors' columns for the same quantity (tool calling only).
AUTHOR_CURVES = {"reward/format/mean": "train_format", "reward/correctness/mean": "train_correctness"}
AUTHOR_CURVE_FILE = "reference/training_dynamics.csv"
# The paper's tables: (title, metrics, group columns, the authors' summary file, rows dropped).
PAPER_TABLES = (
    ("Table 1: BFCL v4 at step 100 (runs with step-100 validation format >= 0.8)",
     ("live_accuracy", "non_live_accuracy", "multi_turn_accuracy", "average_accuracy", "average_format"),
     ("model_size", "method", "step"), "paper_bfcl_v4_20260920/final_method_results.csv", ("retained==False",)),
    ("BFCL v4 per model, all seeds (reference/all_seeds.csv)",
     ("v4_live", "v4_non_live", "v4_multi_turn", "v4_average", "v4_average_format"),
     ("model_size", "method"), "reference/all_seeds.csv", ()),
)
LENGTH_COLUMNS = re.compile(r"average_(length|length_le_\d+|think_words)")
DEAD_CHANNEL_CONVENTIONS = {"1": "1 (the paper's text)", "w_max": "w_max (the authors' code)"}
CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1500px;padding:0 1em;color:#222}
h2{border-bottom:1px solid #ccc;margin-top:2em} .scroll{overflow-x:auto} caption{text-align:left;color:#555}
table{border-collapse:collapse;margin:1em 0;font-size:.8em} th{background:#f4f4f4} th.paper,td.paper{background:#f3f7fc}
th,td{border:1px solid #ddd;padding:.2em .45em;text-align:right;white-space:nowrap} .na{color:#999;font-style:italic}
td:first-child,th:first-child{text-align:left} img{max-width:100%} footer{font-size:.8em} footer li{word-break:break-all}
"""


def _csv_kind(frame: pd.DataFrame) -> str:
    """'summary' (<metric>_mean columns), 'curves' (several steps per run) or 'per_run'."""
    if any(str(c).endswith("_mean") for c in frame.columns):
        return "summary"
    keys = [c for c in ("model_size", "task", "model", "method", "seed") if c in frame.columns]
    return "curves" if "step" in frame.columns and frame.duplicated(keys).any() else "per_run"


def discover(inputs: list[Path], source: str = "auto") -> dict[str, list]:
    found: dict[str, list] = {"runs": [], "per_run": [], "curves": [], "skipped": [], "summary": []}
    runs = []
    for path in inputs:
        if not path.exists():
            raise RunLogError(f"{path}: no such file or folder")
        if path.is_file() and path.suffix != ".csv":
            raise RunLogError(f"{path}: expected a folder or a .csv file")
        for run_dir in find_run_folders(path) if path.is_dir() else []:
            try:
                runs.append((load_run_folder(run_dir, source), run_config(run_dir)))
            except RunLogError as error:  # e.g. a run that failed before its first step: left out, named
                log.warning("left out of the report: %s", error)
                found["skipped"].append(str(error))
        for csv in sorted(path.rglob("*.csv")) if path.is_dir() else [path]:
            frame = pd.read_csv(csv)
            if "method" in frame.columns:
                found[_csv_kind(frame)].append((csv, frame))
    found["runs"] = name_variants(runs)
    if not (found["runs"] or found["per_run"] or found["curves"]):
        raise RunLogError(f"nothing to report in {[str(p) for p in inputs]}: no run folders, per-run or curve CSVs")
    return found


def _with_model_size(frame: pd.DataFrame, author_names: bool = False) -> pd.DataFrame:
    frame = frame.copy()
    if "model_size" not in frame.columns and "model" in frame.columns:
        frame["model_size"] = frame["model"].map(tables.AUTHORS_MODEL_SIZES)
    if author_names:  # the authors' method names, to look their values up
        frame["method"] = frame["method"].map(lambda m: tables.OURS_TO_AUTHORS.get(m, m))
    return frame


def _cell(mean, sd, n=None) -> str:
    if mean is None or pd.isna(mean):
        return f'<span class="na">{NOT_IN_PAPER}</span>'
    return tables.mean_sd(float(mean), sd, 2, " ± ") + (f" (n={int(n)})" if n is not None and not pd.isna(n) else "")


def _text(column: str, value) -> str:
    return tables.method_label(value) if column == "method" else str(value)


def _table(caption: str, header: list[str], rows: list[list[str]], css: str = "steps") -> str:
    head = "".join(f'<th class="paper" title="{html.escape(h)}">paper</th>' if h.endswith(" (paper)")
                   else f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f'<td class="paper">{c}</td>' if h.endswith(" (paper)") else f"<td>{c}</td>"
                                    for h, c in zip(header, row, strict=True)) + "</tr>" for row in rows)
    return (f'<div class="scroll"><table class="{css}"><caption>{html.escape(caption)}</caption><thead><tr>{head}'
            f"</tr></thead><tbody>{body}</tbody></table></div>")


def summary_html(summary: pd.DataFrame, group_by, metrics, paper: bool, caption: str) -> str:
    header = [*group_by, "n", "seeds"] + [h for m in metrics for h in ([m, f"{m} (paper)"] if paper else [m])]
    rows = []
    for _, row in summary.iterrows():
        cells = [html.escape(_text(c, row[c])) for c in group_by] + [str(row["n"]), html.escape(str(row["seeds"]))]
        for m in metrics:
            cells.append(_cell(row[f"{m}_mean"], row[f"{m}_sd"]).replace(NOT_IN_PAPER, "–"))
            if paper:
                cells.append(_cell(row.get(f"paper_{m}_mean"), row.get(f"paper_{m}_sd"), row.get("paper_n")))
        rows.append(cells)
    return _table(caption, header, rows, "summary")


def plain_html(frame: pd.DataFrame, caption: str) -> str:
    def cell(column, value):
        text = "never" if value is None or pd.isna(value) else _text(column, value)
        return f'<span class="na">{text}</span>' if text in (NOT_IN_PAPER, "never") else html.escape(text)

    return _table(caption, list(map(str, frame.columns)),
                  [[cell(c, v) for c, v in row.items()] for _, row in frame.iterrows()])


def figure_html(written: list[Path], out_dir: Path, caption: str) -> str:
    """The figure's PNG (its PDF deleted)."""
    for path in written:
        if path.suffix != ".png":
            path.unlink()
    rel = html.escape(os.path.relpath(next(p for p in written if p.suffix == ".png"), out_dir))
    return f'<figure><img src="{rel}" alt="{html.escape(caption)}"><figcaption>{html.escape(caption)}</figcaption></figure>'


def _final_table(frame, metrics, group_by, authors, is_authors) -> str:
    keys = [*group_by, "method", "step"]
    summary = tables.summarise(tables.select_step(frame, "last", metrics), keys, metrics)
    summary = frame[[*group_by, "method"]].drop_duplicates().merge(summary, on=[*group_by, "method"])
    caption = "each run's last logged step: mean ± sd over seeds"
    if is_authors:
        return summary_html(summary, keys, metrics, False, caption + " (this input is the authors' published data)")
    named = _with_model_size(summary, author_names=True)
    summary["_size"], summary["_method"] = named.get("model_size"), named["method"]
    theirs = {AUTHOR_CURVES[m]: m for m in metrics if m in AUTHOR_CURVES}
    if authors is not None and theirs and "model_size" in named.columns:
        paper = tables.summarise(authors[authors["step"].isin(set(summary["step"]))],
                                 ["model_size", "method", "step"], list(theirs))
        paper = paper.rename(columns={f"{t}_{s}": f"paper_{m}_{s}" for t, m in theirs.items() for s in ("mean", "sd")})
        paper = paper.rename(columns={"model_size": "_size", "method": "_method", "n": "paper_n"}).drop(columns="seeds")
        summary = summary.merge(paper, on=["_size", "_method", "step"], how="left")
    where = "the authors' training curves at that step" if authors is not None else "no published values for this task"
    return summary_html(summary, keys, metrics, True, f"{caption}; paper: {where}")


def _threshold_table(frame, metric, threshold, group_by, authors, is_authors) -> pd.DataFrame:
    steps = thresholds.threshold_steps(frame, metric, threshold, group_by=group_by)
    if is_authors:
        return steps
    theirs, named, paper = AUTHOR_CURVES.get(metric), _with_model_size(steps, author_names=True), {}
    if authors is not None and theirs in authors.columns and "model_size" in named.columns:
        found = thresholds.threshold_steps(authors, theirs, threshold, group_by=["model_size"])
        paper = {(r.model_size, r.method): "never" if pd.isna(r.step) else str(int(r.step))
                 for r in found.itertuples()}
    sizes = named["model_size"] if "model_size" in named.columns else [None] * len(named)
    steps[f"paper step ({theirs})" if theirs else "paper step"] = [
        paper.get(key, NOT_IN_PAPER) for key in zip(sizes, named["method"], strict=True)]
    return steps


def curves_section(title, frame, out_dir: Path, slug: str, reference: Path, *, threshold: float,
                   threshold_metric: str | None, is_authors: bool) -> tuple[str, list[str]]:
    group_by = ["model_size"] if "model_size" in frame.columns else ["model"] if "model" in frame.columns else []
    ours = sorted(c for c in frame.columns if str(c).startswith("reward/") and str(c).endswith("/mean"))
    metrics = ours or [c for c in ("train_format", "train_correctness", "val_format") if c in frame.columns]
    if threshold_metric and threshold_metric not in frame.columns:
        raise RunLogError(f"--threshold-metric {threshold_metric!r} is not logged; columns: {list(frame.columns)[:30]}")
    metric = threshold_metric or next((c for c in ("reward/format/mean", "train_format") if c in frame.columns), None)
    toolrl = not is_authors and "task" in frame.columns and set(frame["task"]) <= {"toolrl"}
    curves = reference / AUTHOR_CURVE_FILE
    authors = load_csv(curves) if toolrl and curves.exists() else None
    blocks, crossings = [], None
    if metrics:
        blocks.append(_final_table(frame, metrics, group_by, authors, is_authors))
    if metric:
        crossings = _threshold_table(frame, metric, threshold, group_by, authors, is_authors)
        blocks.append(plain_html(crossings, f"first step the seed-median {metric} reaches {threshold:g} "
                                            "(never = not within the run)"))
    if metrics:
        written = plots.plot_curves(frame, metrics, out_dir / f"{slug}_curves", group_by=group_by,
                                    crossings=(metric, threshold, crossings) if metric else None)
        blocks.append(figure_html(written, out_dir, "training curves: seed median (line), min-max over seeds "
                                                    "(band); dashed = the threshold crossing"))
    if any(plots.channel_columns(frame).values()):
        blocks.append(figure_html(plots.plot_channels(frame, out_dir / f"{slug}_channels", group_by=group_by),
                                  out_dir, "DARA per channel: active-group density pi_k and weight w_k "
                                           "(seed median, min-max band)"))
    return title, blocks


def per_run_section(path: Path, frame: pd.DataFrame, reference: Path) -> tuple[str, list[str]]:
    """A per-run table summarised like the paper's table it matches (PAPER_TABLES), the paper beside."""
    frame = _with_model_size(frame)
    spec = next((t for t in PAPER_TABLES if set(t[1]) <= set(frame.columns)), None)
    if spec is None:
        group_by = [c for c in ("model_size", "model", "method", "step") if c in frame.columns]
        metrics = [c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c])
                   and c not in {*group_by, "seed", "n"} and frame[c].notna().any()]
        summary = tables.summarise(frame, group_by, metrics, partial=True)
        return f"{path.name}: per-run table", [summary_html(summary, group_by, metrics, False,
                                                             f"mean ± sd over seeds ({NOT_IN_PAPER})")]
    title, metrics, group_by, paper, drop_if = spec
    for condition in drop_if:
        if tables.parse_condition(condition)[0] in frame.columns:
            frame = tables.drop_rows(frame, condition)
    group_by = [c for c in group_by if c in frame.columns]
    # the length diagnostics of our BFCL evaluations (results.collect), where every run has them
    metrics = [*metrics, *(c for c in frame.columns if LENGTH_COLUMNS.fullmatch(str(c)) and frame[c].notna().all())]
    summary = tables.summarise(frame, group_by, metrics)
    if (reference / paper).exists():
        summary = tables.with_paper(summary, tables.read_paper_table(reference / paper), group_by, metrics)
    caption = f"rebuilt from {path.name}: mean ± sd over seeds; paper = {paper} (n = its seeds)"
    return title, [summary_html(summary, group_by, metrics, True, caption)]


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]


def _commit() -> str:
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=dara.PROJECT_ROOT).stdout.strip()

    head = git("rev-parse", "--short=12", "HEAD") or "unknown (not a git checkout)"
    return head + (" + uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def run_provenance(run_dirs: list[Path]) -> list[str]:
    """Per run: its config file, data cards, grader, dead-channel weight convention and estimator module."""
    configs, cards, graders, dead, modules = [], {}, set(), {}, []
    for run_dir in run_dirs:
        config = next((p for p in (run_dir / "verl_config.yaml", run_dir / ".hydra" / "config.yaml") if p.exists()), None)
        if config is None:
            continue
        configs.append(f"config: {config} (sha256 {_sha256(config)})")
        cfg = OmegaConf.load(config)
        convention = str(OmegaConf.select(cfg, "algorithm.dara.dead_channel_weight", default=None) or "1")
        dead.setdefault(convention, []).append(run_dir.name)
        if isinstance(module := run_info(run_dir).get("estimator_module"), dict):
            modules.append(f"estimator module: {module.get('path')} (sha256 {str(module.get('sha256', ''))[:12]}, "
                           f"estimators {', '.join(module.get('estimators') or [])}) in run {run_dir.name}")
        for key in ("data.train_files", "data.val_files"):
            files = OmegaConf.select(cfg, key, default=None)
            for data in [files] if isinstance(files, str) else list(files or []):
                if (card := Path(data).parent / "data_card.json").exists():
                    cards[str(card)] = _sha256(card)
        reward = OmegaConf.select(cfg, "reward.custom_reward_function", default=None)
        if reward is not None and reward.get("path"):
            manager = OmegaConf.select(cfg, "reward.reward_manager.name", default=None)
            graders.add(f"{reward.path}:{reward.get('name')} via reward manager {manager}")
    lines = configs + ([f"data card: {card} (sha256 {sha})" for card, sha in cards.items()] or ["data card: none found"])
    lines += [f"grader: {g}" for g in sorted(graders)] or ["grader: not recorded in the run configs"]
    lines += [f"dead-channel weight (a DARA channel active in no group; its advantage is 0 either way): "
              f"{DEAD_CHANNEL_CONVENTIONS.get(c, c)} in {len(names)} run(s): {', '.join(sorted(names))}"
              for c, names in sorted(dead.items())]
    return lines + modules


def source_items(source: Path) -> list[str]:
    items: list[str] = []
    for line in source.read_text(encoding="utf-8").splitlines():
        if line.startswith("- "):
            items.append(line[2:].strip())
        elif items and line.startswith("  ") and line.strip():
            items[-1] += " " + line.strip()
    return items


def _reference_provenance(reference: Path, inputs: list[Path]) -> list[str]:
    source = reference / "SOURCE.md"
    if not source.exists():
        return [html.escape(f"the authors' published files: {reference} (no SOURCE.md there)")]
    lines = [f"the authors' published files, described in SOURCE.md: "
             f'<a href="{html.escape(source.resolve().as_uri())}">{html.escape(str(source))}</a>']
    lines += [html.escape(f"SOURCE.md: {item}") for item in source_items(source)
              if item.split(":", 1)[0] in ("Source", "Commits", "Method names in these files")]
    if any(str(p.resolve()).startswith(str(reference.resolve())) for p in inputs):
        lines.append("grader: the authors' own evaluation (BFCL v4 and their training-time reward), as published")
    return lines


def build_report(inputs: list[str | Path], out_dir: str | Path, *, reference: str | Path = DEFAULT_REFERENCE,
                 threshold: float = 0.8, threshold_metric: str | None = None, source: str = "auto") -> Path:
    inputs, out_dir, reference = [Path(p) for p in inputs], Path(out_dir), Path(reference)
    if not reference.is_dir():
        raise RunLogError(f"--reference {reference}: no such folder (the authors' published files, "
                          "reference/dara_authors in the repository)")
    out_dir.mkdir(parents=True, exist_ok=True)
    found = discover(inputs, source)
    options = {"threshold": threshold, "threshold_metric": threshold_metric}
    sections = [per_run_section(path, frame, reference) for path, frame in found["per_run"]]
    for path, frame in found["curves"]:
        authors = str(path.resolve()).startswith(str(reference.resolve()))
        slug = re.sub(r"\W", "_", f"{path.parent.name}_{path.stem}").strip("_").lower()[:60]
        sections.append(curves_section(f"{'authors' if authors else 'curves'}: {path.name}", frame, out_dir, slug,
                                       reference, is_authors=authors, **options))
    run_dirs = []
    if found["runs"]:
        runs = pd.concat(found["runs"], ignore_index=True, sort=False)
        runs["recipe"] = runs["recipe"].fillna(runs["task"]) if "recipe" in runs.columns else runs.get("task", "runs")
        for recipe, part in runs.groupby("recipe", sort=True):
            slug = re.sub(r"\W", "_", f"recipe_{recipe}").lower()[:60]
            sections.append(curves_section(f"recipe {recipe}: {part['run'].nunique()} runs",
                                           part.dropna(axis=1, how="all"), out_dir, slug, reference,
                                           is_authors=False, **options))
        run_dirs = [d for path in inputs if path.is_dir() for d in find_run_folders(path)]
    if found["skipped"]:
        sections.append(("runs left out", [plain_html(pd.DataFrame({"reason": found["skipped"]}),
                                                      "run folders that could not be read")]))
    provenance = [f"commit: {_commit()}"]
    provenance += [f"input: {p}" + (f" (sha256 {_sha256(p)})" if p.is_file() else "") for p in inputs]
    provenance += [f"input table: {p} (sha256 {_sha256(p)})" for kind in ("per_run", "curves") for p, _ in found[kind]]
    provenance += run_provenance(run_dirs) if run_dirs else []
    footer = [html.escape(line) for line in provenance] + _reference_provenance(reference, inputs)
    title = html.escape(f"DARA report: {', '.join(p.name for p in inputs)}")
    toc = "".join(f'<li><a href="#s{i}">{html.escape(t)}</a></li>' for i, (t, _) in enumerate(sections))
    body = "".join(f'<section id="s{i}"><h2>{html.escape(t)}</h2>{"".join(b)}</section>'
                   for i, (t, b) in enumerate(sections))
    items = "".join(f"<li>{line}</li>" for line in footer)
    page = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{title}</title><style>{CSS}</style>'
            f"</head><body><h1>{title}</h1><nav><ul>{toc}</ul></nav>{body}<footer><h2>Provenance</h2>"
            f'<ul class="provenance">{items}</ul></footer></body></html>\n')
    atomic_write_text(out_dir / "index.html", page)
    return out_dir / "index.html"
