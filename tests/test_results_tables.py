"""Tables, variants and figures: the authors' BFCL tables rebuilt from their per-run files; BFCL group aggregation;
seed tables of our runs; runs that differ in more than the seed apart in every table, labelled by what differs
(older run folders pool as before); figures (PNG and PDF) from the authors' curves and from our run logs."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from dara import AUTHORS_REFERENCE
from dara.run_folder import experiment_config
from results import bfcl, thresholds
from results.cli import main
from results.collect import collect
from results.loaders import RunLogError, load_runs
from results.plots import channel_columns, parse_threshold_lines
from results.report import build_report
from results.tables import build_table, drop_rows, parse_condition, summarise
from results.variants import short_names, variant_labels
from tests.test_results_thresholds import write_run

PAPER = AUTHORS_REFERENCE / "paper_bfcl_v4_20260920"
REF = AUTHORS_REFERENCE / "reference"
METRIC = "reward/format/mean"


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
    steps = thresholds.threshold_steps(frame, METRIC, 0.85)
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


def records(seed: int) -> list[dict]:
    return [{"step": step, "reward/format/mean": min(1.0, step / 10 + seed / 50), "dara/density/format": 0.5 / step,
             "dara/density/correctness": 0.4, "dara/weight/format": min(5.0, (0.4 * step / 0.5) ** 0.5),
             "dara/weight/correctness": 1.0} for step in range(1, 13)]


def test_plots_from_authors_files_and_from_our_run_logs(tmp_path):
    curves = str(AUTHORS_REFERENCE / "reference" / "training_dynamics.csv")
    checkpoints = str(AUTHORS_REFERENCE / "paper_bfcl_v4_20260920" / "dynamics_export" / "plot_data.csv")
    for method in ("gdpo", "dara_asym"):
        for seed in (0, 1):
            write_run(tmp_path / "runs" / f"{method}_s{seed}", records(seed), method=method, seed=seed)
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
