"""One testbed run: group sampling, advantages from the estimator library, a PPO-style clipped update.

Each step samples B prompts x G responses, scores every channel, asks `compute_advantages` for token advantages
and takes `mini_batches` Adam steps on verl's clipped surrogate (token-mean, no KL, no entropy bonus):
    L = mean over valid tokens of max(-A r_t, -A clip(r_t, 1 - eps, 1 + eps)),  r_t = pi / pi_old.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from dara.run_log import reward_means
from dara.testbed.policy import TinyPolicy
from dara.testbed.task import REWARD_RANGE, PromptSet, TaskConfig, build_prompts, response_mask, score

AdvantageFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]


@dataclass(frozen=True)
class RunConfig:
    """Hyper-parameters of one run (the defaults are the documented full-run settings)."""
    estimator: str
    seed: int = 0
    num_prompts: int = 32  # B
    group_size: int = 8  # G
    steps: int = 150
    lr: float = 3e-3
    mini_batches: int = 2  # Adam steps per batch (verl's ppo_mini_batch_size = half the batch)
    clip_ratio: float = 0.2
    max_grad_norm: float = 1.0
    batch_norm: str = "token"  # verl's token whitening, as in the paper's tool-calling runs
    eval_samples: int = 2  # responses per held-out prompt for the final evaluation
    options: dict[str, Any] = field(default_factory=dict)  # extra estimator options (weights, ...)

    def __post_init__(self) -> None:
        if self.num_prompts < 1 or self.group_size < 1 or self.steps < 1:
            raise ValueError("num_prompts, group_size and steps must be >= 1")
        if self.mini_batches < 1 or self.num_prompts * self.group_size < self.mini_batches:
            raise ValueError(f"mini_batches {self.mini_batches} must lie in [1, B*G]")


def estimator_options(estimator: str, task: TaskConfig, static_sparse_weight: float = 3.0) -> dict[str, Any]:
    """Fixed weights for `static` (correctness 1, every other channel `static_sparse_weight`), reward ranges for
    an estimator that needs them (saw, sa_mrpo)."""
    from dara.estimators import ESTIMATORS
    names = task.channel_names
    if estimator == "static":
        return {"weights": [1.0 if name == "correctness" else static_sparse_weight for name in names]}
    registered = ESTIMATORS.get(estimator)
    if registered is not None and registered.needs_ranges:  # saw, or one of your own that reads them
        return {"reward_ranges": {name: list(REWARD_RANGE) for name in names}}
    return {}


def clipped_surrogate_loss(ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, clip: float) -> torch.Tensor:
    """verl's PPO policy loss with token-mean aggregation (module docstring), all inputs [N, T]."""
    surrogate = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1 - clip, 1 + clip))
    return (surrogate * mask).sum() / mask.sum().clamp(min=1.0)


def ppo_update(policy: TinyPolicy, optimizer: torch.optim.Optimizer, digits: torch.Tensor, tokens: torch.Tensor,
               mask: torch.Tensor, advantages: torch.Tensor, config: RunConfig, generator: torch.Generator) -> dict:
    """One epoch of clipped-surrogate mini-batch steps; returns the mean clip fraction and entropy."""
    with torch.no_grad():
        old_log_probs, _ = policy.token_log_probs(digits, tokens)
    order = torch.randperm(tokens.shape[0], generator=generator)
    clipped, entropy, tokens_seen = 0.0, 0.0, 0.0
    for chunk in order.chunk(config.mini_batches):
        log_probs, ent = policy.token_log_probs(digits[chunk], tokens[chunk])
        m, adv = mask[chunk], advantages[chunk]
        ratio = torch.exp(log_probs - old_log_probs[chunk])
        loss = clipped_surrogate_loss(ratio, adv, m, config.clip_ratio)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), config.max_grad_norm)
        optimizer.step()
        with torch.no_grad():
            outside = ((ratio - 1).abs() > config.clip_ratio).float()
            clipped += float((outside * m).sum())
            entropy += float((ent * m).sum())
            tokens_seen += float(m.sum())
    return {"actor/clip_frac": clipped / max(tokens_seen, 1.0), "actor/entropy": entropy / max(tokens_seen, 1.0)}


def energy_record(metrics: dict[str, float], channels: tuple[str, ...], ideal_per_group: int) -> dict[str, float]:
    """Per channel the library's energy metrics, plus `weighted_energy_vs_ideal/<c>` = energy_weighted / (B pi_k
    (G - 1)) (w_k^2 for DARA-Sym) and `weighted_energy_share/<c>` (over the largest channel's); NaN for a channel
    with no active group this step (skipped by the means)."""
    out: dict[str, float] = {}
    weighted_energy = {name: float(metrics.get(f"energy_weighted/{name}", math.nan)) for name in channels}
    largest = max(weighted_energy.values())
    for name in channels:
        active = metrics.get(f"active_groups/{name}", math.nan)
        ideal = active * ideal_per_group
        for key in ("density", "active_groups", "weight", "energy", "energy_weighted", "energy_ratio"):
            if f"{key}/{name}" in metrics:
                out[f"{key}/{name}"] = float(metrics[f"{key}/{name}"])
        if ideal > 0:
            out[f"energy_vs_ideal/{name}"] = float(metrics.get(f"energy_vs_ideal/{name}", math.nan))
            out[f"weighted_energy_vs_ideal/{name}"] = weighted_energy[name] / ideal
            out[f"weighted_energy_share/{name}"] = weighted_energy[name] / largest if largest > 0 else math.nan
        else:
            for key in ("energy_vs_ideal", "weighted_energy_vs_ideal", "weighted_energy_share"):
                out[f"{key}/{name}"] = math.nan
    return out


@torch.no_grad()
def evaluate(policy: TinyPolicy, prompts: PromptSet, task: TaskConfig, samples: int, generator: torch.Generator):
    """Mean of every channel on the held-out prompts, `samples` sampled responses each."""
    ids = prompts.eval_ids.repeat_interleave(samples)
    tokens = policy.sample(prompts.digits[ids], generator)
    scores = score(tokens, prompts.targets[ids], task)
    return {f"eval/{name}": float(scores[:, k].mean()) for k, name in enumerate(task.channel_names)}


def train_run(task: TaskConfig, config: RunConfig, advantage_fn: AdvantageFn | None = None,
              progress: Callable[[int, dict[str, float]], None] | None = None) -> tuple[list[dict], dict[str, float]]:
    """Train one policy; returns (one record per step, final held-out evaluation). With the library's
    advantages, an estimator name that is not registered is a ValueError naming the registered ones."""
    from dara.estimators import ESTIMATORS, compute_advantages, get_estimator
    if advantage_fn is None:
        get_estimator(config.estimator)
        advantage_fn = compute_advantages
    torch.manual_seed(config.seed)
    generator = torch.Generator().manual_seed(10_007 * config.seed + 1)
    prompts = build_prompts(task)
    policy = TinyPolicy(task)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr)
    channels = task.channel_names
    options = {"channel_names": list(channels), **config.options}
    if not getattr(ESTIMATORS.get(config.estimator), "batch_norms", ()):  # grpo, dvao, gd2po define their own
        options["batch_norm"] = config.batch_norm
    group_index = torch.arange(config.num_prompts).repeat_interleave(config.group_size)
    records = []
    for step in range(1, config.steps + 1):
        start = time.perf_counter()
        pick = torch.randperm(prompts.train_ids.numel(), generator=generator)[: config.num_prompts]
        ids = prompts.train_ids[pick].repeat_interleave(config.group_size)
        digits, targets = prompts.digits[ids], prompts.targets[ids]
        tokens = policy.sample(digits, generator)
        mask = response_mask(tokens)
        scores = score(tokens, targets, task)
        advantages, metrics = advantage_fn(config.estimator, scores, group_index, mask, **options)
        if not torch.isfinite(advantages).all():
            raise FloatingPointError(f"{config.estimator} returned non-finite advantages at step {step}")
        update = ppo_update(policy, optimizer, digits, tokens, mask, advantages.float(), config, generator)
        record = {"step": float(step), **reward_means(scores, channels),
                  **energy_record(metrics, channels, config.group_size - 1),
                  "response_length/mean": float(mask.sum(dim=1).mean()), **update,
                  "step_seconds": time.perf_counter() - start}
        records.append(record)
        if progress is not None:
            progress(step, record)
    final = evaluate(policy, prompts, task, config.eval_samples, generator)
    return records, final
