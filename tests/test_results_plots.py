"""Figures render to PNG and PDF from the authors' curves and from our JSONL run logs."""

from __future__ import annotations

import pandas as pd
import pytest

from dara import AUTHORS_REFERENCE
from results.cli import main
from results.loaders import RunLogError, load_runs
from results.plots import channel_columns, parse_threshold_lines
from tests.test_results_thresholds import write_run


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
