"""`python -m results report`: the sweep page, on the authors' published files and on our own run folders."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dara import AUTHORS_REFERENCE
from results.cli import main
from results.report import NOT_IN_PAPER, build_report
from results.tables import method_label
from results.thresholds import threshold_steps

REFERENCE = AUTHORS_REFERENCE
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class Page(HTMLParser):
    """Sections (h2 text), tables (rows of cell texts, per section), images and footer items of a page."""

    def __init__(self, text: str):
        super().__init__()
        self.sections, self.tables, self.images, self.footer = [], [], [], []
        self._tag, self._row, self._cell, self._in_footer, self._text = None, None, None, False, ""
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "footer":
            self._in_footer = True
        elif tag == "table":
            self.tables.append({"section": self.sections[-1] if self.sections else None, "rows": []})
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th", "h2", "li", "caption"):
            self._text = ""
        elif tag == "img":
            self.images.append(attrs["src"])
        self._tag = tag

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._row.append(self._text.strip())
        elif tag == "tr":
            self.tables[-1]["rows"].append(self._row)
        elif tag == "h2" and not self._in_footer:
            self.sections.append(self._text.strip())
        elif tag == "li" and self._in_footer:
            self.footer.append(self._text.strip())
        elif tag == "caption":
            self.tables[-1]["caption"] = self._text.strip()

    def handle_data(self, data):
        self._text += data


def read_page(out: Path) -> Page:
    page = Page((out / "index.html").read_text(encoding="utf-8"))
    for src in page.images:
        assert (out / src).read_bytes()[:8] == PNG_MAGIC, src
    return page


def table_in(page: Page, section_start: str, caption_has: str = "") -> list[list[str]]:
    tables = [t for t in page.tables if (t["section"] or "").startswith(section_start)
              and caption_has in t.get("caption", "")]
    assert tables, f"no table in section {section_start!r} ({[t['section'] for t in page.tables]})"
    return tables[0]["rows"]


def row_of(rows: list[list[str]], *keys: str) -> dict[str, str]:
    """The row whose first cells are `keys`, by column name; a 'paper' column is named '<previous> (paper)'."""
    header = [f"{rows[0][i - 1]} (paper)" if name == "paper" else name for i, name in enumerate(rows[0])]
    found = [r for r in rows[1:] if r[: len(keys)] == list(keys)]
    assert len(found) == 1, (keys, rows[:3])
    return dict(zip(header, found[0], strict=True))


@pytest.fixture(scope="module")
def authors_page(tmp_path_factory):
    out = tmp_path_factory.mktemp("report_authors")
    assert main(["report", str(REFERENCE), "--out", str(out)]) == 0
    return out, read_page(out)


def test_authors_files_rebuild_table_1_beside_their_values(authors_page):
    _, page = authors_page
    per_run = pd.read_csv(REFERENCE / "paper_bfcl_v4_20260920" / "final_per_run.csv")
    kept = per_run[per_run["retained"]]
    rows = table_in(page, "Table 1")
    for (size, method, step), group in kept.groupby(["model_size", "method", "step"]):
        row = row_of(rows, size, method_label(method), str(step))
        for metric in ("live_accuracy", "average_accuracy", "average_format"):
            values = group[metric].to_numpy()
            expected = f"{values.mean():.2f}" + (f" ± {values.std(ddof=1):.2f}" if len(values) > 1 else "")
            assert row[metric] == expected
            # the authors' summary agrees with their per-run file, and its n with the runs kept
            assert row[f"{metric} (paper)"] == f"{expected} (n={len(group)})"
        assert row["n"] == str(len(group))


def test_authors_curves_give_threshold_steps_figures_and_provenance(authors_page):
    out, page = authors_page
    curves = pd.read_csv(REFERENCE / "reference" / "training_dynamics.csv")
    rows = table_in(page, "authors: training_dynamics.csv", "reaches 0.8")
    for (size, method), group in curves.dropna(subset=["train_format"]).groupby(["model_size", "method"]):
        median = group.groupby("step")["train_format"].median()
        hits = median.index[median.to_numpy() >= 0.8]
        assert row_of(rows, size, method_label(method))["step"] == (str(int(hits[0])) if len(hits) else "never")
    images = {Path(src).name for src in page.images}
    assert {"reference_training_dynamics_curves.png", "reference_training_dynamics_channels.png"} <= images
    assert any(item.startswith("commit: ") for item in page.footer)
    assert any("SOURCE.md" in item for item in page.footer)
    assert any("final_per_run.csv (sha256" in item for item in page.footer)


def test_provenance_quotes_source_md_whole_and_links_it(authors_page):
    out, page = authors_page
    from results.report import source_items

    items = source_items(REFERENCE / "SOURCE.md")
    method_note = next(i for i in items if i.startswith("Method names"))
    assert method_note.endswith("(this project's `rvpo`, recipe `rvpo`).")  # continuation lines joined: the whole sentence
    assert f"SOURCE.md: {method_note}" in page.footer
    assert sum(item.startswith("SOURCE.md: Commits:") for item in page.footer) == 1
    assert f'<a href="{(REFERENCE / "SOURCE.md").resolve().as_uri()}">' in (out / "index.html").read_text()


def test_the_authors_dara_is_dara_sym_in_every_table_with_the_papers_n(authors_page):
    _, page = authors_page
    for table in page.tables:
        header = table["rows"][0]
        if "method" in header:
            methods = {row[header.index("method")] for row in table["rows"][1:]}
            assert "dara" not in methods and "dara (DARA-Sym)" in methods, table["caption"]
    paper = pd.read_csv(REFERENCE / "paper_bfcl_v4_20260920" / "final_method_results.csv")
    row = row_of(table_in(page, "Table 1"), "1.5B", "dara (DARA-Sym)", "100")
    n = int(paper[(paper["model_size"] == "1.5B") & (paper["method"] == "dara")]["n"].iloc[0])
    assert row["live_accuracy (paper)"].endswith(f"(n={n})")


def write_run(root: Path, task: str, model: str, method: str, seed: int, steps: int, rise: float):
    """A run folder like dara.train leaves: metrics.jsonl (a format reward rising at `rise` per step, DARA
    channel instruments), run_info.json and a verl_config.yaml naming the data and the grader."""
    run = root / f"{task}-{model}-{method}-s{seed}"
    run.mkdir(parents=True)
    data = root / "assets"
    data.mkdir(exist_ok=True)
    (data / "data_card.json").write_text(json.dumps({"rows": 4}))
    lines = []
    for step in range(1, steps + 1):
        fmt = min(1.0, rise * step + 0.01 * seed)
        lines.append(json.dumps({"step": step, "reward/format/mean": fmt, "reward/correctness/mean": -1 + fmt,
                                 "dara/density/format": 1 - fmt, "dara/density/correctness": 0.5,
                                 "dara/weight/format": 1.0, "dara/weight/correctness": float(np.sqrt(2))}))
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (run / "run_info.json").write_text(json.dumps({"run_name": run.name, "method": method, "seed": seed,
                                                   "task": task, "model": model}))
    (run / "verl_config.yaml").write_text(
        f"data:\n  train_files: {data / 'train.parquet'}\n"
        "reward:\n  custom_reward_function:\n    path: rewards/verl_entry.py\n    name: compute_score\n"
        "  reward_manager:\n    name: DaraParallelRewardManager\n")
    return run


def test_our_toolrl_runs_sit_beside_the_authors_curves(tmp_path):
    sweep = tmp_path / "sweep"
    for seed in (0, 1):
        write_run(sweep, "toolrl", "qwen2.5-1.5b-instruct", "dara_sym", seed, 20, 0.07)
        write_run(sweep, "toolrl", "qwen2.5-1.5b-instruct", "dara_asym", seed, 20, 0.09)
    out = tmp_path / "page"
    build_report([sweep], out, reference=REFERENCE)
    page = read_page(out)
    assert page.sections == ["recipe toolrl: 4 runs"]
    steps = table_in(page, "recipe toolrl", "reaches 0.8")
    authors = pd.read_csv(REFERENCE / "reference" / "training_dynamics.csv")
    theirs = threshold_steps(authors, "train_format", 0.8, group_by=["model_size"])
    dara_step = theirs[(theirs["model_size"] == "1.5B") & (theirs["method"] == "dara")]["step"].iloc[0]
    sym = row_of(steps, "qwen2.5-1.5b-instruct", "dara_sym")
    assert sym["step"] == "12" and sym["paper step (train_format)"] == str(dara_step)  # seed median 0.075*12 > 0.8
    assert row_of(steps, "qwen2.5-1.5b-instruct", "dara_asym")["paper step (train_format)"] == NOT_IN_PAPER
    final = table_in(page, "recipe toolrl", "last logged step")
    at_20 = authors[(authors["model_size"] == "1.5B") & (authors["method"] == "dara") & (authors["step"] == 20)]
    expected = at_20["train_format"]
    assert row_of(final, "qwen2.5-1.5b-instruct", "dara_sym")["reward/format/mean (paper)"] == (
        f"{expected.mean():.2f} ± {expected.std():.2f} (n={len(expected)})")
    assert row_of(final, "qwen2.5-1.5b-instruct", "dara_asym")["reward/format/mean (paper)"] == NOT_IN_PAPER
    assert {Path(s).name for s in page.images} == {"recipe_toolrl_curves.png", "recipe_toolrl_channels.png"}
    assert any(item.startswith("data card: ") and "data_card.json" in item for item in page.footer)
    assert "grader: rewards/verl_entry.py:compute_score via reward manager DaraParallelRewardManager" in page.footer
    assert sum(item.startswith("config: ") for item in page.footer) == 4


def test_smoke_runs_are_marked_not_in_the_paper(tmp_path):
    sweep = tmp_path / "outputs"
    write_run(sweep, "smoke", "tiny", "dara_asym", 0, 3, 0.3)
    failed = sweep / "failed-before-step-1"
    failed.mkdir()
    (failed / "metrics.jsonl").write_text("")
    out = tmp_path / "page"
    assert main(["report", str(sweep), "--out", str(out), "--reference", str(REFERENCE)]) == 0
    page = read_page(out)
    row = row_of(table_in(page, "recipe smoke", "last logged step"), "tiny", "dara_asym")
    assert row["reward/format/mean"] == "0.90" and row["reward/format/mean (paper)"] == NOT_IN_PAPER
    assert row_of(table_in(page, "recipe smoke", "reaches 0.8"), "tiny", "dara_asym")["step"] == "3"
    assert page.sections == ["recipe smoke: 1 runs", "runs left out"]
    assert "failed-before-step-1" in table_in(page, "runs left out")[1][0]


def test_our_per_run_table_keeps_our_names_with_the_authors_values_and_length_metrics(tmp_path):
    """A `results collect` CSV of our BFCL evaluations: our method names on the page (dara_sym,
    gd2po_hard_after), the authors' dara / gd2po_hard values beside them, length metrics shown."""
    per_run = pd.read_csv(REFERENCE / "paper_bfcl_v4_20260920" / "final_per_run.csv")
    ours = per_run[per_run["retained"] & (per_run["model_size"] == "1.5B")].copy()
    ours["method"] = ours["method"].replace({"dara": "dara_sym", "gd2po_hard": "gd2po_hard_after"})
    ours["model"] = "qwen2.5-1.5b-instruct"
    ours = ours.drop(columns=["model_size", "retained"]).assign(average_length_le_16=50.0, average_think_words=12.5)
    ours.to_csv(tmp_path / "per_run.csv", index=False)
    out = tmp_path / "page"
    build_report([tmp_path / "per_run.csv"], out, reference=REFERENCE)
    page = read_page(out)
    rows = table_in(page, "Table 1")
    methods = {r[rows[0].index("method")] for r in rows[1:]}
    assert {"dara_sym", "gd2po_hard_after"} <= methods and not methods & {"dara", "gd2po_hard"}
    paper = pd.read_csv(REFERENCE / "paper_bfcl_v4_20260920" / "final_method_results.csv")
    for ours_name, theirs in (("dara_sym", "dara"), ("gd2po_hard_after", "gd2po_hard")):
        want = paper[(paper["model_size"] == "1.5B") & (paper["method"] == theirs)].iloc[0]
        cell = row_of(rows, "1.5B", ours_name, "100")["average_accuracy (paper)"]
        assert cell.startswith(f"{want['average_accuracy_mean']:.2f}") and cell.endswith(f"(n={want['n']})")
    row = row_of(rows, "1.5B", "dara_sym", "100")
    assert row["average_length_le_16"] == "50.00 ± 0.00" and row["average_length_le_16 (paper)"] == NOT_IN_PAPER
