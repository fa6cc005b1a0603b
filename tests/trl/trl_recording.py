"""A `DaraGRPOTrainer` that records, per batch, TRL's own advantages next to the ones that replace them,
and what reaches the loss (shared by the TRL training tests and their two-process worker)."""

from __future__ import annotations

import torch

from dara.trl import DaraGRPOConfig, DaraGRPOTrainer


def grpo_config(tmp_path, **values) -> DaraGRPOConfig:
    return DaraGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", num_generations=4,
                          per_device_train_batch_size=8, **values)


def row_keys(batch: dict) -> list[tuple]:
    """One key per completion: its prompt and completion tokens (unchanged by TRL's shuffling)."""
    keys = []
    for prompt, prompt_mask, completion, completion_mask in zip(
        batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], batch["completion_mask"], strict=True
    ):
        keys.append((tuple(prompt[prompt_mask.bool()].tolist()), tuple(completion[completion_mask.bool()].tolist())))
    return keys


class RecordingTrainer(DaraGRPOTrainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batches: list[dict] = []
        self.loss_batches: list[dict] = []

    def _dara_replace_advantages(self, output, rewards):
        trl_advantages = output["advantages"].clone()
        super()._dara_replace_advantages(output, rewards)
        self.batches.append({
            "rewards": rewards.clone(),
            "trl": trl_advantages,
            "dara": output["advantages"].clone(),
            "lengths": self.accelerator.gather(output["completion_mask"].sum(dim=1)),
            "logged": list(self._logs["advantages"]),
            "by_row": dict(zip(row_keys(output), output["advantages"].tolist(), strict=True)),
        })

    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        self.loss_batches.append({"loss": loss.item(), "advantages": inputs["advantages"].tolist(),
                                  "keys": row_keys(inputs)})
        return loss


def parameters(model) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in model.named_parameters()}
