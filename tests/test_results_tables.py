"""The authors' BFCL tables rebuilt from their per-run files; BFCL group aggregation."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dara import AUTHORS_REFERENCE
from results import bfcl
from results.cli import main
from results.tables import build_table, drop_rows, parse_condition, summarise


def reference_dir() -> Path:
    return AUTHORS_REFERENCE


PAPER = "paper_bfcl_v4_20260920"


def metrics_of(table: pd.DataFrame) -> list[str]:
    """Metric names of a per-method file, read from its <metric>_mean columns."""
    return [c[: -len("_mean")] for c in table.columns if c.endswith("_mean")]


def assert_tables_match(ours: pd.DataFrame, theirs: pd.DataFrame, keys: list[str], metrics: list[str]):
    theirs = theirs.rename(columns={c: c[:-4] + "_sd" for c in theirs.columns if c.endswith("_std")})
    assert len(ours) == len(theirs)
    merged = ours.merge(theirs, on=keys, suffixes=("", "@paper"), validate="one_to_one")
    assert len(merged) == len(theirs), "a method/model row of the paper is missing from ours"
    assert (merged["n"] == merged["n@paper"]).all()
    assert (merged["seeds"] == merged["seeds@paper"].fillna("").astype(str)).all()
    for metric in metrics:
        np.testing.assert_allclose(merged[f"{metric}_mean"], merged[f"{metric}_mean@paper"], rtol=1e-10, atol=1e-10)
        single = merged["n"] == 1  # sample sd is undefined for one run: ours empty, theirs empty or 0
        np.testing.assert_allclose(merged.loc[~single, f"{metric}_sd"], merged.loc[~single, f"{metric}_sd@paper"],
                                   rtol=1e-9, atol=1e-10)
        assert merged.loc[single, f"{metric}_sd"].isna().all()
        assert merged.loc[single, f"{metric}_sd@paper"].fillna(0).eq(0).all()


def test_paper_table1_rebuilds_from_per_run_file():
    """final_method_results.csv (Table 1, BFCL v4 at step 100) from final_per_run.csv, retained runs."""
    ref = reference_dir()
    theirs = pd.read_csv(ref / PAPER / "final_method_results.csv")
    metrics = metrics_of(theirs)
    assert len(metrics) == 8
    ours = build_table([ref / PAPER / "final_per_run.csv"], metrics, group_by=["model_size", "method", "step"],
                       drop_if=["retained==False"])
    assert_tables_match(ours, theirs, ["model_size", "method", "step"], metrics)


@pytest.mark.parametrize("name,drop", [("all_seeds.csv", []), ("selected_seeds.csv", ["val_format@100<0.8"])])
def test_seed_tables_rebuild_from_per_model_file(name, drop):
    """all_seeds.csv = every run; selected_seeds.csv drops the runs whose step-100 validation format
    (read from the training curves) is under 0.8."""
    ref = reference_dir() / "reference"
    theirs = pd.read_csv(ref / name)
    metrics = metrics_of(theirs)
    ours = build_table([ref / "per_model.csv"], metrics, group_by=["model_size", "method"], drop_if=drop,
                       attach=[(ref / "training_dynamics.csv", "val_format@100")] if drop else [])
    assert_tables_match(ours, theirs, ["model_size", "method"], metrics)


def test_selection_rule_actually_drops_runs():
    ref = reference_dir() / "reference"
    every = build_table([ref / "per_model.csv"], ["v4_live"], group_by=["model_size", "method"])
    kept = build_table([ref / "per_model.csv"], ["v4_live"], group_by=["model_size", "method"],
                       attach=[(ref / "training_dynamics.csv", "val_format@100")], drop_if=["val_format@100<0.8"])
    assert every["n"].sum() - kept["n"].sum() == 2


def test_bfcl_group_aggregation_reproduces_v3_columns():
    """Live = micro mean over the four live categories (258/1,053/16/24); Non-Live = mean of four."""
    table = pd.read_csv(reference_dir() / "reference" / "per_model.csv")
    for row in table.to_dict("records"):
        scores = {
            "live_simple": row["v3_live_simple"], "live_multiple": row["v3_live_multiple"],
            "live_parallel": row["v3_live_parallel"], "live_parallel_multiple": row["v3_live_parallel_multiple"],
            "simple": row["v3_non_live_simple"], "multiple": row["v3_non_live_multiple"],
            "parallel": row["v3_non_live_parallel"], "parallel_multiple": row["v3_non_live_parallel_multiple"],
        }
        assert bfcl.live_score(scores) == pytest.approx(row["v3_live"], rel=1e-12)
        assert bfcl.non_live_score(scores) == pytest.approx(row["v3_non_live"], rel=1e-12)


def test_bfcl_average_is_mean_of_groups_in_every_paper_file():
    ref = reference_dir() / PAPER
    runs = pd.read_csv(ref / "final_per_run.csv")
    for kind in ("accuracy", "format"):
        groups = runs[[f"{g}_{kind}" for g in bfcl.GROUPS]].mean(axis=1)
        np.testing.assert_allclose(groups, runs[f"average_{kind}"], rtol=1e-12)
    for path in (ref / "step60" / "method_results.csv", ref / "dynamics_export" / "plot_data.csv"):
        table = pd.read_csv(path)
        groups = table[[f"{g}_accuracy_mean" for g in bfcl.GROUPS]].mean(axis=1)
        np.testing.assert_allclose(groups, table["average_accuracy_mean"], rtol=1e-10)


def test_bfcl_aggregate_from_categories_equals_plain_weights():
    rng = np.random.default_rng(0)
    scores = {c: float(rng.uniform(0, 1)) for c in bfcl.CATEGORIES}
    out = bfcl.aggregate(scores)
    live = sum(scores[c] * n for c, n in [("live_simple", 258), ("live_multiple", 1053), ("live_parallel", 16),
                                           ("live_parallel_multiple", 24)]) / 1351
    simple = (scores["simple_python"] + scores["simple_java"] + scores["simple_javascript"]) / 3
    non_live = (simple + scores["multiple"] + scores["parallel"] + scores["parallel_multiple"]) / 4
    multi = sum(scores[c] for c in bfcl.MULTI_TURN_CATEGORIES) / 4
    assert out == pytest.approx({"live": live, "non_live": non_live, "multi_turn": multi,
                                 "average": (live + non_live + multi) / 3})
    with pytest.raises(KeyError, match="multi_turn_base"):
        bfcl.aggregate({k: v for k, v in scores.items() if k != "multi_turn_base"})


def test_summarise_equals_loop_and_flags_missing_values():
    frame = pd.DataFrame({"method": ["a", "a", "a", "b"], "seed": [0, 1, 2, 0], "x": [1.0, 2.0, 4.0, 3.0]})
    out = summarise(frame, ["method"], ["x"]).set_index("method")
    values = [1.0, 2.0, 4.0]
    mean = sum(values) / 3
    assert out.loc["a", "x_mean"] == pytest.approx(mean)
    assert out.loc["a", "x_sd"] == pytest.approx(math.sqrt(sum((v - mean) ** 2 for v in values) / 2))
    assert out.loc["a", "seeds"] == "0,1,2" and math.isnan(out.loc["b", "x_sd"])
    frame.loc[1, "x"] = float("nan")
    with pytest.raises(ValueError, match="without 'x'"):
        summarise(frame, ["method"], ["x"])


def test_conditions():
    assert parse_condition("val_format@100 < 0.8") == ("val_format@100", "<", 0.8)
    assert parse_condition("retained==False") == ("retained", "==", False)
    frame = pd.DataFrame({"v": [0.5, None, 0.9]})
    assert drop_rows(frame, "v<0.8")["v"].isna().tolist() == [True, False]  # missing values are kept
    with pytest.raises(ValueError, match="COLUMN OP VALUE"):
        parse_condition("v ~ 3")


def test_table_cli_formats(tmp_path):
    ref = reference_dir() / PAPER
    metrics = "live_accuracy,average_accuracy,average_format"
    common = ["table", str(ref / "final_per_run.csv"), "--metrics", metrics, "--group-by", "model_size,method"]
    md, tex, csv_out = tmp_path / "t.md", tmp_path / "t.tex", tmp_path / "t.csv"
    assert main([*common, "--paper", str(ref / "final_method_results.csv"), "--out", str(md)]) == 0
    assert main([*common, "--format", "latex", "--out", str(tex)]) == 0
    assert main([*common, "--format", "csv", "--out", str(csv_out)]) == 0
    text = md.read_text()
    assert "| model_size | method | n | live_accuracy | live_accuracy (paper) |" in text
    assert "| 1.5B | dara (DARA-Sym) | 5 | 68.42 ± 1.31 | 68.42 ± 1.31 |" in text
    assert "The authors' `dara` is DARA-Sym" in text
    assert "\\begin{tabular}" in tex.read_text() and "68.42 $\\pm$ 1.31" in tex.read_text()
    assert {"n", "seeds", "live_accuracy_mean", "live_accuracy_sd"} <= set(pd.read_csv(csv_out).columns)


def test_authors_dara_is_labelled_and_set_beside_our_dara_sym():
    from results.tables import render, with_paper

    ref = reference_dir() / PAPER
    paper = pd.read_csv(ref / "final_method_results.csv")
    ours = build_table([ref / "final_per_run.csv"], ["live_accuracy"], group_by=["model_size", "method"],
                       drop_if=["retained==False"])
    ours = ours.assign(method=ours["method"].replace({"dara": "dara_sym"}))
    table = with_paper(ours, paper, ["model_size", "method"], ["live_accuracy"])
    row = table.set_index(["model_size", "method"]).loc[("1.5B", "dara_sym")]
    assert row["paper_live_accuracy_mean"] == pytest.approx(row["live_accuracy_mean"])
    text = render(table, ["model_size", "method"], ["live_accuracy"], "md")
    assert "| 1.5B | dara_sym | 5 |" in text and "DARA-Sym:" not in text and "is DARA-Sym" not in text
    # a table of the authors' own rows keeps their name, labelled
    theirs = render(with_paper(ours.assign(method="dara"), paper, ["model_size", "method"], ["live_accuracy"]),
                    ["model_size", "method"], ["live_accuracy"], "md")
    assert "| dara (DARA-Sym) |" in theirs and theirs.rstrip().endswith("scaled both signs.")


def test_collect_evaluation_summaries_into_a_seed_table(tmp_path):
    """Per-checkpoint BFCL summaries -> per-run CSV -> the seed table, with the authors' column names."""
    from results.collect import collect

    for seed, live in ((0, 60.0), (1, 70.0)):
        folder = tmp_path / f"dara_s{seed}" / "bfcl"
        folder.mkdir(parents=True)
        groups = {"live": live, "non_live": 80.0, "multi_turn": 5.0, "average": (live + 85.0) / 3}
        summary = {"bench": "bfcl", "run": {"run_name": f"dara_s{seed}", "method": "dara", "seed": seed, "step": 100},
                   "categories": {}, "groups_accuracy": groups, "groups_format": groups, "missing_cases": 0}
        (folder / "summary.json").write_text(json.dumps(summary))
    frame = collect([tmp_path])
    assert list(frame["seed"]) == [0, 1] and list(frame["live_accuracy"]) == [60.0, 70.0]
    per_run = tmp_path / "per_run.csv"
    assert main(["collect", str(tmp_path), "--out", str(per_run)]) == 0
    out = tmp_path / "t.csv"
    assert main(["table", str(per_run), "--metrics", "live_accuracy,average_accuracy", "--format", "csv",
                 "--out", str(out)]) == 0
    row = pd.read_csv(out).iloc[0]
    assert row["live_accuracy_mean"] == pytest.approx(65.0)
    assert row["live_accuracy_sd"] == pytest.approx(math.sqrt(50.0))
    assert row["seeds"] == "0,1"


def test_table_over_jsonl_runs_at_a_step_and_at_the_last_step(tmp_path):
    for seed in (0, 1, 2):
        run = tmp_path / f"gdpo_s{seed}"
        run.mkdir()
        (run / "run_info.json").write_text(json.dumps({"run_name": run.name, "method": "gdpo", "seed": seed,
                                                       "task": "toolrl", "model": "tiny"}))
        steps = 4 if seed < 2 else 3  # seed 2 stopped early
        (run / "metrics.jsonl").write_text("".join(
            json.dumps({"step": s, "val-core/rlla/format": seed + s / 10}) + "\n" for s in range(1, steps + 1)))
    at3 = build_table([tmp_path], ["val-core/rlla/format"], group_by=["task", "method"], step=3)
    assert at3.loc[0, "n"] == 3 and at3.loc[0, "val-core/rlla/format_mean"] == pytest.approx(1.3)
    last = build_table([tmp_path], ["val-core/rlla/format"], group_by=["method"], step="last")
    assert last.loc[0, "val-core/rlla/format_mean"] == pytest.approx((0.4 + 1.4 + 2.3) / 3)
