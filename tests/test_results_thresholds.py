"""Threshold steps (docs/results.md, "Threshold steps") against plain-loop re-implementations, on the authors'
tool-calling training curves and on curves with known answers."""

from __future__ import annotations

import json
import statistics

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dara import AUTHORS_REFERENCE
from results.cli import AUTHORS_CURVES, AUTHORS_PER_RUN, main
from results.thresholds import first_sustained_step, trailing_mean

CURVES = AUTHORS_REFERENCE / AUTHORS_CURVES


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
