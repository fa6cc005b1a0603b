"""`compute_advantages`: the one public entry to every estimator, with validation and diagnostics."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from .config import NOT_KEYWORDS, DaraAlgoConfig
from .groups import Groups, group_codes, group_zscore
from .methods import Aggregate, ChannelBatch
from .normalization import batch_normalize
from .registry import get_estimator

ACTIVE_EPS = 1e-8  # reward k is active in group i when sum_j |A_k(i,j)| > 1e-8
# compute_advantages' keywords (estimator_module is for the entry points, which load it)
OPTIONS = ("channel_names", *(f for f in DaraAlgoConfig.__dataclass_fields__ if f not in NOT_KEYWORDS))


def compute_advantages(name: str, scores: torch.Tensor, index: Sequence | np.ndarray | torch.Tensor,
                       response_mask: torch.Tensor, **options) -> tuple[torch.Tensor, dict[str, float]]:
    """Token-level advantages of estimator `name` for a batch of grouped multi-reward responses.

    scores: [N, K] raw channel scores ([N] = one channel); index: N group ids (verl's uid strings or ints);
    response_mask: [N, T] 0/1. options: channel_names (K distinct strings, default c0..) and the fields of
    `DaraAlgoConfig` (their defaults and help texts there; docs/estimators.md).

    Returns float32 [N, T] advantages on the mask's device (zero outside the mask) and a flat dict of floats:
    per channel `density/`, `active_groups/`, `energy/`, `weight/`, `energy_weighted/`, `energy_ratio/`,
    `energy_vs_ideal/`, plus `num_groups`, `num_responses`, `advantage/response_mean|std` and the estimator's
    own metrics. A ValueError names any bad input (unknown estimator or option, shapes, NaN/inf, values).
    """
    estimator = get_estimator(name)
    scores, response_mask = _check_tensors(scores, response_mask)
    device = response_mask.device
    scores = scores.to(device=device, dtype=torch.float64)
    num_channels = scores.shape[1]
    opts = _check_options(name, options, scores, device)
    groups = group_codes(index, device)
    if groups.num_responses != scores.shape[0]:
        raise ValueError(f"index has {groups.num_responses} group ids but scores has {scores.shape[0]} rows")
    advantages = group_zscore(scores, groups, eps=opts["eps"])
    active = groups.sum(advantages.abs()) > ACTIVE_EPS  # [B, K]: sum_j |A_k(i,j)| > 1e-8
    density = active.sum(dim=0).to(torch.float64) / groups.num_groups  # pi_k
    prior = opts["weights"] if opts["weights"] is not None else scores.new_ones(num_channels)
    batch = ChannelBatch(scores, groups, advantages, density, prior, opts)
    agg = estimator.fn(batch)
    lengths = response_mask.sum(dim=-1) if agg.batch_norm == "token" else None
    values = batch_normalize(agg.values, lengths, agg.batch_norm, agg.keep, eps=opts["eps"])
    if agg.post_scale is not None:
        values = values * agg.post_scale
    token_advantages = (values.to(torch.float32).unsqueeze(-1) * response_mask).to(torch.float32)
    metrics = _diagnostics(batch, agg, active, values, opts["channel_names"])
    return token_advantages, metrics


def _check_tensors(scores, response_mask) -> tuple[torch.Tensor, torch.Tensor]:
    scores = torch.as_tensor(scores)
    if scores.dim() == 1:
        scores = scores.unsqueeze(-1)
    if scores.dim() != 2:
        raise ValueError(f"scores must be [N, K] (one column per reward channel), got shape {tuple(scores.shape)}")
    if scores.shape[0] == 0 or scores.shape[1] == 0:
        raise ValueError(f"scores is empty: shape {tuple(scores.shape)}")
    if not (scores.dtype.is_floating_point or scores.dtype in (torch.int32, torch.int64, torch.bool)):
        raise ValueError(f"scores must be numeric, got dtype {scores.dtype}")
    if not torch.isfinite(scores.to(torch.float64)).all():
        bad = (~torch.isfinite(scores.to(torch.float64))).nonzero()[0].tolist()
        raise ValueError(f"scores contain NaN or inf (first at response {bad[0]}, channel {bad[1]})")
    if not isinstance(response_mask, torch.Tensor) or response_mask.dim() != 2:
        shape = tuple(response_mask.shape) if isinstance(response_mask, torch.Tensor) else type(response_mask)
        raise ValueError(f"response_mask must be a [N, T] tensor, got {shape}")
    if response_mask.shape[0] != scores.shape[0]:
        raise ValueError(f"response_mask has {response_mask.shape[0]} rows but scores has {scores.shape[0]}")
    return scores, response_mask


def _check_options(name: str, options: dict, scores: torch.Tensor, device) -> dict:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"unknown option(s) {unknown}; accepted: {', '.join(OPTIONS)}")
    num_channels = scores.shape[1]
    names = options.get("channel_names") or [f"c{k}" for k in range(num_channels)]
    if len(names) != num_channels or len(set(names)) != num_channels:
        raise ValueError(f"channel_names must be {num_channels} distinct names, got {list(names)}")
    config = DaraAlgoConfig.from_mapping({k: v for k, v in options.items() if k != "channel_names"})
    config.check_for(name, names)
    opts = {key: value for key, value in vars(config).items() if key not in ("options", *NOT_KEYWORDS)}
    opts.update(batch_norm=config.resolved_batch_norm(name), channel_names=[str(n) for n in names])
    opts.update(config.estimator_options(name))  # the estimator's own options, by name (checked in check_for)
    if config.weights is not None:  # its length and finiteness checked by DaraAlgoConfig
        opts["weights"] = torch.tensor(config.weights, dtype=torch.float64, device=device)
    opts["reward_ranges"] = _check_ranges(opts.get("reward_ranges"), scores, opts["channel_names"])
    return opts


def _check_ranges(ranges: dict, scores: torch.Tensor, names: list[str]) -> torch.Tensor | None:
    """Scores within each named channel's range; the [K, 2] range table when every channel has one, else None."""
    for k, name in enumerate(names):
        low, high = ranges.get(name, (-math.inf, math.inf))
        column = scores[:, k]
        if (column < low).any() or (column > high).any():
            raise ValueError(f"channel {name!r} has scores in [{column.min().item()}, "
                             f"{column.max().item()}], outside its reward_range [{low}, {high}]")
    if not ranges or any(name not in ranges for name in names):
        return None
    return torch.tensor([ranges[name] for name in names], dtype=torch.float64, device=scores.device)


def diagnose(scores, index, channel_names: Sequence[str] | None = None) -> dict[str, float]:
    """Per-channel density, active groups and energies of raw scores without an estimator (verl's own GRPO)."""
    scores = torch.as_tensor(scores, dtype=torch.float64)
    scores = scores.unsqueeze(-1) if scores.dim() == 1 else scores
    names = list(channel_names) if channel_names else [f"c{k}" for k in range(scores.shape[1])]
    groups = group_codes(index, scores.device)
    advantages = group_zscore(scores, groups)
    active = groups.sum(advantages.abs()) > ACTIVE_EPS
    stats = _channel_stats(groups, advantages, active)
    keys = [f"{metric}/{name}" for metric in stats for name in names]
    values = torch.cat([v.reshape(-1) for v in stats.values()]).tolist()
    return dict(zip(keys, values, strict=True))


def _channel_stats(groups: Groups, advantages: torch.Tensor, active: torch.Tensor) -> dict[str, torch.Tensor]:
    """density, active_groups, energy, energy_ratio (to the largest channel) and energy_vs_ideal."""
    energy = (advantages * advantages).sum(dim=0)
    ideal = ((groups.sizes - 1).clamp(min=0).to(energy.dtype).unsqueeze(-1) * active).sum(dim=0)
    largest = energy.max()
    ratio = torch.where(largest > 0, energy / largest.clamp(min=torch.finfo(energy.dtype).tiny),
                        torch.zeros_like(energy))
    return {
        "density": active.sum(dim=0).to(energy.dtype) / groups.num_groups,
        "active_groups": active.sum(dim=0).to(energy.dtype),
        "energy": energy,
        "energy_ratio": ratio,
        "energy_vs_ideal": torch.where(ideal > 0, energy / ideal.clamp(min=1), torch.zeros_like(energy)),
    }


def _diagnostics(batch: ChannelBatch, agg: Aggregate, active: torch.Tensor, values: torch.Tensor,
                 names: list[str]) -> dict[str, float]:
    """The paper's per-channel instruments, gathered into one tensor so a GPU syncs once."""
    groups: Groups = batch.groups
    per_channel = _channel_stats(groups, batch.advantages, active)
    per_channel["weight"] = agg.weights
    per_channel["energy_weighted"] = (agg.channel_terms * agg.channel_terms).sum(dim=0)
    keys = [f"{metric}/{name}" for metric in per_channel for name in names]
    stacked = torch.cat([v.reshape(-1).to(torch.float64) for v in per_channel.values()])
    response_std = values.std() if values.numel() > 1 else values.new_zeros(())
    extra = torch.stack([values.mean(), response_std]).to(torch.float64)
    out = dict(zip(keys, stacked.tolist(), strict=True))
    out.update(zip(("advantage/response_mean", "advantage/response_std"), extra.tolist(), strict=True))
    out["num_groups"] = float(groups.num_groups)
    out["num_responses"] = float(groups.num_responses)
    out.update(agg.metrics)
    return out
