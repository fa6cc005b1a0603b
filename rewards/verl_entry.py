"""verl entry (docs/rewards.md): `compute_score(data_source, solution_str, ground_truth, extra_info=None,
**options)` -> {"score": sum of the channels, <channel>: value, ...}, scored by the task registered for the
data_source (`tasks.registry`); options: `RewardOptions` (an unknown one is an error). Also the per-sample scorer
the parallel manager runs."""

# No `from __future__ import annotations`: verl loads this file by path as a module missing from sys.modules,
# where @dataclass cannot resolve string annotations.
import atexit
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from rewards import math as math_reward
from rewards.pool import OK, TIMEOUT, HardTimeoutPool, Outcome, available_cpus
from rewards.spec import ERROR_KEY, SCORE_KEY, TIMEOUT_KEY  # the keys of a scored item
from tasks import math as math_task
from tasks.registry import load_ref, task_for_source

logger = logging.getLogger(__name__)

# verl's reward managers pass these to compute_score; they carry nothing a rule reward needs.
_VERL_EXTRA_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})
POOL_PRELOAD = ("rewards.verl_entry",)  # every pool worker imports it before taking items


@dataclass(frozen=True)
class RewardOptions:
    """Reward options from config (`reward_kwargs`; docs/rewards.md "Options")."""

    toolrl_length_channel: bool = False
    math_length_conditioned: bool = False
    math_grader: str = math_task.DEFAULT_GRADER
    max_response_tokens: int = math_reward.DEFAULT_MAX_TOKENS
    timeout_s: float = 10.0
    num_processes: int | None = None

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any] | None) -> "RewardOptions":  # an unknown key raises, naming it
        kwargs = dict(kwargs or {})
        known = {f.name for f in fields(cls)}
        if unknown := sorted(set(kwargs) - known - _VERL_EXTRA_KWARGS):
            raise TypeError(f"unknown reward option(s) {unknown}; known: {sorted(known)}")
        options = cls(**{key: value for key, value in kwargs.items() if key in known})
        options.validate()
        return options

    def validate(self) -> None:
        math_task.check_grader(self.math_grader)
        for name, ok in (("max_response_tokens", int(self.max_response_tokens) >= 1),
                         ("timeout_s", float(self.timeout_s) > 0),
                         ("num_processes", self.num_processes is None or int(self.num_processes) >= 1)):
            if not ok:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")

    def pool_size(self) -> int:  # num_processes None: the CPUs this process may use, at most 16
        return int(self.num_processes) if self.num_processes is not None else min(available_cpus(), 16)


def task_of(data_source: str) -> str:  # an unregistered source is an error naming it
    return task_for_source(data_source).name


def task_reward(data_source: str):  # the `rewards.task_rewards.TaskReward` of the source's task
    return load_ref(task_for_source(data_source).reward)


def reward_channels(data_source: str, reward_kwargs: Mapping[str, Any] | None = None) -> dict[str, tuple[float, float]]:
    """The reward's declaration (`rewards.spec`): the channels `compute_score` returns for `data_source` under
    the config's `reward_kwargs`, in order, each with its [low, high] range."""
    return task_reward(data_source).channels(RewardOptions.from_kwargs(reward_kwargs))


def channel_names(data_source: str, options: RewardOptions | None = None) -> tuple[str, ...]:  # in order
    return tuple(task_reward(data_source).channels(options or RewardOptions()))


def with_total(channels: dict[str, float]) -> dict[str, float]:
    return {SCORE_KEY: float(sum(channels.values())), **{key: float(value) for key, value in channels.items()}}


def score_sample(data_source: str, solution_str: str, ground_truth: Any, response_tokens: int | None,
                 options: RewardOptions) -> dict[str, float]:
    """The channels of one sample plus "score", with no time limit (what pool workers run); raises only on bad
    data or options, never on model output."""
    reward = task_reward(data_source)
    if not isinstance(solution_str, str):
        raise TypeError(f"solution_str must be str, got {type(solution_str).__name__}")
    return with_total(reward.score(solution_str, ground_truth, response_tokens, options))


def fallback_sample(data_source: str, response_tokens: int | None, options: RewardOptions) -> dict[str, float]:
    """A sample whose scoring timed out or failed: each channel's lowest value, except the math length channel
    (decided by the token count)."""
    return with_total(task_reward(data_source).fallback(response_tokens, options))


def resolve_outcome(outcome: Outcome, data_source: str, fallback: Callable[[], dict[str, float]]
                    ) -> tuple[dict[str, float], bool, bool]:
    """(channels with "score", timed out, failed) of a pool outcome, `fallback()` where it did not score;
    failures are logged. The fallback is the caller's: a registered task's or a reward module's own."""
    if outcome.status == OK:
        return outcome.value, False, False
    if outcome.status == TIMEOUT:
        logger.warning("reward for a %s sample took over the time limit; scored as its fallback", data_source)
        return fallback(), True, False
    logger.error("reward for a %s sample failed; scored as its fallback:\n%s", data_source, outcome.error)
    return fallback(), False, True


_pool_lock = threading.Lock()
_shared_pools: dict[tuple[int, float], HardTimeoutPool] = {}


def shared_pool(options: RewardOptions) -> HardTimeoutPool:
    """This process's pool for the options' size and time limit, started on first use, shared by every caller."""
    key = (options.pool_size(), float(options.timeout_s))
    with _pool_lock:
        if key not in _shared_pools or _shared_pools[key].closed:
            _shared_pools[key] = HardTimeoutPool(key[0], key[1], preload=POOL_PRELOAD)
        return _shared_pools[key]


@atexit.register
def close_shared_pools() -> None:
    with _pool_lock:
        for pool in _shared_pools.values():
            pool.close()
        _shared_pools.clear()


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None = None,
                  **kwargs: Any) -> dict[str, float]:
    """verl's custom reward function (its naive manager's path): {"score", <channels>} for one sample, scored in
    this process; math needs extra_info["response_tokens"]."""
    tokens = (extra_info or {}).get("response_tokens")
    return score_sample(data_source, solution_str, ground_truth, tokens, RewardOptions.from_kwargs(kwargs))


def step_metrics(reward_extra_info: Mapping[str, Sequence[Any]], channels: Sequence[str]) -> dict[str, float]:
    """Per-step reward metrics from a batch's reward_extra_info (one value per sample): "reward/<channel>/mean"
    for each channel, "reward/timeouts" and "reward/errors" (counts)."""
    metrics = {}
    for channel in channels:
        values = np.asarray(reward_extra_info[channel], dtype=np.float64)
        if values.size == 0:
            raise ValueError(f"no samples for reward channel {channel!r}: a step metric needs at least one")
        metrics[f"reward/{channel}/mean"] = float(values.mean())
    for key, name in ((TIMEOUT_KEY, "timeouts"), (ERROR_KEY, "errors")):
        if key in reward_extra_info:
            metrics[f"reward/{name}"] = float(np.asarray(reward_extra_info[key], dtype=np.float64).sum())
    return metrics
