"""The "dara_parallel" reward manager for verl 0.9.1's reward loop.

Importing this module registers `DaraParallelRewardManager` under the name "dara_parallel"
(verl.experimental.reward_loop.reward_manager.register). It scores with rewards.verl_entry in a process
pool with a hard per-item time limit (rewards.pool), passes each response's valid token count to the
math reward, and never raises on model output: an item over the limit or one whose scoring fails gets
its task's fallback score and is flagged in reward_extra_info ("reward_timeout", "reward_error").

What verl hands a manager (reward_loop.RewardLoopWorker and agent_loop._compute_score): a DataProto
slice per sample with batch["responses"] (right-padded ids), batch["attention_mask"] (prompt + response),
non_tensor_batch["data_source"], ["reward_model"]["ground_truth"] and ["extra_info"]. `run_single`
returns {"reward_score": float, "reward_extra_info": {key: value}} with the same keys for every sample;
verl writes the score on the last valid response token (assemble_rm_scores) and the extra keys into
non_tensor_batch. Samples arrive concurrently (asyncio tasks), so the pool scores them in parallel.

Config: reward.reward_manager.{source: register, name: dara_parallel}; options in reward.reward_kwargs
(or reward.custom_reward_function.reward_kwargs when custom_reward_function.path names
rewards/verl_entry.py, by file path or as pkg://rewards.verl_entry); keys are
rewards.verl_entry.RewardOptions. In a process that has not imported
this module (e.g. a fresh Ray reward worker), use source: importlib, module.path:
pkg://dara.verl.reward_manager, name: DaraParallelRewardManager instead; it loads the same class.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from verl import DataProto
from verl.experimental.reward_loop.reward_manager import register
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase
from verl.utils.reward_score import default_compute_score

from rewards import verl_entry
from rewards.pool import Outcome
from rewards.verl_entry import ERROR_KEY, SCORE_KEY, TIMEOUT_KEY, RewardOptions

logger = logging.getLogger(__name__)

MANAGER_NAME = "dara_parallel"


def _as_dict(node: Any) -> dict[str, Any]:
    if node is None:
        return {}
    if isinstance(node, DictConfig):
        return OmegaConf.to_container(node, resolve=True)
    return dict(node)


def options_from_config(config: DictConfig, compute_score: Any = None) -> RewardOptions:
    """RewardOptions from reward.reward_kwargs and reward.custom_reward_function.reward_kwargs (the
    latter as verl bound it into `compute_score`); a key set to different values in both is an error."""
    reward = config.get("reward") or {}
    manager_kwargs = _as_dict(reward.get("reward_kwargs"))
    function_kwargs = _as_dict((reward.get("custom_reward_function") or {}).get("reward_kwargs"))
    if isinstance(compute_score, functools.partial) and len(compute_score.args) == 2:
        function_kwargs = {**function_kwargs, **_as_dict(compute_score.args[1])}
    clashes = sorted(
        k for k in manager_kwargs.keys() & function_kwargs.keys() if manager_kwargs[k] != function_kwargs[k]
    )
    if clashes:
        raise ValueError(
            f"reward option(s) {clashes} differ between reward.reward_kwargs and custom_reward_function.reward_kwargs"
        )
    return RewardOptions.from_kwargs({**manager_kwargs, **function_kwargs})


def _is_verl_entry_compute_score(function: Any) -> bool:
    """rewards.verl_entry.compute_score, imported by name or loaded by verl from the file's path (then its
    module is a copy named custom_module_<hash>)."""
    if function is verl_entry.compute_score:
        return True
    try:
        source = Path(inspect.getsourcefile(function)).resolve()
    except TypeError:  # a builtin or a callable object
        return False
    return (
        source == Path(verl_entry.__file__).resolve()
        and getattr(function, "__name__", None) == "compute_score"
    )


def _check_compute_score(compute_score: Any) -> None:
    """The manager always scores with rewards.verl_entry; a different custom reward function would be
    silently ignored, so it is an error."""
    if compute_score is None or compute_score is default_compute_score:
        return
    raw = (
        compute_score.args[0]
        if isinstance(compute_score, functools.partial) and compute_score.args
        else compute_score
    )
    if _is_verl_entry_compute_score(raw):
        return
    raise ValueError(
        f"the {MANAGER_NAME!r} reward manager scores with rewards.verl_entry; got custom reward function {raw!r}. "
        "Unset reward.custom_reward_function.path or point it at rewards/verl_entry.py."
    )


def valid_response_lengths(data: DataProto) -> torch.Tensor:
    """Valid (unpadded) response token count of each row: the response part of the attention mask."""
    response_length = data.batch["responses"].shape[-1]
    return data.batch["attention_mask"][..., -response_length:].sum(dim=-1)


def _ground_truth(non_tensor_row: Mapping[str, Any]) -> Any:
    reward_model = non_tensor_row["reward_model"]
    if not isinstance(reward_model, Mapping) or "ground_truth" not in reward_model:
        raise ValueError(f"reward_model must be a mapping with 'ground_truth', got {reward_model!r}")
    return reward_model["ground_truth"]


@register(MANAGER_NAME)
class DaraParallelRewardManager(RewardManagerBase):
    """Rule rewards (ToolRL, math) scored in a hard-time-limited process pool."""

    def __init__(
        self, config, tokenizer, compute_score=None, reward_router_address=None, reward_model_tokenizer=None
    ):
        super().__init__(config, tokenizer, compute_score)
        _check_compute_score(compute_score)
        self.options = options_from_config(config, compute_score)
        self.pool = verl_entry.shared_pool(self.options)

    # ------------------------------------------------------------------ per sample (verl's reward loop)
    def _submit(self, data_source: str, text: str, ground_truth: Any, response_tokens: int):
        verl_entry.task_of(data_source)  # an unknown data_source is a clear error here, not in a worker
        return self.pool.submit(
            verl_entry.score_sample, data_source, text, ground_truth, response_tokens, self.options
        )

    def _result(self, outcome: Outcome, data_source: str, response_tokens: int) -> dict[str, Any]:
        channels, timed_out, failed = verl_entry.resolve_outcome(
            outcome, data_source, response_tokens, self.options
        )
        extra = {**channels, TIMEOUT_KEY: float(timed_out), ERROR_KEY: float(failed)}
        return {"reward_score": channels[SCORE_KEY], "reward_extra_info": extra}

    async def run_single(self, data: DataProto) -> dict:
        item = data[-1:][
            0
        ]  # multi-sequence outputs: the last sequence carries the reward, as in verl's managers
        response_tokens = int(valid_response_lengths(data[-1:])[0])
        valid_ids = item.batch["responses"][:response_tokens]
        data_source = item.non_tensor_batch["data_source"]
        ground_truth = _ground_truth(item.non_tensor_batch)
        loop = asyncio.get_running_loop()
        text = await loop.run_in_executor(
            None, lambda: self.tokenizer.decode(valid_ids, skip_special_tokens=True)
        )
        future = self._submit(data_source, text, ground_truth, response_tokens)
        outcome = await asyncio.wrap_future(future)
        return self._result(outcome, data_source, response_tokens)

    # ------------------------------------------------------------------ whole batch (synchronous)
    def score_batch(self, data: DataProto) -> dict[str, Any]:
        """Score every row: {"reward_tensor" [N, T] (score on the last valid token), "reward_extra_info"
        {key: list}, "metrics" (rewards.verl_entry.step_metrics)}."""
        lengths = valid_response_lengths(data)
        responses = data.batch["responses"]
        texts = self.tokenizer.batch_decode(
            [responses[row, : int(lengths[row])] for row in range(len(data))], skip_special_tokens=True
        )
        sources = data.non_tensor_batch["data_source"]
        channel_sets = {verl_entry.channel_names(source, self.options) for source in set(sources)}
        if len(channel_sets) > 1:
            raise ValueError(f"one batch mixes tasks with different reward channels {sorted(channel_sets)}")
        reward_models = data.non_tensor_batch["reward_model"]
        futures = [
            self._submit(
                sources[row],
                texts[row],
                _ground_truth({"reward_model": reward_models[row]}),
                int(lengths[row]),
            )
            for row in range(len(data))
        ]
        results = [
            self._result(future.result(), sources[row], int(lengths[row]))
            for row, future in enumerate(futures)
        ]
        reward_tensor = torch.zeros_like(responses, dtype=torch.float32)
        rows = torch.arange(len(data))
        reward_tensor[rows, (lengths - 1).clamp(min=0)] = torch.tensor(
            [r["reward_score"] for r in results], dtype=torch.float32
        )
        extra: dict[str, list] = defaultdict(list)
        for result in results:
            for key, value in result["reward_extra_info"].items():
                extra[key].append(value)
        metrics = verl_entry.step_metrics(extra, channel_sets.pop()) if len(data) else {}
        return {"reward_tensor": reward_tensor, "reward_extra_info": dict(extra), "metrics": metrics}

    def __call__(self, data: DataProto, return_dict: bool = False):
        """verl's classic reward-function call: the reward tensor, or a dict with reward_extra_info."""
        result = self.score_batch(data)
        return result if return_dict else result["reward_tensor"]
