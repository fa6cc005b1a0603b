"""dara.trl in real TRL training on the CPU: the tiny offline smoke model, its tool-calling data, the
ToolRL channels as reward functions (one process; the two-process case is test_trl_distributed.py)."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from dara.estimators import ESTIMATOR_NAMES
from dara.trl import completion_advantages
from dara.trl.smoke import smoke_config, smoke_trainer
from tests.trl.trl_recording import RecordingTrainer, parameters

pytestmark = pytest.mark.slow  # each test trains (a few seconds to ~20 s), after the session's smoke build

TRL_MATCHING = {"estimator": "gdpo", "multi_objective_aggregation": "normalize_then_sum", "eps": 1e-4,
                "batch_norm": "response"}
EQUALITY_ATOL = 1e-5  # float32 in TRL against float64 in the library (observed: docs/trl.md)


def train(smoke_assets, tmp_path, steps, **overrides):
    config = smoke_config(tmp_path / "trl", max_steps=steps, **overrides)
    trainer = smoke_trainer(smoke_assets, config, trainer_class=RecordingTrainer)
    before = parameters(trainer.model)
    trainer.train()
    return trainer, before


def test_gdpo_equals_trls_own_normalize_then_sum_on_every_batch(smoke_assets, tmp_path):
    trainer, _ = train(smoke_assets, tmp_path, steps=3, reward_weights=[1.0, 0.5], **TRL_MATCHING)
    assert len(trainer.batches) == 3
    for batch in trainer.batches:
        assert batch["trl"].abs().max() > 0.1  # TRL's advantages are not trivially zero
        torch.testing.assert_close(batch["dara"], batch["trl"], rtol=0, atol=EQUALITY_ATOL)
    worst = max(float((b["dara"] - b["trl"]).abs().max()) for b in trainer.batches)
    print(f"gdpo vs TRL normalize_then_sum, one process: max |difference| {worst:.2e}")


def test_dara_asym_trains_on_the_sparse_channel_with_its_own_advantages(smoke_assets, tmp_path):
    trainer, before = train(smoke_assets, tmp_path, steps=3)
    names = trainer.reward_func_names
    assert names == ["format", "correctness"] and trainer.state.global_step == 3
    # the loss is finite and the parameters moved
    assert len(trainer.loss_batches) == 3 and all(math.isfinite(b["loss"]) for b in trainer.loss_batches)
    after = parameters(trainer.model)
    assert any(not torch.equal(before[name], after[name]) for name in before)
    for batch, at_loss in zip(trainer.batches, trainer.loss_batches, strict=True):
        # what replaced TRL's advantages is DARA-Asym of the gathered rewards, and it differs from TRL's own
        expected, _ = completion_advantages(batch["rewards"], 4, names, "dara_asym", trainer.dara_options)
        torch.testing.assert_close(batch["dara"], expected)
        assert float((batch["dara"] - batch["trl"]).abs().max()) > 1e-3
        assert batch["logged"] == batch["dara"].tolist()  # TRL's completions table shows the ones that train
        # the advantages that reach the loss (after TRL's shuffle) are these, completion by completion
        assert sorted(at_loss["keys"]) == sorted(batch["by_row"])
        assert at_loss["advantages"] == [batch["by_row"][key] for key in at_loss["keys"]]
    logged = [entry for entry in trainer.state.log_history if "dara/energy/correctness" in entry]
    assert len(logged) == 3
    sparse = [e for e in logged if 0 < e["dara/density/correctness"] < e["dara/density/format"]]
    assert sparse, "the smoke data should give a sparse correctness channel"
    assert all(e["dara/weight/correctness"] > 1 for e in sparse)


CASES = [(name, None) for name in ESTIMATOR_NAMES] + [("dara_asym", "token"), ("gd2po_hard", "token")]


@pytest.mark.parametrize(("estimator", "batch_norm"), CASES)
def test_every_estimator_runs_a_step(smoke_assets, tmp_path, estimator, batch_norm):
    extra = {"reward_weights": [1.0, 5.0]} if estimator == "static" else {}
    trainer, _ = train(smoke_assets, tmp_path, steps=1, estimator=estimator, batch_norm=batch_norm,
                       per_device_train_batch_size=16, **extra)
    assert trainer.state.global_step == 1 and math.isfinite(trainer.loss_batches[0]["loss"])
    (batch,) = trainer.batches
    lengths = batch["lengths"] if trainer.dara_options["batch_norm"] == "token" else None
    expected, _ = completion_advantages(batch["rewards"], 4, trainer.reward_func_names, estimator,
                                        trainer.dara_options, lengths)
    torch.testing.assert_close(batch["dara"], expected)
    assert "dara/weight/format" in trainer.state.log_history[0]


def test_smoke_trl_prints_a_line_per_step_without_verl_or_ray(smoke_assets, tmp_path):
    assets_dir = str(smoke_assets["train"]).rsplit("/", 1)[0]
    code = ("import sys\nfrom dara.trl.smoke import main\n"
            f"main(['--assets', {assets_dir!r}, '--out', {str(tmp_path / 'out')!r}, '--steps', '2'])\n"
            "print('modules', sorted(m for m in sys.modules if m.split('.')[0] in ('verl', 'ray')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    steps = [line for line in lines if line.startswith("[dara.trl] step ")]
    assert [line.split(" |")[0] for line in steps] == ["[dara.trl] step 1/2", "[dara.trl] step 2/2"]
    for line in steps:
        assert "| reward format " in line and " correctness " in line
        assert "| density format " in line and "| weight format " in line
    assert lines[-1] == "modules []"
