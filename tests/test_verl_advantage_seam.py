"""The advantage seam: the project's step is verl 0.9.1's own `_compute_advantage` plus the channel scores, both run
on the same batch with KL in the reward and rollout correction on; TransferQueue is an in-memory table."""

from __future__ import annotations

import pytest
import torch
import transfer_queue as tq
from omegaconf import OmegaConf
from tensordict import TensorDict
from tensordict.tensorclass import NonTensorData, NonTensorStack
from transfer_queue import KVBatchMeta
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.v1 import PPOTrainerSync

from dara.estimators import ESTIMATOR_NAMES, compute_advantages
from dara.verl.estimators import CURRENT_CHANNELS
from dara.verl.trainer import DaraTrainer

CHANNELS = ["correctness", "format"]
GROUPS, GROUP_SIZE, RESPONSE_LEN = 5, 4, 6


class KVTable:
    """`tq.kv_batch_get` / `tq.kv_batch_put` over a dict: rows of nested (per-response) tensors and objects."""

    def __init__(self):
        self.rows: dict[str, dict] = {}

    def get(self, keys, partition_id, select_fields):
        def column(values):
            if isinstance(values[0], torch.Tensor):
                return torch.nested.as_nested_tensor(values, layout=torch.jagged)
            return NonTensorStack(*[NonTensorData(v) for v in values])

        return TensorDict({f: column([self.rows[k][f] for k in keys]) for f in select_fields if f in self.rows[keys[0]]},
                          batch_size=len(keys))

    def put(self, keys, partition_id, fields):
        for field, value in fields.items():
            rows = value.unbind(0) if isinstance(value, torch.Tensor) else list(value)
            for key, row in zip(keys, rows, strict=True):
                self.rows[key][field] = row
        return KVBatchMeta(keys=list(keys), tags=[{} for _ in keys], partition_id=partition_id)


def make_table(seed: int, padding: int = 0) -> tuple[KVTable, KVBatchMeta]:
    gen = torch.Generator().manual_seed(seed)
    table, keys, tags = KVTable(), [], []
    n = GROUPS * GROUP_SIZE
    for i in range(n + padding):
        source = i if i < n else i - n  # verl pads by repeating samples, tagged is_padding
        length = int(torch.randint(2, RESPONSE_LEN + 1, (1,), generator=gen))
        correctness, fmt = float(torch.randint(-3, 4, (1,), generator=gen)), float(torch.rand(1, generator=gen) < 0.3)
        rm, old = torch.zeros(length), -torch.rand(length, generator=gen)
        rm[-1] = correctness + fmt
        key = f"uid{source // GROUP_SIZE}_{i}_0"
        table.rows[key] = {
            "uid": f"uid{source // GROUP_SIZE}", "response_mask": torch.ones(length, dtype=torch.long),
            "rm_scores": rm, "old_log_probs": old, "rollout_log_probs": old - 0.1 * torch.rand(length, generator=gen),
            "ref_log_prob": old - 0.2 * torch.rand(length, generator=gen),
            "extra_fields": {"reward_extra_info": {"correctness": correctness, "format": fmt,
                                                   "score": correctness + fmt}},
        }
        keys.append(key)
        tags.append({"is_padding": i >= n})
    return table, KVBatchMeta(keys=keys, tags=tags, partition_id="train")


def trainer_config(estimator: str, norm_by_std: bool = True, verl_own: bool = False):
    """The step's config; `verl_own`: verl's estimator of that name, else the library's (verl's registry key)."""
    registry_key = estimator if verl_own else {"grpo": "dara_grpo", "gdpo": "dara_gdpo"}.get(estimator, estimator)
    return OmegaConf.create({
        "algorithm": {
            "adv_estimator": registry_key, "gamma": 1.0, "lam": 1.0, "norm_adv_by_std_in_grpo": norm_by_std,
            "use_kl_in_reward": True, "kl_penalty": "kl", "kl_ctrl": {"type": "fixed", "kl_coef": 0.05},
            "rollout_correction": {"rollout_is": "token", "rollout_is_threshold": 2.0, "bypass_mode": False},
            "reward_channels": CHANNELS,
            "dara": {"weights": [1.0, 5.0] if estimator == "static" else None,
                     "reward_ranges": {"correctness": [-3.0, 3.0], "format": [0.0, 1.0]}},
        },
        "actor_rollout_ref": {"rollout": {"n": GROUP_SIZE}},
    })


def run_step(cls, config, seed: int, monkeypatch, padding: int = 0):
    table, batch = make_table(seed, padding)
    monkeypatch.setattr(tq, "kv_batch_get", table.get)
    monkeypatch.setattr(tq, "kv_batch_put", table.put)
    trainer = object.__new__(cls)  # the step needs only its config and KL controller
    trainer.config = config
    trainer.kl_ctrl_in_reward = core_algos.get_kl_controller(config.algorithm.kl_ctrl)
    metrics: dict = {}
    cls._compute_advantage(trainer, batch, metrics)
    assert trainer.config is config and CURRENT_CHANNELS.get() is None  # the channels were the step's only
    return table, batch, metrics


SHARED = ["token_level_rewards", "response_mask", "rollout_is_weights"]  # KL in the reward, rollout correction


@pytest.mark.parametrize("name, norm_by_std", [("grpo", True), ("grpo", False)]
                         + [(n, True) for n in ESTIMATOR_NAMES if n != "grpo"])
def test_the_step_is_verls_with_the_library_estimators_advantage(monkeypatch, name, norm_by_std):
    """The same batch through verl's own step with verl's grpo and through the trainer's: all but the advantage
    equal; the advantage verl's for grpo, else the library estimator's on the raw channel scores of the real rows
    (3 padding rows: 0)."""
    padding = 0 if name == "grpo" else 3  # verl's grpo counts padding rows in their groups
    ours, batch, our_metrics = run_step(DaraTrainer, trainer_config(name, norm_by_std), 1, monkeypatch, padding)
    theirs, _, their_metrics = run_step(PPOTrainerSync, trainer_config("grpo", norm_by_std, verl_own=True), 1,
                                        monkeypatch, padding)
    for key in batch.keys:
        for field in SHARED + (["advantages", "returns"] if name == "grpo" else []):
            torch.testing.assert_close(ours.rows[key][field], theirs.rows[key][field], msg=f"{field} of {key}")
    assert {k: v for k, v in our_metrics.items() if k in their_metrics} == their_metrics
    assert f"dara/density/{CHANNELS[1]}" in our_metrics and f"reward/{CHANNELS[0]}/mean" in our_metrics
    if name == "grpo":
        return
    real = [k for k, tag in zip(batch.keys, batch.tags, strict=True) if not tag["is_padding"]]
    scores = torch.tensor([[ours.rows[k]["extra_fields"]["reward_extra_info"][c] for c in CHANNELS] for k in real])
    lengths = [len(ours.rows[k]["response_mask"]) for k in real]
    mask = (torch.arange(RESPONSE_LEN)[None, :] < torch.tensor(lengths)[:, None]).float()
    options = {k: v for k, v in trainer_config(name).algorithm.dara.items() if v is not None}
    expected, _ = compute_advantages(name, scores, [ours.rows[k]["uid"] for k in real], mask,
                                     channel_names=CHANNELS, **options)
    for j, key in enumerate(real):
        torch.testing.assert_close(ours.rows[key]["advantages"], expected[j, :lengths[j]])
    for key in set(batch.keys) - set(real):
        assert ours.rows[key]["advantages"].abs().sum() == 0
    assert not all(torch.equal(ours.rows[k]["advantages"], theirs.rows[k]["advantages"]) for k in real)
