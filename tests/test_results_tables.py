"""The authors' BFCL tables rebuilt from their per-run files; BFCL group aggregation; seed tables of our runs."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dara import AUTHORS_REFERENCE
from results import bfcl
from results.cli import main
from results.collect import collect
from results.tables import build_table, drop_rows, parse_condition, summarise
from tests.test_results_thresholds import write_run

PAPER = AUTHORS_REFERENCE / "paper_bfcl_v4_20260920"
REF = AUTHORS_REFERENCE / "reference"


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
