"""The toy races without training. The headline race: its sparse-format variant, the protocol, per-request rollout
seeds and the verl seams the seeded agent loop stands on, `python -m results headline` on synthetic race run folders
in dara.train's format against plain loops. The format and length races: each protocol against its task file, the
logs a race keeps, the paired statistics and per-run facts (results.paired, results.race_stats) against plain loops;
the length variant's independent channels and probe figures, its regime (slow) and the sustained endpoint."""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import json
import math
import random
import statistics
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from data_prep import smoke, smoke_length, smoke_sparse
from recipes import race
from recipes.race import CPU_HEADLINE, RACE_FORMAT, RACE_LENGTH, load_protocol
from recipes.runner import RecipeError, is_finished, with_options
from results import headline, paired, race_stats
from results.cli import main
from results.loaders import RunLogError
from rewards import math as math_reward
from rewards.toolrl import correctness_reward, format_reward
from tests.test_results import loop_sustained_step
from tests.test_results import write_run as run_folder

LENGTH_PROTOCOL = load_protocol(RACE_LENGTH.protocol_file)
METRIC, THRESHOLD = "reward/format/mean", 0.5  # the headline race's
STEPS, LOGGED = 8, 10  # the protocol's steps; every synthetic run logs more, the command keeps 1..STEPS
SEEDS = (0, 1, 2, 3, 4)
TASK, MODEL = "smoke_sparse", "tiny_sparse"


# ----------------------------------------------------------------------------------- the headline race
def test_the_sign_off_breaks_only_the_format():
    for record in smoke.synthetic_records(3, 40):
        signed = smoke_sparse.with_sign_off(record["output"])
        assert format_reward(record["output"], record["output"]) == 1.0
        assert format_reward(signed, record["output"]) == 0.0
        assert correctness_reward(signed, record["output"]) == correctness_reward(record["output"], record["output"])


def test_warm_start_leaves_about_clean_share_of_the_targets_without_the_sign_off():
    records = smoke.synthetic_records(0, 2000)
    targets = smoke_sparse.warm_start_records(records, seed=0, clean_share=0.04)
    kept = sum(t["output"] == r["output"] for t, r in zip(targets, records, strict=True))
    assert 0.025 < kept / len(records) < 0.055
    assert all(t["output"] in (r["output"], r["output"] + smoke_sparse.SIGN_OFF)
               for t, r in zip(targets, records, strict=True))
    assert targets == smoke_sparse.warm_start_records(records, seed=0, clean_share=0.04)  # seeded


def test_group_density_counts_groups_with_differing_values():
    assert smoke_sparse.group_density([0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1], 4) == pytest.approx(1 / 3)


@pytest.fixture(scope="module")
def sparse_build(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke_sparse")
    smoke_sparse.build(out, seed=0)
    return out


@pytest.mark.slow
def test_sparse_variant_starts_in_the_authors_regime(sparse_build):
    """The build's probe: format rate 0.01-0.05, format group density 0.02-0.15, correctness density >= 0.2."""
    card = json.loads((sparse_build / "data_card.json").read_text())
    probe = card["format_probe"]
    assert probe["groups"] == smoke_sparse.PROBE_PROMPTS >= 16
    assert 0.01 <= probe["format_rate"] <= 0.05
    assert 0.02 <= probe["channels"]["format"]["group_density"] <= 0.15
    assert probe["channels"]["correctness"]["group_density"] >= 0.2
    assert card["splits"] == {"train": 544, "test": 32}
    # the smoke's tokenizer (same corpus): conf/model/tiny_sparse.yaml inherits model=tiny's facts
    assert card["tokenizer"]["vocab_size"] == OmegaConf.load("conf/model/tiny.yaml").run.model_facts.vocab_size
    assert smoke_sparse.build(sparse_build, seed=0)["model_dir"] == str(sparse_build / "model")  # reused


@pytest.mark.parametrize("broken, message", [  # a missing one: tests/test_cli_errors.py
    ({"metric": "reward/format/mean"}, "lacks threshold"),
    ({**json.loads(CPU_HEADLINE.protocol_file.read_text()), "threshold": 3.0}, "not a format rate"),
])
def test_a_missing_or_broken_protocol_is_an_error_naming_it(tmp_path, broken, message):
    path = tmp_path / "protocol.json"
    path.write_text(json.dumps(broken))
    with pytest.raises(RecipeError, match=message):
        load_protocol(path)


def test_a_validation_row_is_seeded_apart_from_the_same_training_row():
    """Seeds stable and distinct per (run seed, step, index, session); ValidationTagged marks the validation loader's
    rows and the mark changes the seed; a request's own seed and a greedy request are left alone."""
    import numpy as np

    from dara.verl import seeded_rollout as rollout
    from dara.verl.seeded_rollout import VALIDATION_KEY, request_seed, seeded_params

    seeds = {request_seed(0, step, index, session) for step in range(1, 21) for index in range(16)
             for session in range(4)}
    assert len(seeds) == 20 * 16 * 4 and all(0 <= s < 2 ** rollout.SEED_BITS for s in seeds)
    assert request_seed(3, 2, 7, 1) == request_seed(3, 2, 7, 1) != request_seed(4, 2, 7, 1)
    request = {"index": np.int64(5), "global_steps": 3, "session_id": 2}
    train = seeded_params({"temperature": 1.0}, 7, request)["seed"]
    assert train == request_seed(7, 3, 5, 2)
    loader = rollout.ValidationTagged([{"index": np.arange(3), "raw_prompt": np.array(["a", "b", "c"], dtype=object)}])
    (batch,) = list(loader)
    assert len(loader) == 1 and list(batch[VALIDATION_KEY]) == [True, True, True]
    val = seeded_params({"temperature": 1.0}, 7, {**request, VALIDATION_KEY: batch[VALIDATION_KEY][0]})["seed"]
    assert val == request_seed(7, 3, 5, 2, validate=True) != train
    assert seeded_params({"temperature": 1.0, "seed": 11}, 7, request)["seed"] == 11
    assert "seed" not in seeded_params({"temperature": 0.0}, 7, request)


@pytest.mark.parametrize("overrides", [[], ["run.seeded_rollout=true"], ["actor_rollout_ref.rollout.n=1"]])
def test_full_determinism_without_per_request_seeds_is_refused_in_one_line(overrides):
    from dara.config import compose
    from dara.config_checks import ConfigError, _check_determinism

    cfg = compose(["task=smoke", "actor_rollout_ref.rollout.full_determinism=true", *overrides])
    if overrides:
        _check_determinism(cfg)
    else:
        with pytest.raises(ConfigError, match="identical and every advantage 0: add run.seeded_rollout=true"):
            _check_determinism(cfg)


def verl_source(relative: str) -> str:
    """A verl module's source, not imported: vLLM (imported there) sets the root logger to ERROR (caplog tests)."""
    return (Path(importlib.util.find_spec("verl").origin).parent / relative).read_text()


def test_seeded_agent_loop_registration_reaches_verl():
    """verl loads agent_loop_config_path entries by name, hands each response its session_id, index and
    global_steps, and keeps a request's own seed in vLLM's SamplingParams."""
    from verl.experimental.agent_loop import agent_loop
    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

    from dara.config import compose
    from dara.verl.seeded_rollout import AGENT_LOOP_CONFIG, AGENT_NAME, SeededSingleTurnAgentLoop

    entries = OmegaConf.load(AGENT_LOOP_CONFIG)
    (entry,) = [e for e in entries if e.name == AGENT_NAME]
    module, _, name = entry._target_.rpartition(".")
    assert getattr(__import__(module, fromlist=[name]), name) is SeededSingleTurnAgentLoop
    assert issubclass(SeededSingleTurnAgentLoop, SingleTurnAgentLoop)
    assert "agent_loop_config_path" in inspect.getsource(agent_loop.AgentLoopWorker.__init__)
    worker_tq = verl_source("trainer/ppo/v1/agent_loop_tq.py")
    assert "session_id=i" in worker_tq and 'batch["index"]' in worker_tq
    assert '"global_steps", self.global_steps' in verl_source("trainer/ppo/v1/trainer_base.py")
    # validation: verl drops its own mark before the loops run; every key of a validation loader's batch reaches
    # them as a row keyword (ValidationTagged's mark rides there)
    assert 'batch.pop("validate", None)' in worker_tq and "prompt[k] = v[i].data" in worker_tq
    assert "for batch_dict in self.val_dataloader:" in verl_source("trainer/ppo/v1/trainer_base.py")
    assert 'setdefault("seed"' in verl_source("workers/rollout/vllm_rollout/vllm_async_server.py")
    cfg = compose(["task=smoke_sparse", "model=tiny_sparse", "estimator=grpo"])
    agent = cfg.actor_rollout_ref.rollout.agent
    assert agent.default_agent_loop == AGENT_NAME and Path(agent.agent_loop_config_path) == AGENT_LOOP_CONFIG
    assert cfg.actor_rollout_ref.model.path.endswith("assets/smoke_sparse/model")


def run_name(method: str, seed: int, variant: str = "") -> str:
    return "-".join([TASK, MODEL, method, *([variant] if variant else []), f"s{seed}"])


def write_headline_run(root: Path, method: str, seed: int, steps: int = LOGGED, variant: str = "",
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
def headline_race(tmp_path_factory):
    """The 20 race runs and a pilot run (seed 100, which must not count); returns (root, curves)."""
    root = tmp_path_factory.mktemp("cpu_headline")
    curves = {(m, s): write_headline_run(root, m, s) for m in headline.METHODS for s in SEEDS}
    write_headline_run(root, "grpo", 100, steps=4, variant="pilot", curve=[1.0] * 4)
    return root, curves


def first_reaching(values: list[float]) -> int | None:
    return next((step for step, value in enumerate(values, 1) if value >= THRESHOLD), None)


def test_race_tables_equal_a_plain_loop(headline_race):
    """The pilot left out, steps 1..STEPS in method and seed order; runs.csv, thresholds.csv and the summary."""
    root, curves = headline_race
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
        write_headline_run(tmp_path / "a", "grpo", seed)
    write_headline_run(tmp_path / "a", "gdpo", 0)
    write_headline_run(tmp_path / "a", "gdpo", 1, steps=STEPS - 3)
    with pytest.raises(RunLogError, match=run_name("gdpo", 1)) as err:
        headline.race_frame(tmp_path / "a", ["grpo", "gdpo"], STEPS)
    assert run_name("gdpo", 0) not in str(err.value)
    with pytest.raises(RunLogError, match="no run of method.s. dara_sym"):
        headline.race_frame(tmp_path / "a", ["grpo", "dara_sym"], STEPS)
    write_headline_run(tmp_path / "b", "grpo", 0)  # the same method and seed again, in another folder
    with pytest.raises(RunLogError, match="several runs of one method and seed"):
        headline.race_frame(tmp_path, ["grpo"], 4)


def test_cli_writes_every_file_and_rebuilds_them_from_its_runs_csv(headline_race, tmp_path, capsys):
    root, _ = headline_race
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
    (RACE_FORMAT, "conf/task/smoke_rare.yaml", 544),
    (RACE_LENGTH, "conf/task/smoke_length.yaml", smoke_length.N_TRAIN),
], ids=["format", "length"])
def test_the_committed_protocol_is_the_task_file(recipe, task_file, rows_per_epoch):
    """The length race's own settings: test_the_length_protocol_settings."""
    from omegaconf import OmegaConf

    protocol, task = load_protocol(recipe.protocol_file), OmegaConf.load(task_file)
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


# ----------------------------------------------------------------------------------- the length variant
def test_correctness_is_decided_before_the_tail():
    """On 2,000 problems, right and wrong: the same verdict with and without the re-check tail (which holds no box)."""
    items = smoke_length.problems(3, 2000, smoke_length.MAX_OPERAND)
    for item in items:
        tail = smoke_length.re_check_tail(*map(int, item["problem"].split("What is ")[1].rstrip("?").split(" + ")),
                                          item["tail_lines"])
        assert item["target"].endswith(tail) and "\\boxed" not in tail and "\\fbox" not in tail
        wrong = item["target"].replace(f"\\boxed{{{item['answer']}}}", f"\\boxed{{{int(item['answer']) + 1}}}")
        for response, correct in ((item["target"], 1.0), (wrong, 0.0)):
            cut = smoke_length.without_tail(response)
            assert cut == response[:len(response) - len(tail)]
            assert math_reward.correctness(response, item["answer"]) == correct
            assert math_reward.correctness(cut, item["answer"]) == correct


def test_one_prompt_in_four_asks_for_a_check_and_only_those_targets_have_a_tail():
    items = smoke_length.problems(0, 400, 9)
    for block in range(0, 400, 4):
        assert sum(item["asks_check"] for item in items[block:block + 4]) == 1
    for item in items:
        asks = item["problem"].startswith(smoke_length.CHECK_REQUEST)
        assert asks == item["asks_check"] == (item["tail_lines"] in smoke_length.TAIL_LINES)
        assert ("Re-check" in item["target"]) == asks and item["problem"].endswith("?")
    lines = [item["tail_lines"] for item in items if item["asks_check"]]
    assert 0.35 < lines.count(2) / len(lines) < 0.65   # chosen evenly: the second line about half the time


def test_the_warm_start_renders_the_math_prompt_the_run_sees():
    """The warm start writes the template's default system turn out; the run's rows have none: the same ids."""
    from data_prep import smoke

    items = smoke_length.problems(0, 8, 9)
    records = [smoke_length.warm_start_record(item) for item in items]
    tokenizer = smoke.train_tokenizer(smoke.chat_texts(records))
    for item, record, row in zip(items, records, smoke_length.to_rows(items, "train"), strict=True):
        explicit = [{"role": "system", "content": record["instruction"]}, {"role": "user", "content": record["input"]}]
        assert row["prompt"] == [{"role": "user", "content": record["input"]}]
        assert record["input"].endswith("within \\boxed{}.") and row["reward_model"]["ground_truth"] == item["answer"]
        assert (tokenizer.apply_chat_template(list(row["prompt"]), add_generation_prompt=True)
                == tokenizer.apply_chat_template(explicit, add_generation_prompt=True))


def test_the_probe_summary_equals_plain_loops():
    rng = random.Random(5)
    samples = []
    for group in range(30):
        asks = group % 4 == 0
        for _ in range(8):
            tokens = rng.choice([20, 30, 40]) if asks else 16
            correct = float(rng.random() < 0.5)
            samples.append({"asks_check": asks, "tokens": tokens, "correctness": correct,
                            "length": float(tokens <= smoke_length.LENGTH_LIMIT),
                            "correct_without_tail": correct if group != 3 else 1.0 - correct, "text": "x"})
    found = smoke_length.summarise(samples, 8)
    groups = [samples[i:i + 8] for i in range(0, len(samples), 8)]

    def density(part, channel):
        return sum(len({s[channel] for s in g}) > 1 for g in part) / len(part)

    assert found["correct_rate"] == round(sum(s["correctness"] for s in samples) / len(samples), 4)
    assert found["length_violation_rate"] == round(sum(s["length"] == 0 for s in samples) / len(samples), 4)
    for channel in ("correctness", "length"):
        assert found["channels"][channel]["group_density"] == round(density(groups, channel), 4)
        family = [g for g in groups if g[0]["asks_check"]]
        assert found["asks_check"]["channels"][channel]["group_density"] == round(density(family, channel), 4)
    over = [s["correctness"] for s in samples if s["length"] == 0]
    assert found["independence"]["correct_rate_over_limit"] == round(sum(over) / len(over), 4)
    assert found["independence"]["responses_whose_tail_changes_correctness"] == 8
    summed = [[s["correctness"] + s["length"] for s in g] for g in groups]
    assert found["informative_group_share"] == round(sum(len(set(g)) > 1 for g in summed) / len(groups), 4)
    assert found["no_check"]["channels"]["length"]["group_density"] == 0.0


@pytest.mark.slow
def test_the_length_variant_starts_in_the_registered_regime(tmp_path):
    """The data card of the task's asset build: correct rate 0.4-0.6, length density 0.15-0.35 on the family that
    asks for a check, correctness as often over the limit as within it; conf/model/tiny_length.yaml's facts."""
    from omegaconf import OmegaConf

    from dara.preflight.facts import facts_from_config_json, facts_from_mapping
    from data_prep import run_assets
    from recipes.runner import group_value

    run_assets.smoke_length(tmp_path / "length", tmp_path)
    card = json.loads((tmp_path / "length" / "data_card.json").read_text())
    probe = card["length_probe"]
    assert (probe["groups"], probe["group_size"]) == (smoke_length.PROBE_PROMPTS, LENGTH_PROTOCOL["group_size"])
    assert 0.4 <= probe["correct_rate"] <= 0.6 and probe["channels"]["correctness"]["group_density"] >= 0.6
    assert 0.15 <= probe["channels"]["length"]["group_density"] <= 0.35
    assert probe["asks_check"]["channels"]["length"]["group_density"] >= 0.8
    assert probe["no_check"]["channels"]["length"]["rate"] >= 0.98
    # independence: the correct rates over and within the limit differ by at most 3 standard errors
    independence = probe["independence"]
    over, within = independence["correct_rate_over_limit"], independence["correct_rate_within_limit"]
    n_over, pooled = round(probe["length_violation_rate"] * probe["samples"]), probe["correct_rate"]
    standard_error = math.sqrt(pooled * (1 - pooled) * (1 / n_over + 1 / (probe["samples"] - n_over)))
    assert abs(over - within) <= 3 * standard_error, (over, within, n_over, standard_error)
    assert independence["responses_whose_tail_changes_correctness"] <= 0.01 * probe["samples"]
    assert card["splits"] == {"train": smoke_length.N_TRAIN, "val": smoke_length.N_VAL}
    config = json.loads((tmp_path / "length" / "model" / "config.json").read_text())
    node = group_value("model", "tiny_length", "run.model_facts")   # merged over model=tiny's, as Hydra does
    assert facts_from_config_json(config, card["model"]["parameters"]) == facts_from_mapping(OmegaConf.to_container(node))


def test_the_length_protocol_settings():
    """Its settings shared with the format race against the task file: test_the_committed_protocol_is_the_task_file."""
    from omegaconf import OmegaConf

    task, settings = OmegaConf.load("conf/task/smoke_length.yaml"), LENGTH_PROTOCOL
    assert 16 <= settings["prompts_per_step"] <= 32
    assert task.actor_rollout_ref.rollout.n == settings["group_size"] == smoke_length.PROBE_GROUP
    assert task.reward.custom_reward_function.reward_kwargs.max_response_tokens == smoke_length.LENGTH_LIMIT
    assert task.run.seeded_rollout is True and task.run.dynamic_sampling.mode is None
    assert settings["dynamic_sampling"] is None and settings["batch_norm"] == "response"
    # the sustained rule of the authors' math curves (10 and 20 over 200 steps), scaled to the race's steps
    assert (settings["window"], settings["hold"]) == (10 * settings["steps"] // 200, 20 * settings["steps"] // 200)


@pytest.mark.slow  # composes one run per method (~2 s each)
def test_each_method_composes_with_the_task_settings_and_passes_the_checks():
    from dara.config import compose
    from dara.config_checks import check_config

    for method in (*RACE_LENGTH.methods, *RACE_LENGTH.extra_methods):
        run = RACE_LENGTH.run(method, 0, LENGTH_PROTOCOL)
        cfg = compose(tuple(run.overrides()))
        check_config(cfg)
        # GRPO defines its own normalisation (the group z-score of the summed reward, as the authors' math code)
        assert cfg.run.method == method and cfg.algorithm.dara.batch_norm == (None if method == "grpo" else "response")
        assert cfg.data.gen_batch_size is None and cfg.algorithm.filter_groups.enable is False
        assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "dara_seeded_single_turn"
        assert (cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n) == (16, 8)


def test_the_sustained_endpoint_and_the_results_command_equal_plain_loops(tmp_path):
    """`python -m results headline` on a runs.csv with the length race's protocol (window 2, hold 4)."""
    from results.cli import main as results_main

    speeds, threshold, steps = (("gdpo", 0.004), ("dara_sym", 0.005), ("dara_asym", 0.006)), 0.93, 20
    frame = race_frame(0, "length", speeds, start=0.88, noise=0.03, steps=steps)
    window, hold, logged = LENGTH_PROTOCOL["window"], LENGTH_PROTOCOL["hold"], range(1, steps + 1)
    frame.to_csv(tmp_path / "runs.csv", index=False)
    (tmp_path / "protocol.json").write_text(json.dumps({**LENGTH_PROTOCOL, "steps": steps, "threshold": threshold,
                                                        "secondary_steps": [1, 10]}))
    assert results_main(["headline", str(tmp_path / "runs.csv"), "--out", str(tmp_path)]) == 0
    rule = headline.step_rule({"threshold_rule": "sustained", "window": window, "hold": hold})
    found = race_stats.threshold_endpoint(frame, "reward/length/mean", threshold, steps, **rule)
    table = pd.read_csv(tmp_path / "thresholds.csv")
    assert set(table["method"]) == set(LENGTH_PROTOCOL["methods"])
    for (method, seed), run in frame.groupby(["method", "seed"]):
        step = loop_sustained_step(logged, list(run.sort_values("step")["reward/length/mean"]), threshold, window, hold)
        assert found[method][seed] == (steps + 1 if step is None else step)
        row = table[(table["method"] == method) & (table["seed"] == seed)].iloc[0]
        assert (None if pd.isna(row["step"]) else int(row["step"])) == step
    summary = headline.summary_table(frame, "reward/length/mean", threshold, rule).set_index("method")
    for method, runs in frame.groupby("method"):
        median = list(runs.groupby("step")["reward/length/mean"].median().sort_index())
        expected = loop_sustained_step(logged, median, threshold, window, hold)
        assert (None if pd.isna(summary.at[method, "median_curve_step"])
                else int(summary.at[method, "median_curve_step"])) == expected
    compared = pd.read_csv(tmp_path / "statistics.csv")
    primary = compared[compared["endpoint"] == "threshold step"].set_index("comparison")
    differences = [found["dara_asym"][s] - found["gdpo"][s] for s in range(6)]
    assert primary.at["dara_asym - gdpo", "mean"] == pytest.approx(sum(differences) / 6, abs=1e-4)
    text = (tmp_path / "summary.md").read_text()
    assert "trailing 2-step mean" in text and "next 4 steps" in text
    assert headline.step_rule(load_protocol(RACE_FORMAT.protocol_file)) == {"rule": "median"} == headline.step_rule({})
    with pytest.raises(headline.ProtocolError, match="window"):
        headline.step_rule({"threshold_rule": "sustained", "hold": 4})
