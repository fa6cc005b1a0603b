"""`python -m results headline`: the toy headline race's tables and figure (results/headline.py).

Synthetic race run folders are written in the format `python -m dara.train` writes (metrics.jsonl: one JSON
object per step; run_info.json: the run's identity and its experiment configuration), read with the real
loader, and every number the command computes is checked against a plain-Python loop over the same data.
"""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

import pandas as pd
import pytest

from results import headline
from results.cli import main
from results.loaders import RunLogError, load_runs

METRIC = "reward/format/mean"
THRESHOLD = 0.5
STEPS = 8  # the protocol's; every synthetic race run logs LOGGED steps (more), the command keeps 1..STEPS
LOGGED = 10
SEEDS = (0, 1, 2, 3, 4)
TASK, MODEL = "smoke_sparse", "tiny_sparse"
DARA = ("dara_sym", "dara_asym")

# One step's record as metrics.jsonl holds it (a subset of a real smoke_sparse grpo run's keys and values).
RECORD = {"step": 1, "rollout_prefilter/responses": 64.0, "rollout_prefilter/groups": 16.0,
          "reward/timeouts": 0.0, "reward/errors": 0.0, "actor/entropy": 0.3084440529346466,
          "dara/density/format": 0.125, "dara/density/correctness": 0.5625,
          "dara/active_groups/format": 2.0, "dara/active_groups/correctness": 9.0,
          "reward/format/mean": 0.03125, "reward/correctness/mean": -0.3125,
          "actor/pg_loss": 0.006711113499477506, "actor/grad_norm": 0.17605925351381302,
          "critic/score/mean": -0.28125, "response_length/mean": 22.5}
# run_info.json as dara.train writes it (its "config" cut down to a few keys, the seed's among them).
RUN_INFO = {"run_name": "smoke_sparse-tiny_sparse-grpo-s100", "method": "grpo", "seed": 100,
            "task": TASK, "model": MODEL, "estimator": "grpo", "reward_channels": ["format", "correctness"],
            "command": "dara/train.py task=smoke_sparse model=tiny_sparse estimator=grpo run.seed=100",
            "recipe": "smoke_sparse", "reward_options": {"num_processes": 1}, "estimator_module": None,
            "config": {"algorithm.adv_estimator": "grpo", "actor_rollout_ref.rollout.temperature": 1.0,
                       "actor_rollout_ref.rollout.n": 4, "data.train_batch_size": 16,
                       "actor_rollout_ref.actor.data_loader_seed": 100, "run.seed": 100, "run.method": "grpo",
                       "run.task": TASK, "run.model": MODEL}}


def run_name(method: str, seed: int, variant: str = "") -> str:
    return "-".join([TASK, MODEL, method, *([variant] if variant else []), f"s{seed}"])


def format_curve(method: str, seed: int, steps: int = LOGGED) -> list[float]:
    """A run's format rate per step: a noisy rise, quantised like 64 responses; one run never gets there."""
    rng = random.Random(f"{method}-{seed}")
    speed = {"grpo": 0.07, "gdpo": 0.075, "dara_sym": 0.09, "dara_asym": 0.1}.get(method, 0.05)
    cap = 0.45 if (method, seed) == ("grpo", 3) else 1.0
    return [round(min(cap, max(0.0, speed * step + rng.uniform(-0.12, 0.12))) * 64) / 64
            for step in range(1, steps + 1)]


def write_run(root: Path, method: str, seed: int, steps: int = LOGGED, variant: str = "",
              curve: list[float] | None = None) -> list[float]:
    """A run folder as dara.train leaves it; returns the format curve written."""
    name = run_name(method, seed, variant)
    folder = root / name
    folder.mkdir(parents=True)
    info = json.loads(json.dumps(RUN_INFO))
    info.update(run_name=name, method=method, seed=seed, estimator=method,
                command=RUN_INFO["command"].replace("grpo", method).replace("100", str(seed)))
    info["config"].update({"algorithm.adv_estimator": method, "run.method": method, "run.seed": seed,
                           "actor_rollout_ref.actor.data_loader_seed": seed})
    (folder / "run_info.json").write_text(json.dumps(info, indent=2))
    curve = curve if curve is not None else format_curve(method, seed, steps)
    with open(folder / "metrics.jsonl", "w") as handle:
        for step, value in enumerate(curve[:steps], 1):
            record = {**RECORD, "step": step, METRIC: value, "reward/correctness/mean": value - 0.5,
                      "dara/density/format": round(1.0 - abs(2 * value - 1.0), 4)}
            if method in DARA:
                record["dara/weight/format"] = round(1.0 + value, 4)
                record["dara/weight/correctness"] = 1.0
            handle.write(json.dumps(record) + "\n")
    return curve


def write_protocol(path: Path, steps: int = STEPS, **changes) -> Path:
    protocol = {"metric": METRIC, "threshold": THRESHOLD, "steps": steps, "temperature": 1.0, "group_size": 4,
                "prompts_per_step": 16, "save_freq": 5, "rule": "synthetic", "pilot": {}, **changes}
    path.write_text(json.dumps(protocol, indent=2))
    return path


@pytest.fixture(scope="module")
def race(tmp_path_factory):
    """The 20 race runs and a pilot run (seed 100, which must not count); returns (root, curves)."""
    root = tmp_path_factory.mktemp("cpu_headline")
    curves = {(method, seed): write_run(root, method, seed) for method in headline.METHODS for seed in SEEDS}
    write_run(root, "grpo", 100, steps=4, variant="pilot", curve=[1.0] * 4)
    return root, curves


def first_reaching(values: list[float], threshold: float) -> int | None:
    for step, value in enumerate(values, 1):
        if value >= threshold:
            return step
    return None


# ----------------------------------------------------------------------------------- the data
def test_synthetic_run_folders_load_with_the_real_loader(race):
    root, _ = race
    frame = load_runs(root / run_name("dara_sym", 2))
    assert set(frame["method"]) == {"dara_sym"} and set(frame["seed"]) == {2}
    assert list(frame["run"].unique()) == [run_name("dara_sym", 2)]
    assert list(frame["step"]) == list(range(1, LOGGED + 1))
    logged = {METRIC, "dara/density/format", "dara/weight/format", "config_id", "base_method"}
    assert logged <= set(frame.columns)


def test_race_frame_leaves_out_the_pilot_and_keeps_the_protocol_steps(race):
    root, _ = race
    frame = headline.race_frame(root, headline.METHODS, STEPS)
    assert list(frame["method"].unique()) == list(headline.METHODS)
    assert set(frame["seed"]) == set(SEEDS)  # the pilot's seed 100 is not there
    assert not frame["run"].str.contains("-pilot-").any()
    assert sorted(frame["step"].unique()) == list(range(1, STEPS + 1))
    assert len(frame) == len(headline.METHODS) * len(SEEDS) * STEPS


def test_runs_table_columns_and_rows(race):
    root, curves = race
    table = headline.runs_table(headline.race_frame(root, headline.METHODS, STEPS))
    assert list(table.columns) == ["method", "seed", "step", "reward/format/mean", "reward/correctness/mean",
                                   "dara/density/format", "dara/weight/format",
                                   "dara/density/correctness", "dara/weight/correctness"]
    assert len(table) == len(headline.METHODS) * len(SEEDS) * STEPS
    expected = [(m, s, t) for m in headline.METHODS for s in SEEDS for t in range(1, STEPS + 1)]
    assert list(table[["method", "seed", "step"]].itertuples(index=False, name=None)) == expected
    assert list(table[METRIC]) == [curves[(m, s)][t - 1] for m, s, t in expected]
    baselines = table["method"].isin(["grpo", "gdpo"])
    assert table.loc[baselines, "dara/weight/format"].isna().all()
    assert table.loc[~baselines, "dara/weight/format"].notna().all()


def test_thresholds_equal_a_plain_loop(race):
    root, curves = race
    table = headline.thresholds_table(headline.race_frame(root, headline.METHODS, STEPS), METRIC, THRESHOLD)
    assert list(table.columns) == ["method", "seed", "step", "dara_active_steps", "collapsed"]
    found = {(m, int(s)): (None if pd.isna(t) else int(t)) for m, s, t, *_ in table.itertuples(index=False)}
    expected = {key: first_reaching(values[:STEPS], THRESHOLD) for key, values in curves.items()}
    assert found == expected
    assert found[("grpo", 3)] is None  # the run that never gets there
    assert any(step is not None for step in found.values())


def test_summary_median_curve_step_equals_a_plain_loop(race):
    root, curves = race
    summary = headline.summary_table(headline.race_frame(root, headline.METHODS, STEPS), METRIC, THRESHOLD)
    assert list(summary["method"]) == list(headline.METHODS)
    for row in summary.itertuples(index=False):
        medians = [statistics.median(curves[(row.method, seed)][step] for seed in SEEDS)
                   for step in range(STEPS)]
        expected = first_reaching(medians, THRESHOLD)
        found = None if pd.isna(row.median_curve_step) else int(row.median_curve_step)
        assert found == expected, row.method
        per_seed = [first_reaching(curves[(row.method, seed)][:STEPS], THRESHOLD) for seed in SEEDS]
        assert row.seed_steps == ", ".join("-" if s is None else str(s) for s in per_seed)
        reached = [s for s in per_seed if s is not None]
        assert (row.reached, row.runs) == (len(reached), len(SEEDS))
        if reached:
            assert (row.step_min, row.step_max) == (min(reached), max(reached))
            assert row.step_median == statistics.median(reached)
        else:
            assert pd.isna(row.step_min) and pd.isna(row.step_median)


# ----------------------------------------------------------------------------------- errors
def test_an_incomplete_run_is_an_error_naming_it(tmp_path):
    for seed in (0, 1):
        write_run(tmp_path, "grpo", seed)
    write_run(tmp_path, "gdpo", 0)
    write_run(tmp_path, "gdpo", 1, steps=STEPS - 3)
    with pytest.raises(RunLogError, match=run_name("gdpo", 1)) as err:
        headline.race_frame(tmp_path, ["grpo", "gdpo"], STEPS)
    assert run_name("gdpo", 0) not in str(err.value)


def test_a_missing_method_and_a_duplicated_run_are_errors(tmp_path):
    write_run(tmp_path / "a", "grpo", 0)
    with pytest.raises(RunLogError, match="gdpo"):
        headline.race_frame(tmp_path / "a", ["grpo", "gdpo"], STEPS)
    write_run(tmp_path / "b", "grpo", 0)  # the same method and seed again, in another folder
    with pytest.raises(RunLogError, match="several runs of one method and seed"):
        headline.race_frame(tmp_path, ["grpo"], STEPS)


# ----------------------------------------------------------------------------------- the command
def test_cli_writes_every_file(race, tmp_path, capsys):
    root, curves = race
    protocol = write_protocol(tmp_path / "protocol.json")
    out = tmp_path / "results"
    assert main(["headline", str(root), "--protocol", str(protocol), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    names = ("runs.csv", "thresholds.csv", "statistics.csv", "summary.md", "headline.png", "headline.pdf")
    for name in names:
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
        assert f"wrote {out / name}" in printed
    assert not list(out.glob(".*.tmp"))  # atomic writes leave no temporary behind
    assert (out / "headline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "headline.pdf").read_bytes()[:5] == b"%PDF-"
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == len(headline.METHODS) * len(SEEDS) * STEPS
    assert runs.loc[runs["method"] == "grpo", "dara/weight/format"].isna().all()  # empty cells
    thresholds = pd.read_csv(out / "thresholds.csv")
    assert len(thresholds) == len(headline.METHODS) * len(SEEDS)
    assert pd.isna(thresholds.set_index(["method", "seed"]).at[("grpo", 3), "step"])
    summary = (out / "summary.md").read_text()
    assert f"`{METRIC}`" in summary and f"threshold: {THRESHOLD:g}" in summary
    assert f"steps 1-{STEPS}" in summary
    assert "| method | median_curve_step | seed_steps | reached | runs |" in summary
    stats = pd.read_csv(out / "statistics.csv")
    assert list(stats["comparison"]) == ["dara_asym - gdpo", "dara_sym - gdpo", "gdpo - grpo"] * 2
    assert set(stats["n"]) == {len(SEEDS)} and "## Paired by seed" in summary
    for method in headline.METHODS:
        assert f"| {method} |" in summary
        assert any(line.strip().startswith(method) and "/5" in line for line in printed.splitlines())


def test_cli_errors_are_one_line_and_a_nonzero_exit(race, tmp_path, capsys):
    root, _ = race
    protocol = write_protocol(tmp_path / "protocol.json", steps=LOGGED + 5)  # more steps than any run logged
    assert main(["headline", str(root), "--protocol", str(protocol), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and run_name("grpo", 0) in err[0]
    assert not (tmp_path / "o").exists()


def test_a_committed_runs_csv_rebuilds_the_same_tables(race, tmp_path):
    """`python -m results headline RUNS.csv`: the race's committed runs.csv gives the same thresholds, statistics
    and runs.csv as its run folders did (the first race's folders are not committed)."""
    root, _ = race
    protocol = write_protocol(tmp_path / "protocol.json")
    first, again = tmp_path / "from_folders", tmp_path / "from_csv"
    assert main(["headline", str(root), "--protocol", str(protocol), "--out", str(first)]) == 0
    assert main(["headline", str(first / "runs.csv"), "--protocol", str(protocol), "--out", str(again)]) == 0
    for name in ("runs.csv", "thresholds.csv", "statistics.csv"):
        assert (again / name).read_text() == (first / name).read_text(), name
    short = pd.read_csv(first / "runs.csv").query("not (method == 'gdpo' and seed == 1 and step == 3)")
    short.to_csv(tmp_path / "short.csv", index=False)
    with pytest.raises(RunLogError, match="gdpo seed 1"):
        headline.frame_from_runs_csv(tmp_path / "short.csv", headline.METHODS, STEPS)
