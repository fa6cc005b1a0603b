"""`python -m results report`: the sweep page, on the authors' published files and on our own run folders."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dara import AUTHORS_REFERENCE as REFERENCE
from results.cli import main
from results.report import NOT_IN_PAPER, build_report, source_items
from results.tables import method_label
from results.thresholds import threshold_steps
from tests.test_results_thresholds import write_run as run_folder

TABLE_1 = REFERENCE / "paper_bfcl_v4_20260920" / "final_method_results.csv"
CURVES = REFERENCE / "reference" / "training_dynamics.csv"


class Page(HTMLParser):
    """Sections (h2 texts), tables (section, caption, rows of cell texts), images and footer items of a page."""

    def __init__(self, out: Path):
        super().__init__()
        self.sections, self.tables, self.images, self.footer, self._in_footer, self._text = [], [], [], [], False, ""
        self.feed((out / "index.html").read_text(encoding="utf-8"))
        for src in self.images:
            assert (out / src).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", src

    def handle_starttag(self, tag, attrs):
        self._text = ""
        self._in_footer |= tag == "footer"
        if tag == "table":
            self.tables.append({"section": self.sections[-1] if self.sections else "", "rows": [], "caption": ""})
        elif tag == "tr":
            self.tables[-1]["rows"].append([])
        elif tag == "img":
            self.images.append(dict(attrs)["src"])

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[-1]["rows"][-1].append(self._text.strip())
        elif tag == "caption":
            self.tables[-1]["caption"] = self._text.strip()
        elif tag == "h2" and not self._in_footer:
            self.sections.append(self._text.strip())
        elif tag == "li" and self._in_footer:
            self.footer.append(self._text.strip())

    def handle_data(self, data):
        self._text += data

    def table(self, section: str, caption: str = "") -> list[list[str]]:
        return next(t["rows"] for t in self.tables if t["section"].startswith(section) and caption in t["caption"])


def row_of(rows: list[list[str]], *keys: str) -> dict[str, str]:
    """The row whose first cells are `keys`, by column name; a 'paper' column is named '<previous> (paper)'."""
    header = [f"{rows[0][i - 1]} (paper)" if name == "paper" else name for i, name in enumerate(rows[0])]
    (found,) = [r for r in rows[1:] if r[: len(keys)] == list(keys)]
    return dict(zip(header, found, strict=True))


@pytest.fixture(scope="module")
def authors_page(tmp_path_factory):
    out = tmp_path_factory.mktemp("report_authors")
    assert main(["report", str(REFERENCE), "--out", str(out)]) == 0
    return out, Page(out)


def test_authors_files_rebuild_table_1_beside_their_values_with_dara_sym_named(authors_page):
    _, page = authors_page
    per_run = pd.read_csv(REFERENCE / "paper_bfcl_v4_20260920" / "final_per_run.csv")
    rows = page.table("Table 1")
    for (size, method, step), group in per_run[per_run["retained"]].groupby(["model_size", "method", "step"]):
        row = row_of(rows, size, method_label(method), str(step))
        assert row["n"] == str(len(group))
        for metric in ("live_accuracy", "average_accuracy", "average_format"):
            values = group[metric].to_numpy()
            expected = f"{values.mean():.2f}" + (f" ± {values.std(ddof=1):.2f}" if len(values) > 1 else "")
            assert row[metric] == expected and row[f"{metric} (paper)"] == f"{expected} (n={len(group)})"
    for table in page.tables:  # the authors' dara is DARA-Sym in every table
        if "method" in table["rows"][0]:
            methods = {row[table["rows"][0].index("method")] for row in table["rows"][1:]}
            assert "dara" not in methods and "dara (DARA-Sym)" in methods, table["caption"]


def test_authors_curves_give_threshold_steps_figures_and_provenance(authors_page):
    out, page = authors_page
    rows = page.table("authors: training_dynamics.csv", "reaches 0.8")
    steps = threshold_steps(pd.read_csv(CURVES), "train_format", 0.8, group_by=["model_size"])  # its loop: test_results_thresholds
    for row in steps.itertuples():
        assert row_of(rows, row.model_size, method_label(row.method))["step"] == (
            "never" if pd.isna(row.step) else str(int(row.step)))
    assert {"reference_training_dynamics_curves.png", "reference_training_dynamics_channels.png"} <= {
        Path(src).name for src in page.images}
    assert any(item.startswith("commit: ") for item in page.footer)
    assert any("final_per_run.csv (sha256" in item for item in page.footer)
    method_note = next(i for i in source_items(REFERENCE / "SOURCE.md") if i.startswith("Method names"))
    assert method_note.endswith("(this project's `rvpo`, recipe `rvpo`).")  # continuation lines joined
    assert f"SOURCE.md: {method_note}" in page.footer
    assert sum(item.startswith("SOURCE.md: Commits:") for item in page.footer) == 1
    assert f'<a href="{(REFERENCE / "SOURCE.md").resolve().as_uri()}">' in (out / "index.html").read_text()


def write_run(root: Path, task: str, model: str, method: str, seed: int, steps: int, rise: float):
    """A run folder like dara.train leaves: a format reward rising at `rise` per step, DARA channel instruments,
    run_info.json and a verl_config.yaml naming the data and the grader."""
    run, data = root / f"{task}-{model}-{method}-s{seed}", root / "assets"
    data.mkdir(parents=True, exist_ok=True)
    (data / "data_card.json").write_text(json.dumps({"rows": 4}))
    fmt = [min(1.0, rise * step + 0.01 * seed) for step in range(1, steps + 1)]
    run_folder(run, [{"step": step, "reward/format/mean": f, "reward/correctness/mean": -1 + f,
                      "dara/density/format": 1 - f, "dara/density/correctness": 0.5, "dara/weight/format": 1.0,
                      "dara/weight/correctness": float(np.sqrt(2))} for step, f in enumerate(fmt, 1)],
               method=method, seed=seed, task=task, model=model)
    (run / "verl_config.yaml").write_text(
        f"data:\n  train_files: {data / 'train.parquet'}\n"
        "reward:\n  custom_reward_function:\n    path: rewards/verl_entry.py\n    name: compute_score\n"
        "  reward_manager:\n    name: DaraParallelRewardManager\n")


def test_our_runs_sit_beside_the_authors_curves_and_an_unreadable_run_is_left_out(tmp_path):
    for seed in (0, 1):
        write_run(tmp_path / "sweep", "toolrl", "qwen2.5-1.5b-instruct", "dara_sym", seed, 20, 0.07)
        write_run(tmp_path / "sweep", "toolrl", "qwen2.5-1.5b-instruct", "dara_asym", seed, 20, 0.09)
    write_run(tmp_path / "sweep", "smoke", "tiny", "dara_asym", 0, 3, 0.3)
    (tmp_path / "sweep" / "failed-before-step-1").mkdir()
    (tmp_path / "sweep" / "failed-before-step-1" / "metrics.jsonl").write_text("")
    assert main(["report", str(tmp_path / "sweep"), "--out", str(tmp_path / "page"), "--reference", str(REFERENCE)]) == 0
    page = Page(tmp_path / "page")
    assert page.sections == ["recipe smoke: 1 runs", "recipe toolrl: 4 runs", "runs left out"]
    assert "failed-before-step-1" in page.table("runs left out")[1][0]
    authors = pd.read_csv(CURVES)
    theirs = threshold_steps(authors, "train_format", 0.8, group_by=["model_size"]).query(
        "model_size == '1.5B' and method == 'dara'")["step"].iloc[0]
    steps = page.table("recipe toolrl", "reaches 0.8")
    sym = row_of(steps, "qwen2.5-1.5b-instruct", "dara_sym")
    assert sym["step"] == "12" and sym["paper step (train_format)"] == str(theirs)  # seed median 0.075*12 > 0.8
    assert row_of(steps, "qwen2.5-1.5b-instruct", "dara_asym")["paper step (train_format)"] == NOT_IN_PAPER
    final = page.table("recipe toolrl", "last logged step")
    at_20 = authors.query("model_size == '1.5B' and method == 'dara' and step == 20")["train_format"]
    assert row_of(final, "qwen2.5-1.5b-instruct", "dara_sym")["reward/format/mean (paper)"] == (
        f"{at_20.mean():.2f} ± {at_20.std():.2f} (n={len(at_20)})")
    assert row_of(final, "qwen2.5-1.5b-instruct", "dara_asym")["reward/format/mean (paper)"] == NOT_IN_PAPER
    smoke = row_of(page.table("recipe smoke", "last logged step"), "tiny", "dara_asym")  # smoke runs: not in the paper
    assert smoke["reward/format/mean"] == "0.90" and smoke["reward/format/mean (paper)"] == NOT_IN_PAPER
    assert row_of(page.table("recipe smoke", "reaches 0.8"), "tiny", "dara_asym")["step"] == "3"
    assert {"recipe_toolrl_curves.png", "recipe_toolrl_channels.png"} <= {Path(s).name for s in page.images}
    assert any(item.startswith("data card: ") and "data_card.json" in item for item in page.footer)
    assert "grader: rewards/verl_entry.py:compute_score via reward manager DaraParallelRewardManager" in page.footer
    assert sum(item.startswith("config: ") for item in page.footer) == 5


def test_our_per_run_table_keeps_our_names_with_the_authors_values_and_length_metrics(tmp_path):
    """A `results collect` CSV of our BFCL evaluations: our method names (dara_sym, gd2po_hard_after), the authors'
    dara / gd2po_hard values beside them, length metrics shown."""
    per_run = pd.read_csv(REFERENCE / "paper_bfcl_v4_20260920" / "final_per_run.csv")
    ours = per_run[per_run["retained"] & (per_run["model_size"] == "1.5B")].drop(columns=["model_size", "retained"])
    ours = ours.replace({"method": {"dara": "dara_sym", "gd2po_hard": "gd2po_hard_after"}}).assign(
        model="qwen2.5-1.5b-instruct", average_length_le_16=50.0, average_think_words=12.5)
    ours.to_csv(tmp_path / "per_run.csv", index=False)
    build_report([tmp_path / "per_run.csv"], tmp_path / "page", reference=REFERENCE)
    rows = Page(tmp_path / "page").table("Table 1")
    methods = {r[rows[0].index("method")] for r in rows[1:]}
    assert {"dara_sym", "gd2po_hard_after"} <= methods and not methods & {"dara", "gd2po_hard"}
    paper = pd.read_csv(TABLE_1).query("model_size == '1.5B'").set_index("method")
    for ours_name, theirs in (("dara_sym", "dara"), ("gd2po_hard_after", "gd2po_hard")):
        cell = row_of(rows, "1.5B", ours_name, "100")["average_accuracy (paper)"]
        assert cell.startswith(f"{paper.at[theirs, 'average_accuracy_mean']:.2f}")
        assert cell.endswith(f"(n={paper.at[theirs, 'n']})")
    row = row_of(rows, "1.5B", "dara_sym", "100")
    assert row["average_length_le_16"] == "50.00 ± 0.00" and row["average_length_le_16 (paper)"] == NOT_IN_PAPER
