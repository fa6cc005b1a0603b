"""Threshold steps (EXPERIMENTS.md "Headline speed metric") against plain-loop re-implementations,
on the authors' tool-calling training curves and on curves with known answers."""

from __future__ import annotations

import csv
import json
import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dara import AUTHORS_REFERENCE
from results.cli import main
from results.thresholds import first_sustained_step, threshold_steps, trailing_mean


def reference_dir() -> Path:
    return AUTHORS_REFERENCE


DYNAMICS = "reference/training_dynamics.csv"


def loop_median_steps(path: Path, metric: str, threshold: float) -> dict[tuple[str, str], int | None]:
    """Plain re-implementation of the median rule with the csv module and statistics.median."""
    values: dict[tuple[str, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            key = (row["model_size"], row["method"])
            values[key]  # register the group even when it never logs the metric
            if row[metric] != "":
                values[key][int(row["step"])].append(float(row[metric]))
    out = {}
    for key, by_step in values.items():
        out[key] = next((s for s in sorted(by_step) if statistics.median(by_step[s]) >= threshold), None)
    return out


def loop_sustained_step(steps, values, threshold, window=10, hold=20):
    """Plain loop: trailing mean over full windows; the hold must fit inside the run."""
    for i in range(window - 1, len(values) - hold):
        ok = True
        for j in range(i, i + hold + 1):
            if sum(values[j - window + 1 : j + 1]) / window < threshold:
                ok = False
                break
        if ok:
            return steps[i]
    return None


@pytest.mark.parametrize("metric", ["train_format", "val_format"])
def test_median_rule_matches_plain_loop_on_authors_curves(metric, tmp_path):
    path = reference_dir() / DYNAMICS
    expected = loop_median_steps(path, metric, 0.8)
    out = tmp_path / "steps.csv"
    assert main(["thresholds", str(path), "--metric", metric, "--threshold", "0.8", "--group-by", "model_size",
                 "--out", str(out)]) == 0
    got = pd.read_csv(out, dtype={"model_size": str})
    assert list(got.columns) == ["model_size", "method", "step"]
    assert len(got) == len(expected) == 10
    for row in got.itertuples():
        want = expected[(row.model_size, row.method)]
        assert (pd.isna(row.step) and want is None) or int(row.step) == want, (row, want)


def test_median_rule_orders_methods_as_the_paper_claims():
    """DARA reaches 0.8 training format before GDPO, and GDPO before GRPO, at both model sizes."""
    frame = pd.read_csv(reference_dir() / DYNAMICS)
    steps = threshold_steps(frame, "train_format", 0.8, group_by=["model_size"])
    table = {(r.model_size, r.method): r.step for r in steps.itertuples()}
    for size in ("1.5B", "3B"):
        assert table[(size, "dara")] < table[(size, "gdpo")] < table[(size, "grpo")]
    assert pd.isna(table[("1.5B", "dvao")])  # its median never reaches 0.8 within 100 steps


def test_step100_values_agree_with_the_per_run_file():
    """The per-run BFCL file's validation/training format at step 100 are the curve values there."""
    ref = reference_dir()
    curves = pd.read_csv(ref / DYNAMICS)
    at100 = curves[curves["step"] == 100].set_index(["model_size", "method", "seed"])
    runs = pd.read_csv(ref / "paper_bfcl_v4_20260920/final_per_run.csv").dropna(subset=["seed"])
    runs = runs[runs["source"] == "reference/per_model.csv"]
    assert len(runs) > 30
    for row in runs.itertuples():
        curve = at100.loc[(row.model_size, row.method, int(row.seed))]
        assert curve["val_format"] == pytest.approx(row.validation_format_step100)
        assert curve["train_format"] == pytest.approx(row.training_format_step100)


def test_sustained_rule_per_seed_matches_loop_on_authors_curves():
    frame = pd.read_csv(reference_dir() / DYNAMICS)
    frame = frame[frame["model_size"] == "1.5B"]
    got = threshold_steps(frame, "train_format", 0.9, rule="sustained", per_seed=True)
    assert len(got) == 27
    reached = 0
    for row in got.itertuples():
        run = frame[(frame["method"] == row.method) & (frame["seed"] == row.seed)].dropna(subset=["train_format"])
        want = loop_sustained_step(run["step"].tolist(), run["train_format"].tolist(), 0.9)
        assert (pd.isna(row.step) and want is None) or row.step == want
        reached += want is not None
    assert 0 < reached < 27  # the data exercises both outcomes


def test_sustained_rule_known_answers():
    steps = list(range(1, 61))
    # 0 for 10 steps, then 1: the trailing 10-mean first reaches 0.95 at step 20 (all ones) and stays.
    values = [0.0] * 10 + [1.0] * 50
    assert first_sustained_step(steps, values, 0.95) == 20
    # A dip at step 30 pulls the trailing mean under 0.95 for ten steps: the first sustained start is
    # after the dip's influence has passed (step 40), since 20..39 never holds for 20 more steps.
    dipped = values.copy()
    dipped[29] = 0.0
    assert first_sustained_step(steps, dipped, 0.95) == 40
    # Too close to the end to hold for 20 more steps: never confirmed.
    assert first_sustained_step(steps[:39], values[:39], 0.95) is None
    assert first_sustained_step(steps, [0.5] * 60, 0.95) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=0, max_size=60), st.integers(1, 12), st.integers(0, 25),
       st.sampled_from([0.3, 0.5, 0.9]))
def test_sustained_rule_equals_plain_loop(values, window, hold, threshold):
    steps = list(range(len(values)))
    got = first_sustained_step(steps, values, threshold, window=window, hold=hold)
    # The cumulative-sum trailing mean may differ from the loop's sum in the last bits: check the means,
    # then the step, allowing a disagreement only at a floating-point tie with the threshold.
    means = trailing_mean(values, window)
    for i in range(window - 1, len(values)):
        assert means[i] == pytest.approx(sum(values[i - window + 1 : i + 1]) / window, abs=1e-12)
    want = loop_sustained_step(steps, values, threshold, window, hold)
    if got != want:
        assert np.any(np.isclose(means[~np.isnan(means)], threshold, atol=1e-12))


def test_median_over_seeds_ignores_steps_without_values(tmp_path):
    """Two JSONL runs, validation logged every 2 steps: the rule reads only logged steps."""
    for seed, curve in ((0, [0.1, 0.5, 0.9]), (1, [0.2, 0.7, 0.95])):
        run = tmp_path / f"dara_s{seed}"
        run.mkdir()
        (run / "run_info.json").write_text(json.dumps({"run_name": run.name, "method": "dara", "seed": seed,
                                                       "task": "toolrl", "model": "tiny"}))
        lines = []
        for step in range(0, 6):
            record = {"step": step, "reward/format/mean": step / 10}
            if step % 2 == 0:
                record["val-core/rlla/format"] = curve[step // 2]
            lines.append(json.dumps(record))
        (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "t.md"
    assert main(["thresholds", str(tmp_path), "--metric", "val-core/rlla/format", "--threshold", "0.6",
                 "--group-by", "task", "--format", "md", "--out", str(out)]) == 0
    text = out.read_text()
    assert "| task | method | step |" in text and "| toolrl | dara | 2 |" in text  # median(0.5, 0.7) = 0.6


def test_math_speed_metric_per_run_then_over_seeds_from_prefilter_curves(tmp_path):
    """The paper's T_0.95: per run, the sustained rule on rollout_prefilter/length/mean (every generated
    response), then a summary over seeds; a run that never gets there is counted but not averaged."""
    rng = np.random.default_rng(12)
    expected = {}
    for method, rises in (("dara_asym", (30, 40, None)), ("gdpo", (60, 80, 70))):
        for seed, rise in enumerate(rises):
            run = tmp_path / f"{method}_s{seed}"
            run.mkdir()
            (run / "run_info.json").write_text(json.dumps({"run_name": run.name, "method": method, "seed": seed,
                                                           "task": "deepscaler", "model": "tiny"}))
            curve = [0.5 if rise is None or step < rise else 0.999 for step in range(1, 201)]
            curve = [min(1.0, v + rng.uniform(-1e-4, 1e-4)) for v in curve]
            lines = [json.dumps({"step": s, "rollout_prefilter/length/mean": v, "reward/length/mean": 1.0})
                     for s, v in zip(range(1, 201), curve, strict=True)]
            (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
            expected[(method, seed)] = loop_sustained_step(list(range(1, 201)), curve, 0.95)
    out = tmp_path / "t.csv"
    assert main(["thresholds", str(tmp_path), "--metric", "rollout_prefilter/length/mean", "--threshold", "0.95",
                 "--rule", "sustained", "--per-seed", "--seed-summary", "--out", str(out)]) == 0
    summary = pd.read_csv(out).set_index("method")
    for method in ("dara_asym", "gdpo"):
        reached = [v for (m, _), v in expected.items() if m == method and v is not None]
        assert summary.loc[method, "runs"] == 3 and summary.loc[method, "reached"] == len(reached)
        assert summary.loc[method, "step_mean"] == pytest.approx(statistics.mean(reached))
        assert summary.loc[method, "step_median"] == pytest.approx(statistics.median(reached))
    # a crossing at step t needs the window ending at t to hold the new level for 10 steps (t = rise + 9 or so)
    assert summary.loc["dara_asym", "step_min"] < summary.loc["gdpo", "step_min"]


def test_with_no_runs_thresholds_and_table_read_the_authors_files_in_the_repository(tmp_path, capsys):
    from results.cli import AUTHORS_CURVES, AUTHORS_PER_RUN

    args = ["--metric", "train_format", "--threshold", "0.8", "--group-by", "model_size"]
    assert main(["thresholds", *args, "--out", str(tmp_path / "default.csv")]) == 0
    assert str(reference_dir() / AUTHORS_CURVES) in capsys.readouterr().err
    assert main(["thresholds", str(reference_dir() / AUTHORS_CURVES), *args, "--out", str(tmp_path / "given.csv")]) == 0
    assert (tmp_path / "default.csv").read_bytes() == (tmp_path / "given.csv").read_bytes()
    table = ["--metrics", "average_accuracy", "--group-by", "model_size,method,step", "--format", "csv"]
    assert main(["table", *table, "--out", str(tmp_path / "t1.csv")]) == 0
    assert main(["table", str(reference_dir() / AUTHORS_PER_RUN), *table, "--out", str(tmp_path / "t2.csv")]) == 0
    assert (tmp_path / "t1.csv").read_bytes() == (tmp_path / "t2.csv").read_bytes()
    assert len((tmp_path / "t1.csv").read_text().splitlines()) > 5
