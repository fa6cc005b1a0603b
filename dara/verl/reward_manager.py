"""The "dara_parallel" reward manager for verl 0.9.1's reward loop (registered on import).

Scores in a process pool with a hard per-item time limit (rewards.pool), never raising on model output: an item
over the limit or failing gets a fallback score and a flag in reward_extra_info, and a failed item's error a line
of `<run folder>/logs/reward_errors.log`. It scores the registered task of each data_source (rewards/verl_entry.py)
or a reward module of your own (`reward.custom_reward_function.path`, `rewards.spec`), loaded in the pool by path.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from verl import DataProto
from verl.experimental.reward_loop.reward_manager import register
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase
from verl.utils.reward_score import default_compute_score

from dara.run_folder import REWARD_ERRORS
from rewards import spec as reward_spec
from rewards import verl_entry
from rewards.pool import Outcome
from rewards.verl_entry import ERROR_KEY, SCORE_KEY, TIMEOUT_KEY, RewardOptions

logger = logging.getLogger(__name__)

MANAGER_NAME = "dara_parallel"
MAX_LOGGED_ERRORS = 20  # per manager: the errors of a reward that always fails are all alike


def _as_dict(node: Any) -> dict[str, Any]:
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node or {})


def reward_kwargs(config: DictConfig, compute_score: Any = None) -> dict[str, Any]:
    """reward.reward_kwargs and reward.custom_reward_function.reward_kwargs (as verl bound it), merged."""
    reward = config.get("reward") or {}
    manager_kwargs = _as_dict(reward.get("reward_kwargs"))
    function_kwargs = _as_dict((reward.get("custom_reward_function") or {}).get("reward_kwargs"))
    if isinstance(compute_score, functools.partial) and len(compute_score.args) == 2:
        function_kwargs = {**function_kwargs, **_as_dict(compute_score.args[1])}
    return reward_spec.merged_reward_kwargs(manager_kwargs, function_kwargs)


def reward_module_of(config: DictConfig, compute_score: Any = None) -> tuple[str, str] | None:
    """(file, function) of a reward of your own, or None for the project's rewards.verl_entry."""
    function = (config.get("reward") or {}).get("custom_reward_function") or {}
    path = reward_spec.module_file(function.get("path")) if function.get("path") else None
    name = function.get("name") or "compute_score"
    if not path and compute_score is not None and compute_score is not default_compute_score:
        raw = compute_score.args[0] if isinstance(compute_score, functools.partial) else compute_score
        try:
            path, name = inspect.getsourcefile(raw), raw.__name__
        except TypeError:  # a builtin or a callable object: nothing to load in a pool worker
            raise ValueError(f"the {MANAGER_NAME!r} reward manager loads reward functions by file; got {raw!r}: "
                             "name its module in reward.custom_reward_function.path") from None
    if not path or Path(path).resolve() == Path(verl_entry.__file__).resolve():
        return None
    return str(path), str(name)


def valid_response_lengths(data: DataProto) -> torch.Tensor:
    response_length = data.batch["responses"].shape[-1]
    return data.batch["attention_mask"][..., -response_length:].sum(dim=-1)


def _ground_truth(non_tensor_row: Mapping[str, Any]) -> Any:
    reward_model = non_tensor_row["reward_model"]
    if not isinstance(reward_model, Mapping) or "ground_truth" not in reward_model:
        raise ValueError(f"reward_model must be a mapping with 'ground_truth', got {reward_model!r}")
    return reward_model["ground_truth"]


class ProjectScorer:
    def __init__(self, kwargs: Mapping[str, Any]):
        self.options = RewardOptions.from_kwargs(kwargs)

    def channels(self, data_source: str) -> tuple[str, ...]:
        return verl_entry.channel_names(data_source, self.options)

    def submit(self, pool, data_source: str, text: str, ground_truth: Any, response_tokens: int, extra_info):
        verl_entry.task_of(data_source)  # an unknown data_source is a clear error here, not in a worker
        return pool.submit(verl_entry.score_sample, data_source, text, ground_truth, response_tokens, self.options)

    def fallback(self, data_source: str, response_tokens: int) -> dict[str, float]:
        return verl_entry.fallback_sample(data_source, response_tokens, self.options)


class ModuleScorer:
    def __init__(self, path: str, function: str, kwargs: Mapping[str, Any], data_source: str | None = None):
        pool_kwargs, self.user_kwargs = reward_spec.split_pool_options(kwargs)
        self.options = RewardOptions(**pool_kwargs)
        self.options.validate()
        self.spec = reward_spec.load_reward_spec(path, function, data_source, self.user_kwargs)

    def channels(self, data_source: str) -> tuple[str, ...]:
        return tuple(self.spec.names)

    def submit(self, pool, data_source: str, text: str, ground_truth: Any, response_tokens: int, extra_info):
        extra = {**dict(extra_info or {}), "response_tokens": response_tokens}
        return pool.submit(reward_spec.score_item, self.spec.path, self.spec.function, self.user_kwargs,
                           self.spec.channels, data_source, text, ground_truth, extra)

    def fallback(self, data_source: str, response_tokens: int) -> dict[str, float]:
        return self.spec.fallback()


@register(MANAGER_NAME)
class DaraParallelRewardManager(RewardManagerBase):
    def __init__(self, config, tokenizer, compute_score=None, reward_router_address=None,
                 reward_model_tokenizer=None):
        super().__init__(config, tokenizer, compute_score)
        kwargs = reward_kwargs(config, compute_score)
        module = reward_module_of(config, compute_score)
        self.scorer = ProjectScorer(kwargs) if module is None else ModuleScorer(
            *module, kwargs, OmegaConf.select(config, "run.data_source", default=None))
        self.options = self.scorer.options
        self.pool = verl_entry.shared_pool(self.options)
        run_dir = OmegaConf.select(config, "run.output_dir", default=None)
        self.error_log = Path(run_dir) / REWARD_ERRORS if run_dir else None
        self._logged_errors = 0
        self._log_lock = threading.Lock()

    def _result(self, outcome: Outcome, data_source: str, response_tokens: int) -> dict[str, Any]:
        channels, timed_out, failed = verl_entry.resolve_outcome(
            outcome, data_source, lambda: self.scorer.fallback(data_source, response_tokens))
        if failed:
            self._log_error(data_source, outcome.error)
        extra = {**channels, TIMEOUT_KEY: float(timed_out), ERROR_KEY: float(failed)}
        return {"reward_score": channels[SCORE_KEY], "reward_extra_info": extra}

    def _log_error(self, data_source: str, error: str) -> None:
        """The error's last line, up to MAX_LOGGED_ERRORS of them."""
        if self.error_log is None:
            return
        with self._log_lock:
            if self._logged_errors >= MAX_LOGGED_ERRORS:
                return
            self._logged_errors += 1
            lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
            self.error_log.parent.mkdir(parents=True, exist_ok=True)
            with open(self.error_log, "a") as handle:
                handle.write(f"{data_source}: {lines[-1] if lines else 'unknown error'}\n")

    async def run_single(self, data: DataProto) -> dict:
        item = data[-1:][0]  # multi-sequence outputs: the last sequence carries the reward, as in verl's managers
        response_tokens = int(valid_response_lengths(data[-1:])[0])
        valid_ids = item.batch["responses"][:response_tokens]
        data_source = item.non_tensor_batch["data_source"]
        ground_truth = _ground_truth(item.non_tensor_batch)
        extra_info = item.non_tensor_batch.get("extra_info", None)
        loop = asyncio.get_running_loop()
        text = await loop.run_in_executor(None, lambda: self.tokenizer.decode(valid_ids, skip_special_tokens=True))
        outcome = await asyncio.wrap_future(
            self.scorer.submit(self.pool, data_source, text, ground_truth, response_tokens, extra_info))
        return self._result(outcome, data_source, response_tokens)

    def __call__(self, data: DataProto, return_dict: bool = False):
        """The reward_tensor [N, T] (score on the last valid token), with `return_dict` in {"reward_tensor",
        "reward_extra_info", "metrics"}."""
        lengths = valid_response_lengths(data)
        responses = data.batch["responses"]
        texts = self.tokenizer.batch_decode([responses[row, : int(lengths[row])] for row in range(len(data))],
                                            skip_special_tokens=True)
        sources = data.non_tensor_batch["data_source"]
        channel_sets = {self.scorer.channels(source) for source in set(sources)}
        if len(channel_sets) > 1:
            raise ValueError(f"one batch mixes tasks with different reward channels {sorted(channel_sets)}")
        reward_models = data.non_tensor_batch["reward_model"]
        extra_infos = data.non_tensor_batch.get("extra_info", [None] * len(data))
        futures = [self.scorer.submit(self.pool, sources[row], texts[row], _ground_truth({"reward_model": reward_models[row]}),
                                     int(lengths[row]), extra_infos[row]) for row in range(len(data))]
        results = [self._result(future.result(), sources[row], int(lengths[row])) for row, future in enumerate(futures)]
        reward_tensor = torch.zeros_like(responses, dtype=torch.float32)
        reward_tensor[torch.arange(len(data)), (lengths - 1).clamp(min=0)] = torch.tensor(
            [r["reward_score"] for r in results], dtype=torch.float32)
        keys = results[0]["reward_extra_info"] if results else {}  # every sample has the same keys
        extra = {key: [r["reward_extra_info"][key] for r in results] for key in keys}
        metrics = verl_entry.step_metrics(extra, channel_sets.pop()) if len(data) else {}
        result = {"reward_tensor": reward_tensor, "reward_extra_info": extra, "metrics": metrics}
        return result if return_dict else reward_tensor
