"""Results without a model: threshold steps (docs/results.md, "Threshold steps") against plain loops on the authors'
curves and on curves with known answers; the authors' BFCL tables rebuilt from their per-run files, BFCL group
aggregation, seed tables of our runs; runs that differ in more than the seed apart in every table, labelled by what
differs (older run folders pool as before); figures (PNG and PDF); `python -m results report`, the sweep page, on
the authors' published files and on our own run folders."""

from __future__ import annotations

import json
import statistics
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from dara import AUTHORS_REFERENCE
from dara.run_folder import experiment_config
from results import bfcl
from results.cli import AUTHORS_CURVES, AUTHORS_PER_RUN, main
from results.collect import collect
from results.loaders import RunLogError, load_runs
from results.plots import channel_columns, parse_threshold_lines
from results.report import NOT_IN_PAPER, build_report, source_items
from results.tables import build_table, drop_rows, method_label, parse_condition, summarise
from results.thresholds import first_sustained_step, threshold_steps, trailing_mean
from results.variants import short_names, variant_labels

CURVES = AUTHORS_REFERENCE / AUTHORS_CURVES
PAPER = AUTHORS_REFERENCE / "paper_bfcl_v4_20260920"
REF = AUTHORS_REFERENCE / "reference"
METRIC = "reward/format/mean"


def loop_sustained_step(steps, values, threshold, window=10, hold=20):
    """Plain loop: trailing mean over full windows; the hold must fit inside the run."""
    for i in range(window - 1, len(values) - hold):
        if all(sum(values[j - window + 1: j + 1]) / window >= threshold for j in range(i, i + hold + 1)):
            return steps[i]
    return None


def write_run(folder, records, **info) -> None:
    """A run folder as dara.train leaves it: run_info.json (a toolrl run of the tiny model unless `info` says
    otherwise) and metrics.jsonl holding `records`."""
    folder.mkdir(parents=True)
    info = {"run_name": folder.name, "task": "toolrl", "model": "tiny", **info}
    (folder / "run_info.json").write_text(json.dumps(info))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.mark.parametrize("metric", ["train_format", "val_format"])
def test_median_rule_matches_plain_loop_on_authors_curves(metric, tmp_path):
    expected = {key: next((step for step, median in group.groupby("step")[metric].median().items() if median >= 0.8),
                          None)  # a group that never logs the metric counts too
                for key, group in pd.read_csv(CURVES).groupby(["model_size", "method"])}
    out = tmp_path / "steps.csv"
    assert main(["thresholds", str(CURVES), "--metric", metric, "--threshold", "0.8", "--group-by", "model_size",
                 "--out", str(out)]) == 0
    got = pd.read_csv(out, dtype={"model_size": str})
    assert list(got.columns) == ["model_size", "method", "step"] and len(got) == len(expected) == 10
    assert {(r.model_size, r.method): None if pd.isna(r.step) else int(r.step) for r in got.itertuples()} == expected
    if metric == "train_format":  # the paper's claim: DARA before GDPO before GRPO at both sizes; DVAO never
        for size in ("1.5B", "3B"):
            assert expected[(size, "dara")] < expected[(size, "gdpo")] < expected[(size, "grpo")]
        assert expected[("1.5B", "dvao")] is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=0, max_size=60), st.integers(1, 12), st.integers(0, 25),
       st.sampled_from([0.3, 0.5, 0.9]))
def test_sustained_rule_equals_plain_loop(values, window, hold, threshold):
    steps = list(range(len(values)))
    means = trailing_mean(values, window)
    for i in range(window - 1, len(values)):
        assert means[i] == pytest.approx(sum(values[i - window + 1: i + 1]) / window, abs=1e-12)
    # the cumulative-sum mean may differ from the loop's in the last bits: a disagreement only at a tie
    if first_sustained_step(steps, values, threshold, window=window, hold=hold) != loop_sustained_step(
            steps, values, threshold, window, hold):
        assert np.any(np.isclose(means[~np.isnan(means)], threshold, atol=1e-12))


def test_median_over_seeds_reads_only_logged_steps(tmp_path):
    """Validation logged every 2 steps: the rule reads only the steps that carry it."""
    for seed, curve in ((0, [0.1, 0.5, 0.9]), (1, [0.2, 0.7, 0.95])):
        write_run(tmp_path / f"dara_s{seed}", [{"step": step, "reward/format/mean": step / 10, **(
            {"val-core/rlla/format": curve[step // 2]} if step % 2 == 0 else {})} for step in range(6)],
                  method="dara", seed=seed)
    out = tmp_path / "t.md"
    assert main(["thresholds", str(tmp_path), "--metric", "val-core/rlla/format", "--threshold", "0.6",
                 "--group-by", "task", "--format", "md", "--out", str(out)]) == 0
    assert "| task | method | step |\n|---|---|---|\n| toolrl | dara | 2 |" in out.read_text()  # median(0.5, 0.7)


def test_math_speed_metric_per_run_then_over_seeds(tmp_path):
    """The paper's T_0.95: per run the sustained rule, then a summary over seeds; a run that never gets there is
    counted but not averaged."""
    rng = np.random.default_rng(12)
    curves = {(method, seed): [min(1.0, (0.5 if rise is None or s < rise else 0.999) + rng.uniform(-1e-4, 1e-4))
                               for s in range(1, 201)]
              for method, rises in (("dara_asym", (30, 40, None)), ("gdpo", (60, 80, 70)))
              for seed, rise in enumerate(rises)}
    for (method, seed), curve in curves.items():
        write_run(tmp_path / f"{method}_s{seed}", [{"step": s, "rollout_prefilter/length/mean": v}
                                                   for s, v in enumerate(curve, 1)], method=method, seed=seed)
    out = tmp_path / "t.csv"
    assert main(["thresholds", str(tmp_path), "--metric", "rollout_prefilter/length/mean", "--threshold", "0.95",
                 "--rule", "sustained", "--per-seed", "--seed-summary", "--out", str(out)]) == 0
    summary = pd.read_csv(out).set_index("method")
    for method in ("dara_asym", "gdpo"):
        reached = [s for (m, _), c in curves.items() if m == method
                   and (s := loop_sustained_step(list(range(1, 201)), c, 0.95)) is not None]
        assert (summary.loc[method, "runs"], summary.loc[method, "reached"]) == (3, len(reached))
        assert summary.loc[method, ["step_mean", "step_median"]].tolist() == pytest.approx(
            [statistics.mean(reached), statistics.median(reached)])


def test_with_no_runs_thresholds_and_table_read_the_authors_files(tmp_path, capsys):
    for command, path, args in (
            ("thresholds", AUTHORS_CURVES, ["--metric", "train_format", "--threshold", "0.8", "--group-by", "model_size"]),
            ("table", AUTHORS_PER_RUN, ["--metrics", "average_accuracy", "--group-by", "model_size,method,step",
                                        "--format", "csv"])):
        assert main([command, *args, "--out", str(tmp_path / "default.csv")]) == 0
        assert str(AUTHORS_REFERENCE / path) in capsys.readouterr().err
        assert main([command, str(AUTHORS_REFERENCE / path), *args, "--out", str(tmp_path / "given.csv")]) == 0
        assert (tmp_path / "default.csv").read_bytes() == (tmp_path / "given.csv").read_bytes()


@pytest.mark.parametrize("per_run, theirs, group_by, drop, attach", [
    (PAPER / "final_per_run.csv", PAPER / "final_method_results.csv", ["model_size", "method", "step"],
     ["retained==False"], []),  # Table 1, BFCL v4 at step 100
    (REF / "per_model.csv", REF / "all_seeds.csv", ["model_size", "method"], [], []),
    (REF / "per_model.csv", REF / "selected_seeds.csv", ["model_size", "method"], ["val_format@100<0.8"],
     [(REF / "training_dynamics.csv", "val_format@100")]),  # drops 1.5B dvao seed 1 and gd2po_hard seed 2
])
def test_the_authors_tables_rebuild_from_their_per_run_files(per_run, theirs, group_by, drop, attach):
    theirs = pd.read_csv(theirs).rename(columns=lambda c: c[:-4] + "_sd" if c.endswith("_std") else c)
    metrics = [c[: -len("_mean")] for c in theirs.columns if c.endswith("_mean")]
    ours = build_table([per_run], metrics, group_by=group_by, drop_if=drop, attach=attach)
    merged = ours.merge(theirs, on=group_by, suffixes=("", "@paper"), validate="one_to_one")
    assert len(ours) == len(theirs) == len(merged) and len(metrics) >= 5
    assert (merged["n"] == merged["n@paper"]).all()
    assert (merged["seeds"] == merged["seeds@paper"].fillna("").astype(str)).all()
    single = merged["n"] == 1  # sample sd is undefined for one run: ours empty, theirs empty or 0
    for metric in metrics:
        np.testing.assert_allclose(merged[f"{metric}_mean"], merged[f"{metric}_mean@paper"], rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(merged.loc[~single, f"{metric}_sd"], merged.loc[~single, f"{metric}_sd@paper"],
                                   rtol=1e-9, atol=1e-10)
        assert merged.loc[single, f"{metric}_sd"].isna().all()
        assert merged.loc[single, f"{metric}_sd@paper"].fillna(0).eq(0).all()


def test_bfcl_groups_reproduce_the_paper_file_and_plain_weights():
    for row in pd.read_csv(REF / "per_model.csv").to_dict("records"):  # Live micro mean, Non-Live of four
        scores = {c: row[f"v3_{c}"] for c in bfcl.LIVE_CATEGORIES}
        scores.update({c: row[f"v3_non_live_{c}"] for c in ("simple", "multiple", "parallel", "parallel_multiple")})
        assert bfcl.live_score(scores) == pytest.approx(row["v3_live"], rel=1e-12)
        assert bfcl.non_live_score(scores) == pytest.approx(row["v3_non_live"], rel=1e-12)
    scores = dict(zip(bfcl.CATEGORIES, np.random.default_rng(0).uniform(0, 1, len(bfcl.CATEGORIES)), strict=True))
    live = sum(scores[c] * n for c, n in zip(bfcl.LIVE_CATEGORIES, (258, 1053, 16, 24), strict=True)) / 1351
    non_live = (sum(scores[c] for c in bfcl.SIMPLE_LANGUAGES) / 3 + scores["multiple"] + scores["parallel"]
                + scores["parallel_multiple"]) / 4
    multi = sum(scores[c] for c in bfcl.MULTI_TURN_CATEGORIES) / 4
    assert bfcl.aggregate(scores) == pytest.approx({"live": live, "non_live": non_live, "multi_turn": multi,
                                                    "average": (live + non_live + multi) / 3})
    with pytest.raises(KeyError, match="multi_turn_base"):
        bfcl.aggregate({k: v for k, v in scores.items() if k != "multi_turn_base"})


def test_summarise_and_conditions():
    """Means, sds and seeds: the authors' tables above; here a missing value, a NaN under a condition, bad syntax."""
    frame = pd.DataFrame({"method": ["a", "a", "b"], "seed": [0, 1, 0], "x": [1.0, None, 3.0]})
    with pytest.raises(ValueError, match="without 'x'"):
        summarise(frame, ["method"], ["x"])
    assert parse_condition("val_format@100 < 0.8") == ("val_format@100", "<", 0.8)
    assert drop_rows(pd.DataFrame({"v": [0.5, None, 0.9]}), "v<0.8")["v"].isna().tolist() == [True, False]
    with pytest.raises(ValueError, match="COLUMN OP VALUE"):
        parse_condition("v ~ 3")


def test_table_formats_and_the_authors_dara_beside_our_dara_sym(tmp_path):
    common = ["table", str(PAPER / "final_per_run.csv"), "--metrics", "live_accuracy,average_accuracy",
              "--group-by", "model_size,method"]
    for fmt, paper in (("md", ["--paper", str(PAPER / "final_method_results.csv")]), ("latex", []), ("csv", [])):
        assert main([*common, "--format", fmt, *paper, "--out", str(tmp_path / fmt)]) == 0
    text = (tmp_path / "md").read_text()
    assert "| model_size | method | n | live_accuracy | live_accuracy (paper) |" in text
    assert "| 1.5B | dara (DARA-Sym) | 5 | 68.42 ± 1.31 | 68.42 ± 1.31 |" in text
    assert text.rstrip().endswith("The authors' `dara` is DARA-Sym: their tool-calling code of that time scaled both signs.")
    assert "\\begin{tabular}" in (tmp_path / "latex").read_text() and "68.42 $\\pm$ 1.31" in (tmp_path / "latex").read_text()
    assert {"n", "seeds", "live_accuracy_mean", "live_accuracy_sd"} <= set(pd.read_csv(tmp_path / "csv").columns)


def test_collect_summaries_and_jsonl_runs_into_seed_tables(tmp_path):
    for seed, live in ((0, 60.0), (1, 70.0)):
        folder = tmp_path / "eval" / f"dara_s{seed}" / "bfcl"
        folder.mkdir(parents=True)
        groups = {"live": live, "non_live": 80.0, "multi_turn": 5.0, "average": (live + 85.0) / 3}
        (folder / "summary.json").write_text(json.dumps({
            "bench": "bfcl", "run": {"run_name": f"dara_s{seed}", "method": "dara", "seed": seed, "step": 100},
            "categories": {}, "groups_accuracy": groups, "groups_format": groups, "missing_cases": 0}))
    assert list(collect([tmp_path / "eval"])["live_accuracy"]) == [60.0, 70.0]
    assert main(["collect", str(tmp_path / "eval"), "--out", str(tmp_path / "per_run.csv")]) == 0
    assert main(["table", str(tmp_path / "per_run.csv"), "--metrics", "live_accuracy", "--format", "csv",
                 "--out", str(tmp_path / "t.csv")]) == 0
    row = pd.read_csv(tmp_path / "t.csv").iloc[0]
    assert (row["live_accuracy_mean"], row["live_accuracy_sd"], row["seeds"]) == (65.0, pytest.approx(50 ** 0.5), "0,1")
    for seed in (0, 1, 2):  # per-step curves: a step, or each run's last (seed 2 stopped early)
        write_run(tmp_path / "runs" / f"gdpo_s{seed}", [{"step": s, "val": seed + s / 10}
                                                        for s in range(1, 5 if seed < 2 else 4)], method="gdpo", seed=seed)
    at3 = build_table([tmp_path / "runs"], ["val"], group_by=["task", "method"], step=3)
    assert at3.loc[0, "n"] == 3 and at3.loc[0, "val_mean"] == pytest.approx(1.3)
    last = build_table([tmp_path / "runs"], ["val"], group_by=["method"], step="last")
    assert last.loc[0, "val_mean"] == pytest.approx((0.4 + 1.4 + 2.3) / 3)


def config(seed: int, model: str = "tiny", **changes) -> dict:
    cfg = OmegaConf.create({"run": {"seed": seed, "task": "smoke", "model": model, "output_dir": f"/o/{seed}"},
                            "data": {"seed": seed, "train_batch_size": 8},
                            "algorithm": {"adv_estimator": "dara_asym", "dara": {"w_max": 5.0}}})
    for key, value in changes.items():
        OmegaConf.update(cfg, key, value, force_add=True)
    return experiment_config(cfg)


def write_variant(root, name, seed, values, *, model="tiny", recorded=True, **changes):
    info = {"config": config(seed, model, **changes)} if recorded else {}
    write_run(root / name, [{"step": s, METRIC: v} for s, v in enumerate(values, start=1)], method="dara_asym",
               seed=seed, task="smoke", model=model, **info)


def test_a_variant_is_its_own_row_curve_and_threshold_labelled_by_what_differs(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    for name, seed, values, changes in (("plain-s0", 0, [0.2, 0.5, 0.9], {}), ("plain-s1", 1, [0.1, 0.7, 0.8], {}),
                                        ("capped-s0", 0, [0.3, 0.9, 1.0], {"algorithm.dara.w_max": 2.0})):
        write_variant(sweep, name, seed, values, **changes)
    rows = {r["method"]: r for r in build_table([sweep], [METRIC], step="last").to_dict("records")}
    plain, capped = rows.pop("dara_asym w_max=5.0"), rows.pop("dara_asym w_max=2.0")
    assert not rows and (plain["n"], plain["seeds"], capped["n"], capped["seeds"]) == (2, "0,1", 1, "0")
    assert plain[f"{METRIC}_mean"] == pytest.approx((0.9 + 0.8) / 2) and capped[f"{METRIC}_mean"] == 1.0
    frame = load_runs(sweep)
    assert set(frame["base_method"]) == {"dara_asym"} and frame["config_id"].nunique() == 2
    steps = threshold_steps(frame, METRIC, 0.85)
    assert dict(zip(steps["method"], steps["step"], strict=True)) == {"dara_asym w_max=2.0": 2, "dara_asym w_max=5.0": 3}
    assert main(["table", str(sweep), "--metrics", METRIC, "--step", "last"]) == 0
    assert "| dara_asym w_max=2.0 | 1 |" in capsys.readouterr().out
    assert main(["plot", "curves", str(sweep), "--metrics", METRIC, "--out", str(tmp_path / "c")]) == 0
    page = build_report([sweep], tmp_path / "report", reference=tmp_path).read_text()
    assert "dara_asym w_max=2.0" in page and "dara_asym w_max=5.0" in page


def test_what_is_pooled_and_what_is_refused(tmp_path):
    """Seeds of one configuration are one row; folders recording no configuration pool as before; a key only newer
    runs recorded (the code added it later) tells nothing apart, one recorded with two values does; runs of two
    models under one method are refused."""
    for name, seed, kwargs in (("one/a", 0, {}), ("one/b", 1, {}), ("old/a", 0, {"recorded": False}),
                               ("old/b", 0, {"recorded": False, "algorithm.dara.w_max": 2.0})):
        write_variant(tmp_path, name, seed, [0.5 + seed / 10], **kwargs)
    for folder in ("one", "old"):
        assert build_table([tmp_path / folder], [METRIC], step="last")[["method", "n"]].values.tolist() == [
            ["dara_asym", 2]]
    write_variant(tmp_path, "added/new-s1", 1, [0.7], **{"run.seeded_rollout": True})
    assert set(load_runs([tmp_path / "one" / "a", tmp_path / "added" / "new-s1"])["method"]) == {"dara_asym"}
    write_variant(tmp_path, "added/other-s2", 2, [0.9], **{"run.seeded_rollout": False})
    assert sorted(set(load_runs([tmp_path / "one" / "a", tmp_path / "added"])["method"])) == [
        "dara_asym seeded_rollout=false", "dara_asym seeded_rollout=null", "dara_asym seeded_rollout=true"]
    write_variant(tmp_path, "models/small", 0, [0.7], model="small", **{"run.model": "small"})
    write_variant(tmp_path, "models/tiny", 0, [0.5])
    with pytest.raises(ValueError, match="differ in model"):
        build_table([tmp_path / "models"], [METRIC], step="last")
    table = build_table([tmp_path / "models"], [METRIC], group_by=["model", "method"], step="last")
    assert table[["model", "method", "n"]].values.tolist() == [["small", "dara_asym", 1], ["tiny", "dara_asym", 1]]


def test_labels_name_the_differing_keys_briefly():
    assert short_names(["a.x.lr", "b.y.lr", "c.w_max"]) == {"a.x.lr": "x.lr", "b.y.lr": "y.lr", "c.w_max": "w_max"}
    labels = variant_labels("grpo", [{"k": 1, "a.b": [1, 2]}, {"k": 2, "a.b": [1, 2]}, {"k": 1}])
    assert labels == ["grpo b=[1, 2] k=1", "grpo b=[1, 2] k=2", "grpo b=null k=1"]
    assert variant_labels("grpo", [{"k": 1}]) == ["grpo"]
    paths = variant_labels("m", [{"a.path": "/x/model", "w_max": 1}, {"a.path": "/y/model", "w_max": 2}])
    assert paths == ["m w_max=1 path=/x/model", "m w_max=2 path=/y/model"]  # what a user changed comes first
    many = variant_labels("m", [{f"k{i}": i for i in range(6)}, {}])
    assert many[0] == "m k0=0 k1=1 k2=2 k3=3 (+2 keys)" and many[1].endswith("(+2 keys)") and many[0] != many[1]


def test_plots_from_authors_files_and_from_our_run_logs(tmp_path):
    curves, checkpoints = str(CURVES), str(PAPER / "dynamics_export" / "plot_data.csv")
    for method in ("gdpo", "dara_asym"):
        for seed in (0, 1):
            write_sweep_run(tmp_path / "runs", "toolrl", "tiny", method, seed, 12, 0.1)  # the report's runs below
    frame = load_runs(tmp_path / "runs")
    assert len(frame) == 4 * 12 and channel_columns(frame) == {
        "density": {"format": "dara/density/format", "correctness": "dara/density/correctness"},
        "weight": {"format": "dara/weight/format", "correctness": "dara/weight/correctness"}}
    ours = str(tmp_path / "runs")
    for name, args in (
            ("curves", ["curves", curves, "--metrics", "train_format,val_format", "--group-by", "model_size",
                        "--threshold", "train_format=0.8"]),
            ("channels", ["channels", curves, "--group-by", "model_size"]),
            ("ckpt", ["checkpoints", checkpoints, "--metrics", "average_accuracy,average_format",
                      "--group-by", "model_size"]),
            ("ours", ["curves", ours, "--metrics", "reward/format/mean", "--threshold", "0.8"]),
            ("ours_ch", ["channels", ours])):
        assert main(["plot", *args, "--out", str(tmp_path / name)]) == 0
        png, pdf = tmp_path / f"{name}.png", tmp_path / f"{name}.pdf"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
        assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 5_000


def test_threshold_lines_and_errors(tmp_path):
    assert parse_threshold_lines(["0.5", "b=0.9"], ["a", "b"]) == {"a": [0.5], "b": [0.5, 0.9]}
    with pytest.raises(ValueError, match="not among the plotted metrics"):
        parse_threshold_lines(["c=0.9"], ["a"])
    bad = tmp_path / "bad" / "metrics.jsonl"
    bad.parent.mkdir()
    bad.write_text('{"step": 1, "x": 1}\nnot json\n{"step": 3}\n')
    with pytest.raises(RunLogError, match="metrics.jsonl:2"):
        load_runs(bad)
    # a truncated last line (run killed mid-write) is dropped, the rest reads
    bad.write_text('{"step": 1, "x": 1, "method": "m", "seed": 0}\n{"step": 2, "x"')
    assert pd.Series(load_runs(bad)["step"]).tolist() == [1]


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
    assert main(["report", str(AUTHORS_REFERENCE), "--out", str(out)]) == 0
    return out, Page(out)


def test_authors_files_rebuild_table_1_beside_their_values_with_dara_sym_named(authors_page):
    _, page = authors_page
    per_run = pd.read_csv(AUTHORS_REFERENCE / AUTHORS_PER_RUN)
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
    steps = threshold_steps(pd.read_csv(CURVES), "train_format", 0.8, group_by=["model_size"])  # its loop: the median-rule test above
    for row in steps.itertuples():
        assert row_of(rows, row.model_size, method_label(row.method))["step"] == (
            "never" if pd.isna(row.step) else str(int(row.step)))
    assert {"reference_training_dynamics_curves.png", "reference_training_dynamics_channels.png"} <= {
        Path(src).name for src in page.images}
    assert any(item.startswith("commit: ") for item in page.footer)
    assert any("final_per_run.csv (sha256" in item for item in page.footer)
    method_note = next(i for i in source_items(AUTHORS_REFERENCE / "SOURCE.md") if i.startswith("Method names"))
    assert method_note.endswith("(this project's `rvpo`, recipe `rvpo`).")  # continuation lines joined
    assert f"SOURCE.md: {method_note}" in page.footer
    assert sum(item.startswith("SOURCE.md: Commits:") for item in page.footer) == 1
    assert f'<a href="{(AUTHORS_REFERENCE / "SOURCE.md").resolve().as_uri()}">' in (out / "index.html").read_text()


def write_sweep_run(root: Path, task: str, model: str, method: str, seed: int, steps: int, rise: float):
    """A run folder like dara.train leaves: a format reward rising at `rise` per step, DARA channel instruments,
    run_info.json and a verl_config.yaml naming the data and the grader."""
    run, data = root / f"{task}-{model}-{method}-s{seed}", root / "assets"
    data.mkdir(parents=True, exist_ok=True)
    (data / "data_card.json").write_text(json.dumps({"rows": 4}))
    fmt = [min(1.0, rise * step + 0.01 * seed) for step in range(1, steps + 1)]
    write_run(run, [{"step": step, "reward/format/mean": f, "reward/correctness/mean": -1 + f,
                      "dara/density/format": 1 - f, "dara/density/correctness": 0.5, "dara/weight/format": 1.0,
                      "dara/weight/correctness": float(np.sqrt(2))} for step, f in enumerate(fmt, 1)],
               method=method, seed=seed, task=task, model=model)
    (run / "verl_config.yaml").write_text(
        f"data:\n  train_files: {data / 'train.parquet'}\n"
        "reward:\n  custom_reward_function:\n    path: rewards/verl_entry.py\n    name: compute_score\n"
        "  reward_manager:\n    name: DaraParallelRewardManager\n")


def test_our_runs_sit_beside_the_authors_curves_and_an_unreadable_run_is_left_out(tmp_path):
    for seed in (0, 1):
        write_sweep_run(tmp_path / "sweep", "toolrl", "qwen2.5-1.5b-instruct", "dara_sym", seed, 20, 0.07)
        write_sweep_run(tmp_path / "sweep", "toolrl", "qwen2.5-1.5b-instruct", "dara_asym", seed, 20, 0.09)
    write_sweep_run(tmp_path / "sweep", "smoke", "tiny", "dara_asym", 0, 3, 0.3)
    (tmp_path / "sweep" / "failed-before-step-1").mkdir()
    (tmp_path / "sweep" / "failed-before-step-1" / "metrics.jsonl").write_text("")
    assert main(["report", str(tmp_path / "sweep"), "--out", str(tmp_path / "page"),
                 "--reference", str(AUTHORS_REFERENCE)]) == 0
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
    per_run = pd.read_csv(AUTHORS_REFERENCE / AUTHORS_PER_RUN)
    ours = per_run[per_run["retained"] & (per_run["model_size"] == "1.5B")].drop(columns=["model_size", "retained"])
    ours = ours.replace({"method": {"dara": "dara_sym", "gd2po_hard": "gd2po_hard_after"}}).assign(
        model="qwen2.5-1.5b-instruct", average_length_le_16=50.0, average_think_words=12.5)
    ours.to_csv(tmp_path / "per_run.csv", index=False)
    build_report([tmp_path / "per_run.csv"], tmp_path / "page", reference=AUTHORS_REFERENCE)
    rows = Page(tmp_path / "page").table("Table 1")
    methods = {r[rows[0].index("method")] for r in rows[1:]}
    assert {"dara_sym", "gd2po_hard_after"} <= methods and not methods & {"dara", "gd2po_hard"}
    paper = pd.read_csv(PAPER / "final_method_results.csv").query("model_size == '1.5B'").set_index("method")
    for ours_name, theirs in (("dara_sym", "dara"), ("gd2po_hard_after", "gd2po_hard")):
        cell = row_of(rows, "1.5B", ours_name, "100")["average_accuracy (paper)"]
        assert cell.startswith(f"{paper.at[theirs, 'average_accuracy_mean']:.2f}")
        assert cell.endswith(f"(n={paper.at[theirs, 'n']})")
    row = row_of(rows, "1.5B", "dara_sym", "100")
    assert row["average_length_le_16"] == "50.00 ± 0.00" and row["average_length_le_16 (paper)"] == NOT_IN_PAPER
