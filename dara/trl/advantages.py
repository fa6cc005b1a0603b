"""The library's advantages for TRL's gathered reward matrix: TRL's layout and missing scores, pure torch.

TRL's `GRPOTrainer` scores every completion of the global batch with every reward function into an
[N, K] tensor (NaN where a function returned None) whose consecutive rows of `num_generations` form the
prompt groups. `completion_advantages` turns it into one advantage per completion with any estimator of
`dara.estimators`:

- a row that no reward function scored (all NaN) gets advantage 0 and takes no part in the group or
  batch statistics (TRL's own convention), and is counted (`dara/unscored_completions`);
- a NaN in some channels only means "this function does not apply to this completion" (TRL's convention:
  its `nansum` adds nothing for it). The completion gets the mean of the channel's scored completions in
  its group, so its own A_k is exactly 0 and the group's baseline is the scored completions' mean; a
  group with no score for the channel is constant (inactive). One difference from TRL's
  `normalize_then_sum`: the group std of that channel then divides by the group size minus one, where
  TRL's divides by the number of scored completions minus one. Counted per channel
  (`dara/missing_scores/<name>`);
- a completion left alone in its group (every other one unscored) has no baseline: its scores count as 0,
  so it carries no signal but still takes part in the batch statistics (TRL's result too; the library's
  own size-1 convention, verl's mean 0 and std 1, would hand it its raw score).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from dara.estimators import compute_advantages


def fill_missing_scores(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """[N, K] with each NaN replaced by its group's mean of that channel (0 where the group has none)."""
    grouped = rewards.view(-1, num_generations, rewards.shape[1])
    group_mean = torch.nan_to_num(torch.nanmean(grouped, dim=1, keepdim=True), nan=0.0)
    return torch.where(torch.isnan(grouped), group_mean.expand_as(grouped), grouped).view_as(rewards)


def completion_advantages(
    rewards: torch.Tensor,
    num_generations: int,
    channel_names: Sequence[str],
    estimator: str,
    options: dict,
    lengths: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """One advantage per completion of TRL's global batch, and the `dara/` metrics.

    Args:
        rewards: [N, K] float, NaN where a reward function returned None; rows i*G..(i+1)*G-1 are group i.
        num_generations: G.
        channel_names: the K reward functions' names.
        estimator: a `dara.estimators` name.
        options: `compute_advantages` options (not `channel_names`).
        lengths: [N] completion token counts; needed only for `batch_norm="token"`.

    Returns:
        advantages: float32 [N] on the rewards' device, 0 for unscored rows.
        metrics: the library's metrics under `dara/` plus `dara/unscored_completions` and
            `dara/missing_scores/<name>` (counts over the global batch).
    """
    num_rows, num_channels = rewards.shape
    if num_rows % num_generations:
        raise ValueError(f"{num_rows} completions do not form groups of num_generations={num_generations}")
    missing = torch.isnan(rewards)
    scored = ~missing.all(dim=1)
    counts = {"dara/unscored_completions": float((~scored).sum())}
    partly = missing & scored.unsqueeze(1)
    counts.update({f"dara/missing_scores/{name}": float(partly[:, k].sum()) for k, name in enumerate(channel_names)})
    advantages = torch.zeros(num_rows, dtype=torch.float32, device=rewards.device)
    if not scored.any():
        return advantages, counts

    filled = fill_missing_scores(rewards.to(torch.float64), num_generations)
    scored_in_group = scored.view(-1, num_generations).sum(dim=1).repeat_interleave(num_generations)
    filled[scored_in_group == 1] = 0.0
    filled = filled[scored]
    groups = (torch.arange(num_rows, device=rewards.device) // num_generations)[scored]
    if options.get("batch_norm") == "token":
        if lengths is None:
            raise ValueError("batch_norm='token' needs the completions' token counts")
        kept = lengths.to(rewards.device)[scored]
        width = max(int(kept.max()), 1)
        mask = (torch.arange(width, device=rewards.device).unsqueeze(0) < kept.unsqueeze(1)).float()
    else:
        mask = torch.ones(int(scored.sum()), 1, device=rewards.device)
    token_advantages, metrics = compute_advantages(
        estimator, filled, groups, mask, channel_names=list(channel_names), **options
    )
    # Constant over a completion's tokens: the first token carries it (0 only for an empty completion).
    advantages[scored] = token_advantages[:, 0]
    return advantages, {**{f"dara/{key}": value for key, value in metrics.items()}, **counts}
