"""The project's estimators inside verl's advantage registry.

verl 0.9.1 calls a registered estimator as ``fn(token_level_rewards, response_mask, config, index)``:
no per-channel rewards reach it (only verl's own "gdpo" gets the raw batch). The project's trainer
(`dara.verl.trainer`) therefore hands verl's own `compute_advantage` a `ChannelContext` as the
``config`` argument: the algorithm config plus the channel scores of the batch, in batch order. The
registered functions read the channels from it and write their diagnostics back into it.

Every library estimator is registered as ``dara_<name>``; names verl does not already use
(``dara_asym``, ``dvao``, ...) are also registered bare. ``grpo`` and ``gdpo`` are verl's own names, so
`verl_estimator_name` maps them to ``dara_grpo`` / ``dara_gdpo`` for the project's trainer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from verl.trainer.ppo import core_algos

from dara.estimators import ESTIMATOR_NAMES, compute_advantages, diagnose

PREFIX = "dara_"


@dataclass
class ChannelContext:
    """What the project's trainer passes to verl's `compute_advantage` as ``config``."""

    algorithm: Any  # verl's `algorithm` config node (DictConfig or dict)
    channel_scores: torch.Tensor  # [N, K] raw channel rewards, pre-KL, in batch order
    channel_names: list[str]
    metrics: dict[str, float] = field(default_factory=dict)  # filled by the estimator

    def get(self, key: str, default=None):  # verl reads a few algorithm keys through `config.get`
        return self.algorithm.get(key, default)


def estimator_options(algorithm: Mapping, channel_names: list[str]) -> dict:
    """`compute_advantages` options from the algorithm config (see conf/estimator/*.yaml)."""
    dara_cfg = algorithm.get("dara", None) or {}
    options = {
        "channel_names": list(channel_names),
        "batch_norm": algorithm.get("batch_norm", "token"),
        "w_max": float(dara_cfg.get("w_max", 5.0)),
    }
    weights = algorithm.get("channel_weights", None)
    if weights is not None:
        options["weights"] = [float(w) for w in weights]
    ranges = dara_cfg.get("reward_ranges", None)
    if ranges is not None:
        options["reward_ranges"] = [[float(lo), float(hi)] for lo, hi in ranges]
    for key, option in (("tau", "tau"), ("gamma", "gamma"), ("static_form", "form"),
                        ("gd2po_query_weight", "query_weight")):
        if dara_cfg.get(key, None) is not None:
            options[option] = dara_cfg[key]
    return options


def library_name(verl_name: str) -> str | None:
    """The library estimator behind a verl adv_estimator value, or None for verl's own estimators."""
    if verl_name in ESTIMATOR_NAMES:
        return verl_name
    if verl_name.startswith(PREFIX) and verl_name[len(PREFIX):] in ESTIMATOR_NAMES:
        return verl_name[len(PREFIX):]
    return None


def verl_estimator_name(name: str) -> str:
    """Registry key of library estimator `name`: the bare name, or dara_<name> where verl owns it."""
    return name if name in _BARE else PREFIX + name


def _make_verl_estimator(name: str):
    def estimator(token_level_rewards, response_mask, config=None, index=None, **_unused):
        if not isinstance(config, ChannelContext):
            raise ValueError(
                f"adv_estimator {name!r} needs per-channel rewards, which verl's stock trainer does not pass: "
                "use the project's trainer (trainer.v1.trainer_mode=dara_sync, set by `python -m dara.train`)"
            )
        if index is None:
            raise ValueError(f"adv_estimator {name!r} needs group ids (non_tensor_batch['uid'])")
        options = estimator_options(config.algorithm, config.channel_names)
        if name == "grpo":
            # GRPO keeps verl's meaning: the summed token-level reward, KL-penalised when KL is in reward.
            total = token_level_rewards.sum(dim=-1, keepdim=True)
            advantages, metrics = compute_advantages("grpo", total, index, response_mask, channel_names=["reward"])
            metrics.update(diagnose(config.channel_scores, index, channel_names=config.channel_names))
        else:
            advantages, metrics = compute_advantages(name, config.channel_scores, index, response_mask, **options)
        config.metrics.update(metrics)
        return advantages, advantages

    estimator.__name__ = f"{PREFIX}{name}"
    estimator.__doc__ = f"verl adapter of dara.estimators '{name}' (channel scores from a ChannelContext)."
    return estimator


def _ours(fn) -> bool:
    return getattr(fn, "__module__", "") == __name__


def register_all() -> dict[str, str]:
    """Register every library estimator with verl (idempotent). Returns {registry key: library name}."""
    registered = {}
    for name in ESTIMATOR_NAMES:
        existing = core_algos.ADV_ESTIMATOR_REGISTRY.get(name)
        key = name if existing is None or _ours(existing) else PREFIX + name
        if key == name:
            _BARE.add(name)
        if not _ours(core_algos.ADV_ESTIMATOR_REGISTRY.get(key)):
            core_algos.register_adv_est(key)(_make_verl_estimator(name))
        registered[key] = name
    return registered


_BARE: set[str] = set()
REGISTERED = register_all()
