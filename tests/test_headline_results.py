"""`python -m results headline` (results/headline.py) on synthetic race run folders in dara.train's format, read
with the real loader: every number against a plain loop over the same data."""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

import pandas as pd
import pytest

from results import headline
from results.cli import main
from results.loaders import RunLogError
from tests.test_results_thresholds import write_run as run_folder

METRIC, THRESHOLD = "reward/format/mean", 0.5
STEPS, LOGGED = 8, 10  # the protocol's steps; every synthetic run logs more, the command keeps 1..STEPS
SEEDS = (0, 1, 2, 3, 4)
TASK, MODEL = "smoke_sparse", "tiny_sparse"


def run_name(method: str, seed: int, variant: str = "") -> str:
    return "-".join([TASK, MODEL, method, *([variant] if variant else []), f"s{seed}"])


def write_run(root: Path, method: str, seed: int, steps: int = LOGGED, variant: str = "",
              curve: list[float] | None = None) -> list[float]:
    """A run folder as dara.train leaves it (a noisy format rise quantised like 64 responses; grpo seed 3 never
    gets there); returns the format curve written."""
    rng = random.Random(f"{method}-{seed}")
    speed = {"grpo": 0.07, "gdpo": 0.075, "dara_sym": 0.09, "dara_asym": 0.1}[method]
    cap = 0.45 if (method, seed) == ("grpo", 3) else 1.0
    curve = curve or [round(min(cap, max(0.0, speed * s + rng.uniform(-0.12, 0.12))) * 64) / 64 for s in range(1, 11)]
    config = {"algorithm.adv_estimator": method, "actor_rollout_ref.rollout.n": 4, "run.seed": seed,
              "actor_rollout_ref.actor.data_loader_seed": seed, "run.method": method, "run.task": TASK}
    run_folder(root / run_name(method, seed, variant), [
        {"step": step, METRIC: value, "reward/correctness/mean": value - 0.5, "dara/density/format": round(
            1.0 - abs(2 * value - 1.0), 4), "dara/density/correctness": 0.5625, "actor/entropy": 0.31,
         **({"dara/weight/format": round(1.0 + value, 4), "dara/weight/correctness": 1.0} if "dara" in method else {})}
        for step, value in enumerate(curve[:steps], 1)],
        method=method, seed=seed, task=TASK, model=MODEL, estimator=method, config=config)
    return curve


@pytest.fixture(scope="module")
def race(tmp_path_factory):
    """The 20 race runs and a pilot run (seed 100, which must not count); returns (root, curves)."""
    root = tmp_path_factory.mktemp("cpu_headline")
    curves = {(method, seed): write_run(root, method, seed) for method in headline.METHODS for seed in SEEDS}
    write_run(root, "grpo", 100, steps=4, variant="pilot", curve=[1.0] * 4)
    return root, curves


def first_reaching(values: list[float]) -> int | None:
    return next((step for step, value in enumerate(values, 1) if value >= THRESHOLD), None)


def test_race_tables_equal_a_plain_loop(race):
    """The pilot left out, steps 1..STEPS in method and seed order; runs.csv, thresholds.csv and the summary."""
    root, curves = race
    frame = headline.race_frame(root, headline.METHODS, STEPS)
    assert set(frame["seed"]) == set(SEEDS) and not frame["run"].str.contains("-pilot-").any()
    table = headline.runs_table(frame)
    assert list(table.columns) == ["method", "seed", "step", METRIC, "reward/correctness/mean", "dara/density/format",
                                   "dara/weight/format", "dara/density/correctness", "dara/weight/correctness"]
    expected = [(m, s, t) for m in headline.METHODS for s in SEEDS for t in range(1, STEPS + 1)]
    assert list(table[["method", "seed", "step"]].itertuples(index=False, name=None)) == expected
    assert list(table[METRIC]) == [curves[(m, s)][t - 1] for m, s, t in expected]
    assert table["dara/weight/format"].isna().tolist() == [m in ("grpo", "gdpo") for m, _, _ in expected]
    steps = headline.thresholds_table(frame, METRIC, THRESHOLD)
    assert list(steps.columns) == ["method", "seed", "step", "dara_active_steps", "collapsed"]
    per_run = {key: first_reaching(values[:STEPS]) for key, values in curves.items()}
    assert {(m, int(s)): None if pd.isna(t) else int(t) for m, s, t, *_ in steps.itertuples(index=False)} == per_run
    summary = headline.summary_table(frame, METRIC, THRESHOLD)
    assert list(summary["method"]) == list(headline.METHODS)
    for row in summary.itertuples(index=False):
        medians = [statistics.median(curves[(row.method, seed)][step] for seed in SEEDS) for step in range(STEPS)]
        assert (None if pd.isna(row.median_curve_step) else row.median_curve_step) == first_reaching(medians)
        seeds = [per_run[(row.method, seed)] for seed in SEEDS]
        assert row.seed_steps == ", ".join("-" if s is None else str(s) for s in seeds)
        reached = [s for s in seeds if s is not None]
        assert (row.reached, row.runs, row.step_min, row.step_max, row.step_median) == (
            len(reached), len(SEEDS), min(reached), max(reached), statistics.median(reached))


def test_short_missing_and_duplicated_runs_are_errors_naming_them(tmp_path):
    for seed in (0, 1):
        write_run(tmp_path / "a", "grpo", seed)
    write_run(tmp_path / "a", "gdpo", 0)
    write_run(tmp_path / "a", "gdpo", 1, steps=STEPS - 3)
    with pytest.raises(RunLogError, match=run_name("gdpo", 1)) as err:
        headline.race_frame(tmp_path / "a", ["grpo", "gdpo"], STEPS)
    assert run_name("gdpo", 0) not in str(err.value)
    with pytest.raises(RunLogError, match="no run of method.s. dara_sym"):
        headline.race_frame(tmp_path / "a", ["grpo", "dara_sym"], STEPS)
    write_run(tmp_path / "b", "grpo", 0)  # the same method and seed again, in another folder
    with pytest.raises(RunLogError, match="several runs of one method and seed"):
        headline.race_frame(tmp_path, ["grpo"], 4)


def test_cli_writes_every_file_and_rebuilds_them_from_its_runs_csv(race, tmp_path, capsys):
    root, _ = race
    protocol, out, again = tmp_path / "protocol.json", tmp_path / "results", tmp_path / "again"
    protocol.write_text(json.dumps({"metric": METRIC, "threshold": THRESHOLD, "steps": STEPS, "temperature": 1.0,
                                    "group_size": 4, "prompts_per_step": 16, "save_freq": 5, "rule": "synthetic"}))
    assert main(["headline", str(root), "--protocol", str(protocol), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for name in ("runs.csv", "thresholds.csv", "statistics.csv", "summary.md", "headline.png", "headline.pdf"):
        assert (out / name).stat().st_size > 0 and f"wrote {out / name}" in printed, name
    assert not list(out.glob(".*.tmp"))  # atomic writes leave no temporary behind
    assert (out / "headline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = (out / "summary.md").read_text()
    assert f"`{METRIC}`, threshold: {THRESHOLD:g} (>=), steps 1-{STEPS}" in summary and "## Paired by seed" in summary
    assert "| method | median_curve_step | seed_steps | reached | runs |" in summary
    stats = pd.read_csv(out / "statistics.csv")
    assert list(stats["comparison"]) == ["dara_asym - gdpo", "dara_sym - gdpo", "gdpo - grpo"] * 2
    assert set(stats["n"]) == {len(SEEDS)}
    assert all(any(line.strip().startswith(m) and "/5" in line for line in printed.splitlines()) for m in headline.METHODS)
    # the committed runs.csv gives the same tables as the run folders did
    assert main(["headline", str(out / "runs.csv"), "--protocol", str(protocol), "--out", str(again)]) == 0
    for name in ("runs.csv", "thresholds.csv", "statistics.csv", "summary.md"):
        assert (again / name).read_text() == (out / name).read_text(), name
    short = pd.read_csv(out / "runs.csv").query("not (method == 'gdpo' and seed == 1 and step == 3)")
    short.to_csv(tmp_path / "short.csv", index=False)
    with pytest.raises(RunLogError, match="gdpo seed 1"):
        headline.frame_from_runs_csv(tmp_path / "short.csv", headline.METHODS, STEPS)

