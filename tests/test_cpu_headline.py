"""The toy headline race without training: its sparse-format variant, the protocol, per-request rollout seeds and
the verl seams the seeded agent loop stands on."""

from __future__ import annotations

import importlib.util
import inspect
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from data_prep import smoke, smoke_sparse
from recipes.race import CPU_HEADLINE, load_protocol
from recipes.runner import RecipeError
from rewards.toolrl import correctness_reward, format_reward


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
