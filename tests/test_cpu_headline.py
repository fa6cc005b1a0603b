"""The toy headline race without training: its sparse-format variant, the protocol, per-request rollout seeds and
the verl seams the seeded agent loop stands on; `python -m results headline` (results/headline.py) on synthetic
race run folders in dara.train's format, read with the real loader: every number against a plain loop."""

from __future__ import annotations

import importlib.util
import inspect
import json
import random
import statistics
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from data_prep import smoke, smoke_sparse
from recipes.race import CPU_HEADLINE, load_protocol
from recipes.runner import RecipeError
from results import headline
from results.cli import main
from results.loaders import RunLogError
from rewards.toolrl import correctness_reward, format_reward
from tests.test_results_thresholds import write_run as run_folder

METRIC, THRESHOLD = "reward/format/mean", 0.5
STEPS, LOGGED = 8, 10  # the protocol's steps; every synthetic run logs more, the command keeps 1..STEPS
SEEDS = (0, 1, 2, 3, 4)
TASK, MODEL = "smoke_sparse", "tiny_sparse"


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
