"""`DaraGRPOTrainer`: TRL's `GRPOTrainer` with the advantages of any `dara.estimators` estimator. TRL 1.16 has
no hook for the aggregation step, so two private methods are overridden (docs/trl.md, "How it plugs in");
where they no longer behave as in the supported release, `TrlSeamError` names it rather than training on TRL's
aggregation.
"""

from __future__ import annotations

import warnings

import torch
import trl
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from trl import GRPOTrainer

from .advantages import completion_advantages
from .config import DaraGRPOConfig

SUPPORTED_TRL = ">=1.16,<1.17"  # the release the overrides were written against (pyproject's `trl` extra)
OVERRIDDEN = ("_calculate_rewards", "_generate_and_score_completions")


class TrlSeamError(RuntimeError):
    """TRL's private methods no longer behave as dara.trl expects."""


def seam_error(problem: str) -> TrlSeamError:
    return TrlSeamError(f"{problem}: dara.trl supports trl{SUPPORTED_TRL}, installed trl {trl.__version__} "
                        "(pip install 'trl" + SUPPORTED_TRL + "')")


def check_trl_batch(rewards, output: dict, num_processes: int, num_channels: int) -> int:
    """The number of this process's completions, after checking what TRL's methods handed over."""
    if rewards is None:
        raise seam_error("GRPOTrainer._generate_and_score_completions did not call _calculate_rewards")
    if not isinstance(rewards, torch.Tensor) or rewards.dim() != 2 or rewards.shape[1] != num_channels:
        shape = tuple(rewards.shape) if isinstance(rewards, torch.Tensor) else type(rewards).__name__
        raise seam_error(f"_calculate_rewards returned {shape}, expected [completions, {num_channels} reward functions]")
    local = output.get("advantages") if isinstance(output, dict) else None
    if not isinstance(local, torch.Tensor) or local.dim() != 1:
        raise seam_error("_generate_and_score_completions returned no 1-D 'advantages' tensor")
    if rewards.shape[0] != num_processes * local.shape[0]:
        raise seam_error(f"the gathered rewards have {rewards.shape[0]} rows, expected {num_processes} processes x "
                         f"{local.shape[0]} completions")
    return int(local.shape[0])


class DaraGRPOTrainer(GRPOTrainer):
    """`GRPOTrainer` whose advantages come from `args.estimator` (a `DaraGRPOConfig`)."""

    def __init__(self, *args, **kwargs):
        for name in OVERRIDDEN:
            if not callable(getattr(GRPOTrainer, name, None)):
                raise seam_error(f"GRPOTrainer has no {name}")
        if Version(trl.__version__) not in SpecifierSet(SUPPORTED_TRL):
            warnings.warn(f"dara.trl was checked against trl{SUPPORTED_TRL}, installed trl {trl.__version__}",
                          stacklevel=2)
        super().__init__(*args, **kwargs)
        if not isinstance(self.args, DaraGRPOConfig):
            raise TypeError(f"DaraGRPOTrainer needs args=DaraGRPOConfig(...), got {type(self.args).__name__}")
        names = list(self.reward_func_names)
        if len(set(names)) != len(names):
            raise ValueError(f"the reward functions are the estimator's channels and need distinct names, got {names}")
        weights = self.reward_weights.tolist() if self.args.reward_weights is not None else None
        config = self.args.algo_config(names, weights)
        config.check_for(self.args.estimator, names)
        self.dara_estimator = self.args.estimator
        self.dara_options = config.keywords()
        self._dara_rewards = None

    def _calculate_rewards(self, *args, **kwargs):
        self._dara_rewards = super()._calculate_rewards(*args, **kwargs)
        return self._dara_rewards

    def _generate_and_score_completions(self, *args, **kwargs):
        self._dara_rewards = None  # a matrix from an earlier batch must never be used for this one
        output = super()._generate_and_score_completions(*args, **kwargs)
        rewards, self._dara_rewards = self._dara_rewards, None
        self._dara_replace_advantages(output, rewards)
        return output

    def _dara_replace_advantages(self, output: dict, rewards: torch.Tensor) -> None:
        """Put the estimator's advantages for this process's completions in `output`, log, record metrics."""
        mode = "train" if self.model.training else "eval"
        local = check_trl_batch(rewards, output, self.accelerator.num_processes, len(self.reward_func_names))
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        lengths = self._gathered_lengths(output) if self.dara_options["batch_norm"] == "token" else None
        advantages, metrics = completion_advantages(rewards, num_generations, self.reward_func_names,
                                                    self.dara_estimator, self.dara_options, lengths)
        start = self.accelerator.process_index * local
        trl_advantages = output["advantages"]
        output["advantages"] = advantages[start : start + local].to(trl_advantages.device, trl_advantages.dtype)
        logged = self._logs["advantages"]  # TRL's completions table: the global batch, most recent last
        for _ in range(min(len(logged), advantages.shape[0])):
            logged.pop()
        logged.extend(advantages.tolist())
        for key, value in metrics.items():
            self._metrics[mode][key].append(value)

    def _gathered_lengths(self, output: dict) -> torch.Tensor:
        """Every process's completion token counts (the tokens the loss sees), for token-level whitening."""
        mask = output["completion_mask"]
        if output.get("tool_mask") is not None:
            mask = mask * output["tool_mask"]
        return self.accelerator.gather(mask.sum(dim=1))
