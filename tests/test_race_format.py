"""The format race without training: protocol against the task file, kept logs, and the paired statistics and
per-run facts (results.paired, results.race_stats) against plain loops."""

from __future__ import annotations

import itertools
import json
import random
import statistics

import pandas as pd
import pytest

from data_prep.smoke_length import N_TRAIN as N_LENGTH_TRAIN
from recipes import race
from recipes.race import RACE_FORMAT, RACE_LENGTH
from recipes.runner import is_finished, with_options
from results import paired, race_stats


# ----------------------------------------------------------------------------------- paired statistics
def plain_sign_test(differences: list[float]) -> float:
    """Enumerate every sign pattern of the non-zero differences: the share at least as extreme as observed."""
    signs = [d > 0 for d in differences if d != 0]
    n, positive = len(signs), sum(signs)
    if n == 0:
        return 1.0
    extreme = min(positive, n - positive)
    hits = sum(1 for pattern in itertools.product((0, 1), repeat=n)
               if min(sum(pattern), n - sum(pattern)) <= extreme)
    return min(1.0, hits / 2**n)


@pytest.mark.parametrize("differences", [[-1, -2, -2, 0, 0], [1, -2, -2, 0, 0], [-3] * 12, [1, -1] * 6,
                                         [0, 0, 0], [-1, -1, -1, -1, -1, -1, -1, -1, -1, 2, 0, 0]])
def test_sign_test_equals_an_enumeration_of_sign_patterns(differences):
    assert paired.sign_test(differences) == pytest.approx(plain_sign_test(differences))


def test_bootstrap_interval_equals_a_plain_resampling_loop():
    import numpy as np

    differences = [1.0, -2.0, -2.0, 0.0, 0.0, -3.0, 4.0]
    rng = np.random.default_rng(paired.BOOTSTRAP_SEED)
    draws = rng.integers(0, len(differences), size=(paired.BOOTSTRAP_RESAMPLES, len(differences)))
    means = [sum(differences[i] for i in row) / len(row) for row in draws]
    assert paired.bootstrap_interval(differences) == pytest.approx([np.percentile(means, q) for q in (2.5, 97.5)])
    with pytest.raises(ValueError, match="finite and non-empty"):
        paired.bootstrap_interval([])
    with pytest.raises(ValueError, match=r"seeds \[2\]"):  # paired_summary (counts: comparisons_table below)
        paired.paired_summary({0: 1, 2: 1}, {0: 1})


# ----------------------------------------------------------------------------------- per-run facts
FORMAT_SPEEDS = (("grpo", 0.04), ("gdpo", 0.05), ("dara_sym", 0.06), ("dara_asym", 0.07))


def race_frame(seed=0, channel="format", speeds=FORMAT_SPEEDS, start=0.0, noise=0.15, steps=12) -> pd.DataFrame:
    """Six seeds of noisy rising `channel` curves per method; grpo seed 2's density stays 0 after step 4."""
    rng = random.Random(seed)
    rows = []
    for method, speed in speeds:
        for run_seed in range(6):
            for step in range(1, steps + 1):
                value = min(1.0, max(0.0, start + speed * step + rng.uniform(-noise, noise)))
                row = {"method": method, "seed": run_seed, "step": step, f"reward/{channel}/mean": value,
                       "reward/correctness/mean": 0.5, "dara/density/correctness": rng.choice([0.0, 0.5]),
                       f"dara/density/{channel}": 0.0 if (method, run_seed) == ("grpo", 2) and step > 4 else value}
                if method.startswith("dara"):
                    row[f"dara/weight/{channel}"] = rng.choice([1.0, 1.04, 1.06, 1.5])
                rows.append(row)
    return pd.DataFrame(rows)


def test_endpoints_and_comparisons_equal_plain_loops():
    frame = race_frame()
    steps, threshold = 12, 0.4
    found = race_stats.threshold_endpoint(frame, "reward/format/mean", threshold, steps)
    means = race_stats.mean_endpoint(frame, "reward/format/mean", 1, 8)
    for (method, seed), run in frame.groupby(["method", "seed"]):
        values = list(run.sort_values("step")["reward/format/mean"])
        first = next((step for step, value in enumerate(values, 1) if value >= threshold), steps + 1)
        assert found[method][seed] == first
        assert means[method][seed] == pytest.approx(sum(values[:8]) / 8)
    table = race_stats.comparisons_table({"threshold step": found})
    assert list(table["comparison"]) == ["dara_asym - gdpo", "dara_sym - gdpo", "gdpo - grpo"]
    row = table.iloc[0]
    differences = [found["dara_asym"][s] - found["gdpo"][s] for s in range(6)]
    assert row["mean"] == pytest.approx(statistics.mean(differences), abs=1e-4)
    assert (row["lower"], row["higher"], row["tied"]) == (sum(d < 0 for d in differences),
                                                          sum(d > 0 for d in differences),
                                                          sum(d == 0 for d in differences))
    assert row["sign_p"] == pytest.approx(plain_sign_test(differences), abs=1e-4)


def test_dara_active_steps_and_collapse_flags_equal_plain_loops():
    frame = race_frame(1)
    reached = race_stats.threshold_endpoint(frame, "reward/format/mean", 0.4, 12)
    active = race_stats.dara_active_steps(frame, reached, "format")
    for (method, seed), run in frame.groupby(["method", "seed"]):
        if not method.startswith("dara"):
            assert active[(method, seed)] is None
            continue
        weights = list(run.sort_values("step")["dara/weight/format"])
        assert active[(method, seed)] == sum(1 for step, weight in enumerate(weights, 1)
                                             if step < reached[method][seed] and weight > 1.05)
    run = frame[(frame["method"] == "grpo") & (frame["seed"] == 2)]
    assert "format" in race_stats.collapsed_channels(run, ["format", "correctness"])  # 8 zero steps in a row
    streak = pd.DataFrame({"step": range(1, 9), "dara/density/format": [0, 0, 0, 0, 0.5, 0, 0, 0]})
    assert race_stats.collapsed_channels(streak, ["format"]) == []  # 4 and 3 in a row, never 5


# ----------------------------------------------------------------------------------- the recipe
@pytest.mark.parametrize("recipe, task_file, rows_per_epoch", [
    (RACE_FORMAT, "conf/task/smoke_rare.yaml", 544), (RACE_LENGTH, "conf/task/smoke_length.yaml", N_LENGTH_TRAIN),
], ids=["format", "length"])
def test_the_committed_protocol_is_the_task_file(recipe, task_file, rows_per_epoch):
    """The length race's own settings: test_race_length.py::test_the_length_protocol_settings."""
    from omegaconf import OmegaConf

    protocol, task = race.load_protocol(recipe.protocol_file), OmegaConf.load(task_file)
    assert task.actor_rollout_ref.actor.optim.lr == protocol["learning_rate"]
    assert task.data.train_batch_size == protocol["prompts_per_step"]
    assert task.data.train_batch_size // task.actor_rollout_ref.actor.ppo_mini_batch_size == 2  # 2 updates a step
    assert task.trainer.total_training_steps == protocol["steps"] >= 40
    assert task.trainer.total_epochs * rows_per_epoch >= protocol["steps"] * task.data.train_batch_size


def test_finished_runs_keep_their_logs_and_a_fresh_clone_skips_them(tmp_path):
    runs = with_options(RACE_FORMAT.runs(seeds=(0,)), output_root=str(tmp_path / "out"))
    finished = runs[0]
    finished.output_dir.mkdir(parents=True)
    records = "".join(json.dumps({"step": step}) + "\n" for step in range(1, 41))
    (finished.output_dir / "metrics.jsonl").write_text(records)
    (finished.output_dir / "run_info.json").write_text("{}")
    kept = race.keep_logs(finished, tmp_path / "logs")
    assert (kept / "metrics.jsonl").read_text() == records
    (finished.output_dir / "metrics.jsonl").unlink()  # the run folder is gone, as in a fresh clone
    assert race.restore_logs(runs, tmp_path / "logs") == 1
    assert [is_finished(run) for run in runs] == [True, False, False, False]
    assert race.restore_logs(runs, tmp_path / "logs") == 0  # nothing more to restore


@pytest.mark.slow
def test_the_rare_variant_starts_in_the_registered_regime(tmp_path):
    """The data card of the task's asset build: format rate 0.01-0.03, correctness density >= 0.5."""
    from data_prep import run_assets, smoke_sparse

    run_assets.smoke_rare(tmp_path / "rare", tmp_path)
    probe = json.loads((tmp_path / "rare" / "data_card.json").read_text())["format_probe"]
    assert probe["groups"] == smoke_sparse.RARE_PROBE_PROMPTS
    assert 0.01 <= probe["format_rate"] <= 0.03
    assert probe["channels"]["format"]["group_density"] < 0.15
    assert probe["channels"]["correctness"]["group_density"] >= 0.5
