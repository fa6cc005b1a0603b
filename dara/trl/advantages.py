"""The library's advantages for TRL's gathered [N, K] reward matrix (rows of `num_generations` form a group),
with TRL's conventions for missing scores (NaN; docs/trl.md, "How it plugs in")."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from dara.estimators import compute_advantages


def fill_missing_scores(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """[N, K] with each NaN replaced by its group's mean of that channel (0 where the group has none)."""
    grouped = rewards.view(-1, num_generations, rewards.shape[1])
    group_mean = torch.nan_to_num(torch.nanmean(grouped, dim=1, keepdim=True), nan=0.0)
    return torch.where(torch.isnan(grouped), group_mean.expand_as(grouped), grouped).view_as(rewards)


def completion_advantages(rewards: torch.Tensor, num_generations: int, channel_names: Sequence[str], estimator: str,
                          options: dict, lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """float32 [N] advantages (0 for unscored rows) of TRL's [N, K] matrix, and the library's metrics under
    `dara/` with the counts. `options` are `compute_advantages`' (not channel_names); `lengths` [N] token
    counts are needed for `batch_norm="token"` only."""
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
    token_advantages, metrics = compute_advantages(estimator, filled, groups, mask, channel_names=list(channel_names),
                                                   **options)
    # constant over a completion's tokens: the first token carries it
    advantages[scored] = token_advantages[:, 0]
    return advantages, {**{f"dara/{key}": value for key, value in metrics.items()}, **counts}
