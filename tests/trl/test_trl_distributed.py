"""dara.trl under `torchrun --nproc_per_node 2` (gloo): each rank's advantages are TRL's own local ones (gdpo
with TRL's options) and its slice of the gathered batch's. Run under torchrun, this file is the worker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

STEPS = 2
ATOL = 1e-5  # float32 in TRL against float64 in the library (observed: docs/trl.md)


@pytest.mark.slow  # two training processes, ~20 s
def test_each_rank_gets_trls_local_advantages(smoke_assets, tmp_path):
    import torch

    from dara.trl import completion_advantages
    out = tmp_path / "ranks"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", __file__,
               smoke_assets["model_dir"], smoke_assets["train"], str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["process_index"] for r in ranks] == [0, 1]
    assert all(r["world_size"] == 2 and r["backend"] == "gloo" for r in ranks)
    worst = 0.0
    for step in range(STEPS):
        first, second = ranks[0]["batches"][step], ranks[1]["batches"][step]
        assert first["rewards"] == second["rewards"]  # both ranks aggregate the same gathered batch
        rewards = torch.tensor(first["rewards"])
        local = len(first["dara"])
        assert rewards.shape[0] == 2 * local
        expected, _ = completion_advantages(rewards, 4, ["format", "correctness"], "gdpo",
                                            {"eps": 1e-4, "batch_norm": "response", "weights": [1.0, 0.5]})
        for rank, batch in enumerate((first, second)):
            dara, trl = torch.tensor(batch["dara"]), torch.tensor(batch["trl"])
            torch.testing.assert_close(dara, expected[rank * local:(rank + 1) * local])
            torch.testing.assert_close(dara, trl, rtol=0, atol=ATOL)
            assert trl.abs().max() > 0.1
            worst = max(worst, float((dara - trl).abs().max()))
    print(f"gdpo vs TRL normalize_then_sum, two processes: max |difference| {worst:.2e}")


def worker(model_dir: str, train: str, out: str) -> None:
    import torch.distributed as dist

    from dara.trl.smoke import smoke_config, smoke_trainer
    from tests.trl.trl_recording import RecordingTrainer
    config = smoke_config(Path(out) / "trl", estimator="gdpo", multi_objective_aggregation="normalize_then_sum",
                          eps=1e-4, batch_norm="response", reward_weights=[1.0, 0.5], max_steps=STEPS,
                          per_device_train_batch_size=8)
    trainer = smoke_trainer({"model_dir": model_dir, "train": train}, config, trainer_class=RecordingTrainer)
    trainer.train()
    record = {
        "process_index": trainer.accelerator.process_index,
        "world_size": trainer.accelerator.num_processes,
        "backend": dist.get_backend(),
        "batches": [{key: batch[key].tolist() for key in ("rewards", "trl", "dara")} for batch in trainer.batches],
    }
    path = Path(out) / f"rank{record['process_index']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for tests.trl.trl_recording
    worker(*sys.argv[1:4])
