"""The BFCL checkpoint-dynamics figure rebuilt from our checkpoints' evaluations, the authors' curve beside."""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

import pandas as pd
import pytest

from dara import AUTHORS_REFERENCE
from results import bfcl
from results.cli import main as results_main
from results.dynamics import checkpoint_scores, checkpoint_table
from results.evaluation import bfcl_eval
from results.loaders import RunLogError
from results.tables import authors_rows

REFERENCE = AUTHORS_REFERENCE
PLOT_DATA = REFERENCE / "paper_bfcl_v4_20260920" / "dynamics_export" / "plot_data.csv"
REPO = Path(__file__).resolve().parents[1]


def write_evaluation(root: Path, run: str, step: int, accuracy: float, **identity) -> None:
    """A BFCL summary.json as `results.evaluation bfcl aggregate` writes it (every case of a category alike)."""
    scored = [{"case_id": f"{c}_{i}", "category": c, "valid": i < accuracy * 4, "format": 1.0, "length": 0.5,
               "length_le_16": 0.5, "think_words": 10.0} for c in bfcl.CATEGORIES for i in range(4)]
    summary = {**bfcl_eval.summarise_bfcl(scored), "bench": "bfcl", "missing_cases": 0,
               "run": {"run_name": run, "step": step, **identity}}
    folder = root / run / f"step_{step}"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps(summary))


def sweep(root: Path) -> dict:
    """Two seeds of dara_sym, one seed of a w_max variant, the base model at step 0; what each should score."""
    model = "qwen2.5-1.5b-instruct"
    config = {"algorithm.dara.w_max": 5.0, "run.seed": 0}
    write_evaluation(root, "base", 0, 0.25, method="base", model=model)
    expected = {}
    for run, seed, w_max, accuracies in (("sym-s0", 0, 5.0, (0.5, 0.75)), ("sym-s1", 1, 5.0, (0.75, 1.0)),
                                         ("capped-s0", 0, 2.0, (0.25, 0.5))):
        for step, accuracy in zip((10, 20), accuracies, strict=True):
            write_evaluation(root, run, step, accuracy, method="dara_sym", seed=seed, model=model, task="toolrl",
                             config={**config, "algorithm.dara.w_max": w_max, "run.seed": seed})
            expected.setdefault((w_max, step), []).append(100 * accuracy)
    return expected


def test_checkpoint_table_is_the_seed_mean_per_variant_and_step(tmp_path):
    expected = sweep(tmp_path)
    table = checkpoint_table(checkpoint_scores(tmp_path), ["average_accuracy", "average_length_le_16"])
    rows = {(r["method"], r["step"]): r for r in table.to_dict("records")}
    assert set(rows) == {(m, s) for m in ("dara_sym w_max=5.0", "dara_sym w_max=2.0") for s in (0, 10, 20)}
    for (w_max, step), values in expected.items():
        row = rows[(f"dara_sym w_max={w_max}", step)]
        assert row["n"] == len(values) and row["average_accuracy_mean"] == pytest.approx(statistics.mean(values))
        assert row["base_method"] == "dara_sym" and row["average_length_le_16_mean"] == pytest.approx(50.0)
    # the base model starts every curve of its model
    assert rows[("dara_sym w_max=5.0", 0)]["average_accuracy_mean"] == pytest.approx(25.0)
    assert rows[("dara_sym w_max=5.0", 0)]["n"] == 1 and rows[("dara_sym w_max=5.0", 10)]["seeds"] == "0,1"


def test_the_authors_curve_is_matched_under_our_names():
    paper = pd.read_csv(PLOT_DATA)
    theirs = authors_rows(paper, {"model_size": "1.5B"}, "dara_sym")
    assert list(theirs["step"]) == list(range(0, 101, 10)) and set(theirs["method"]) == {"dara"}
    assert authors_rows(paper, {"model_size": "1.5B"}, "dara_asym").empty


def test_plot_dynamics_writes_our_table_and_the_figure(tmp_path, capsys):
    sweep(tmp_path / "eval")
    out = tmp_path / "fig" / "dynamics"
    assert results_main(["plot", "dynamics", str(tmp_path / "eval"), "--paper", str(PLOT_DATA),
                         "--metrics", "average_accuracy,average_format", "--out", str(out)]) == 0
    assert {p.name for p in out.parent.iterdir()} == {"dynamics.csv", "dynamics.png", "dynamics.pdf"}
    table = pd.read_csv(out.with_suffix(".csv"))
    assert list(table.columns[:6]) == ["model_size", "method", "base_method", "step", "n", "seeds"]
    assert results_main(["plot", "dynamics", str(tmp_path / "eval"), "--paper", str(tmp_path / "none.csv"),
                         "--out", str(out)]) == 2
    assert "none.csv: no such file" in capsys.readouterr().err


def test_a_step_folder_that_disagrees_with_its_summary_is_refused(tmp_path):
    write_evaluation(tmp_path, "run", 10, 0.5, method="grpo", seed=0, model="m")
    (tmp_path / "run" / "step_10").rename(tmp_path / "run" / "step_20")
    with pytest.raises(RunLogError, match="scores step 10, its folder names step 20"):
        checkpoint_scores(tmp_path)


@pytest.mark.slow  # two real BFCL evaluations of the tiny model (~30 s)
def test_a_sweeps_checkpoints_are_evaluated_and_plotted(smoke_assets, tmp_path):
    pytest.importorskip("bfcl_eval")
    run = tmp_path / "sweep" / "toolrl-tiny-grpo-s0"
    (run / "hf_checkpoints").mkdir(parents=True)
    (run / "run_info.json").write_text(json.dumps({"run_name": run.name, "method": "grpo", "seed": 0,
                                                   "task": "toolrl", "model": "tiny"}))
    os.symlink(smoke_assets["model_dir"], run / "hf_checkpoints" / "global_step_10")
    script = REPO / "scripts" / "eval" / "eval_bfcl_checkpoints.py"
    evaluation = ["--categories", "simple_python", "--limit", "1", "--max-new-tokens", "4",
                  "--context-window", "32768"]
    sys.path.insert(0, str(script.parent))
    try:
        import eval_bfcl_checkpoints
    finally:
        sys.path.remove(str(script.parent))
    args = [str(tmp_path / "sweep"), "--eval-root", str(tmp_path / "eval"), "--base-model",
            smoke_assets["model_dir"], "--base-name", "tiny", "--", *evaluation]
    assert eval_bfcl_checkpoints.main(args) == 0
    assert sorted(p.relative_to(tmp_path / "eval").as_posix() for p in (tmp_path / "eval").glob("*/step_*")) == [
        "base/step_0", "toolrl-tiny-grpo-s0/step_10"]
    assert eval_bfcl_checkpoints.main(args) == 0  # finished evaluations are skipped
    out = tmp_path / "dynamics"
    assert results_main(["plot", "dynamics", str(tmp_path / "eval"), "--paper", "none", "--group-by", "model",
                         "--metrics", "simple_python_accuracy,simple_python_think_words", "--out", str(out)]) == 0
    table = pd.read_csv(out.with_suffix(".csv"))
    assert table[["model", "method", "step", "n"]].values.tolist() == [["tiny", "grpo", 0, 1], ["tiny", "grpo", 10, 1]]
