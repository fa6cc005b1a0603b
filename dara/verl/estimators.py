"""The project's estimators in verl's advantage registry.

verl 0.9.1 calls an estimator as `fn(token_level_rewards, response_mask, config, index)`: no per-channel rewards.
The trainer publishes them as a `ChannelBatch` in `CURRENT_CHANNELS` around verl's advantage step. Estimators are
registered bare (`dara_asym`, `dvao`, ...), as dara_<name> where verl owns the name (`dara_grpo`, `dara_gdpo`).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np
import torch
from verl.trainer.ppo import core_algos

from dara.estimators import ESTIMATOR_NAMES, ESTIMATORS, DaraAlgoConfig, compute_advantages, diagnose
from dara.estimators.registry import VERL_PREFIX as PREFIX


class ChannelBatch:
    def __init__(self, scores: torch.Tensor, names: list[str], real: torch.Tensor | None = None):
        self.scores = scores  # [N, K] raw channel rewards, pre-KL, in batch order
        self.names = list(names)
        # [N] bool: rows that are real samples (verl pads a batch to a divisible size; padding gets 0)
        self.real = torch.ones(len(scores), dtype=torch.bool) if real is None else real
        self.metrics: dict[str, float] = {}  # filled by the estimator


CURRENT_CHANNELS: ContextVar[ChannelBatch | None] = ContextVar("dara_channels", default=None)


@contextmanager
def channels_for_step(channels: ChannelBatch):
    token = CURRENT_CHANNELS.set(channels)
    try:
        yield channels
    finally:
        CURRENT_CHANNELS.reset(token)


def algo_options(algorithm: Mapping) -> DaraAlgoConfig:
    return DaraAlgoConfig.from_mapping(algorithm.get("dara", None))


class RewardRangeError(ValueError):
    pass


def check_reward_ranges(scores: torch.Tensor, channel_names: list[str], ranges: Mapping | None,
                        step: int | None = None) -> None:
    """Every [N, K] channel score inside its `algorithm.dara.reward_ranges` range, else RewardRangeError naming the
    score furthest out and how many lie outside (before any estimator, verl's grpo too, sees them)."""
    for k, name in enumerate(channel_names):
        if not ranges or name not in ranges:
            continue
        low, high = (float(v) for v in ranges[name])
        column = scores[:, k].to(torch.float64)
        outside = (column < low) | (column > high)
        if not (count := int(outside.sum())):
            continue
        bad = column[outside]
        worst = float(bad[(torch.maximum(low - bad, bad - high)).argmax()])
        where = f"step {step}" if step is not None else "this step"
        raise RewardRangeError(f"reward channel {name!r} scored {worst:g}, outside its range [{low:g}, {high:g}] "
                               f"(algorithm.dara.reward_ranges.{name}); {count} of {len(column)} samples of {where} "
                               "lie outside it")


class EstimatorNameTaken(ValueError):
    pass


def verl_owned_names() -> set[str]:
    """verl's own advantage estimators (its registry's keys not ours, its AdvantageEstimator values)."""
    own = {key for key, fn in core_algos.ADV_ESTIMATOR_REGISTRY.items() if not _ours(fn)}
    return own | {member.value for member in core_algos.AdvantageEstimator}


def verl_estimator_name(name: str) -> str:
    if name not in _KEYS:
        register_all()
    return _KEYS.get(name, PREFIX + name)


def _make_verl_estimator(name: str):
    def estimator(token_level_rewards, response_mask, config=None, index=None, **_unused):
        if (channels := CURRENT_CHANNELS.get()) is None:
            raise ValueError(f"adv_estimator {name!r} needs per-channel rewards, which verl's stock trainer "
                             "does not pass: use the project's trainer (trainer.v1.trainer_mode=dara_sync, "
                             "as conf/train.yaml sets it)")
        if index is None:
            raise ValueError(f"adv_estimator {name!r} needs group ids (non_tensor_batch['uid'])")
        if len(channels.scores) != len(response_mask):
            raise ValueError(f"adv_estimator {name!r}: {len(channels.scores)} rows of channel scores for a "
                             f"batch of {len(response_mask)}")
        real = channels.real.to(response_mask.device)
        rows = real.nonzero().squeeze(-1).cpu().numpy()
        mask, scores, groups = response_mask[real], channels.scores[channels.real], [index[i] for i in rows]
        config = config if config is not None else {}
        if name == "grpo":
            # verl's own GRPO on the summed (KL-penalised) token-level reward; the channels feed the diagnostics
            advantages, _ = core_algos.compute_grpo_outcome_advantage(
                token_level_rewards[real], mask, index=np.array(groups, dtype=object),
                norm_adv_by_std_in_grpo=bool(config.get("norm_adv_by_std_in_grpo", True)))
            metrics = diagnose(scores, groups, channel_names=channels.names)
        else:
            advantages, metrics = compute_advantages(name, scores, groups, mask, channel_names=channels.names,
                                                     **algo_options(config).keywords())
        full = torch.zeros_like(response_mask, dtype=advantages.dtype)
        full[real] = advantages
        channels.metrics.update(metrics)
        return full, full

    estimator.__name__ = f"{PREFIX}{name}"
    return estimator


def is_ours(registry_key: str) -> bool:
    return _ours(core_algos.ADV_ESTIMATOR_REGISTRY.get(str(registry_key)))


def _ours(fn) -> bool:
    return getattr(fn, "__module__", "") == __name__


def register_all(builtin_only: bool = False) -> dict[str, str]:
    """Register the library's estimators with verl (idempotent; a user's too unless `builtin_only`); returns
    {registry key: library name}."""
    registered = {}
    for name in list(ESTIMATOR_NAMES):
        estimator = ESTIMATORS[name]
        if builtin_only and not estimator.builtin:
            continue
        existing = core_algos.ADV_ESTIMATOR_REGISTRY.get(name)
        if existing is None or _ours(existing):
            key = name
        elif estimator.builtin:
            key = PREFIX + name
        else:
            raise EstimatorNameTaken(f"estimator {name!r} ({estimator.module}) takes a name verl already has "
                                     "(verl's own advantage estimator); register it under another name")
        if not _ours(core_algos.ADV_ESTIMATOR_REGISTRY.get(key)):
            core_algos.register_adv_est(key)(_make_verl_estimator(name))
        _KEYS[name] = key
        registered[key] = name
    return registered


_KEYS: dict[str, str] = {}  # library name -> verl registry key
register_all(builtin_only=True)
