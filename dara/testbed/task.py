"""The testbed's task (docs/testbed.md "The task"): structured answers scored by two or three reward channels.

A prompt is `answer_slots` digits; the policy answers over EOS, the tags OPEN and CLOSE and `num_content` content
tokens. Rewards in [0, 1]: correctness (dense: the share of answer slots whose content token is the prompt digit's
permuted target), format (sparse: OPEN first and CLOSE right before EOS; its initial rate is `format_init_rate`)
and optionally length (EOS within `length_budget` tokens). The initial policy is calibrated analytically: every
position samples the same distribution q, whose tag probability q_t solves
    P(format) = q_t^2 * q_e * sum_{n=0}^{max_len-3} (1 - q_e)^n    (q_e = `eos_init_prob`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

EOS, OPEN, CLOSE = 0, 1, 2
NUM_SPECIAL = 3
CHANNELS_2 = ("correctness", "format")
CHANNELS_3 = ("correctness", "format", "length")
REWARD_RANGE = (0.0, 1.0)  # every channel lies in [0, 1]


@dataclass(frozen=True)
class TaskConfig:
    """Knobs of the task (documented in docs/testbed.md)."""
    num_content: int = 13  # content tokens, also the number of values a prompt digit takes
    answer_slots: int = 3  # digits per prompt = content tokens scored by correctness
    max_len: int = 10  # longest response in tokens (a response without EOS is cut here)
    format_init_rate: float = 0.02  # P(format) of the initial policy: the sparse channel's rarity
    eos_init_prob: float = 0.15  # per-token EOS probability of the initial policy (mean length ~6)
    length_channel: bool = False  # add the third reward channel
    length_budget: int = 6  # length reward: EOS within this many tokens
    held_out_fraction: float = 0.25  # prompts kept out of training, for final correctness
    task_seed: int = 0  # fixes the permutations and the split; the same for every run

    def __post_init__(self) -> None:
        if self.num_content < 2 or self.answer_slots < 1:
            raise ValueError("need num_content >= 2 and answer_slots >= 1")
        if self.max_len < self.answer_slots + 3:
            raise ValueError(f"max_len {self.max_len} cannot hold OPEN, {self.answer_slots} slots, CLOSE and EOS")
        if not 0 < self.eos_init_prob < 1:
            raise ValueError(f"eos_init_prob must lie in (0, 1), got {self.eos_init_prob}")
        if not 0 < self.format_init_rate < (limit := max_format_rate(self)):
            raise ValueError(f"format_init_rate must lie in (0, {limit:.3f}) for eos_init_prob "
                             f"{self.eos_init_prob} and max_len {self.max_len}, got {self.format_init_rate}")
        if not 0 < self.held_out_fraction < 1:
            raise ValueError(f"held_out_fraction must lie in (0, 1), got {self.held_out_fraction}")

    @property
    def vocab_size(self) -> int:
        return NUM_SPECIAL + self.num_content

    @property
    def channel_names(self) -> tuple[str, ...]:
        return CHANNELS_3 if self.length_channel else CHANNELS_2

    @property
    def sparse_channel(self) -> str:
        return "format"


def _end_mass(config: TaskConfig) -> float:
    """q_e * sum_{n=0}^{max_len-3} (1 - q_e)^n: EOS closes the response at position 2..max_len-1."""
    q_e = config.eos_init_prob
    return 1.0 - (1.0 - q_e) ** (config.max_len - 2)


def max_format_rate(config: TaskConfig) -> float:
    """Largest initial format rate reachable: both tags share all non-EOS mass (q_t = (1 - q_e) / 2)."""
    q_t = (1.0 - config.eos_init_prob) / 2.0
    return q_t * q_t * _end_mass(config)


def initial_distribution(config: TaskConfig) -> torch.Tensor:
    """The per-position token distribution q [V] of the initial policy."""
    q_tag = (config.format_init_rate / _end_mass(config)) ** 0.5
    q_content = (1.0 - config.eos_init_prob - 2.0 * q_tag) / config.num_content
    q = torch.full((config.vocab_size,), q_content, dtype=torch.float64)
    q[EOS] = config.eos_init_prob
    q[OPEN] = q[CLOSE] = q_tag
    return q


def initial_bias(config: TaskConfig) -> torch.Tensor:
    """Output-layer bias whose softmax is `initial_distribution` (float32 [V])."""
    return initial_distribution(config).log().float()


@dataclass(frozen=True)
class PromptSet:
    """All prompts (digit tuples) of the task, their targets, and the train / held-out split."""
    digits: torch.Tensor  # [P, slots] int64
    targets: torch.Tensor  # [P, slots] int64 content token ids
    train_ids: torch.Tensor  # [P_train] int64 rows of `digits`
    eval_ids: torch.Tensor  # [P_eval]


def build_prompts(config: TaskConfig) -> PromptSet:
    """Every digit tuple, targets through per-slot permutations, split with `task_seed`."""
    gen = torch.Generator().manual_seed(config.task_seed)
    grids = torch.meshgrid(*[torch.arange(config.num_content)] * config.answer_slots, indexing="ij")
    digits = torch.stack([g.reshape(-1) for g in grids], dim=1)
    perms = torch.stack([torch.randperm(config.num_content, generator=gen) for _ in range(config.answer_slots)])
    targets = perms.gather(1, digits.T).T + NUM_SPECIAL
    order = torch.randperm(digits.shape[0], generator=gen)
    num_eval = max(1, int(round(config.held_out_fraction * digits.shape[0])))
    return PromptSet(digits=digits, targets=targets, train_ids=order[num_eval:], eval_ids=order[:num_eval])


def response_lengths(tokens: torch.Tensor) -> torch.Tensor:
    """Tokens up to and including the first EOS (max_len when there is none), [N] int64."""
    is_eos = tokens == EOS
    first = torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1), torch.full_like(tokens[:, 0], tokens.shape[1]))
    return torch.where(is_eos.any(dim=1), first + 1, first)


def response_mask(tokens: torch.Tensor) -> torch.Tensor:
    """[N, T] float mask of each response's valid tokens (through the first EOS)."""
    positions = torch.arange(tokens.shape[1]).unsqueeze(0)
    return (positions < response_lengths(tokens).unsqueeze(1)).float()


def score(tokens: torch.Tensor, targets: torch.Tensor, config: TaskConfig) -> torch.Tensor:
    """Reward channels of each response, float32 [N, K] in `config.channel_names` order, from tokens [N, T]
    (anything after the first EOS is ignored) and targets [N, slots]."""
    lengths = response_lengths(tokens)
    positions = torch.arange(tokens.shape[1]).unsqueeze(0)
    valid = positions < lengths.unsqueeze(1)
    ended = (tokens == EOS).any(dim=1)

    # correctness: the i-th content token of the response against target_i
    is_content = valid & (tokens >= NUM_SPECIAL)
    content_rank = is_content.long().cumsum(dim=1) - 1  # 0 for the first content token
    hits = torch.zeros(tokens.shape[0], dtype=torch.float32)
    for slot in range(config.answer_slots):
        at_slot = is_content & (content_rank == slot)
        hits += (at_slot & (tokens == targets[:, slot : slot + 1])).any(dim=1).float()
    correctness = hits / config.answer_slots

    # format: OPEN first, CLOSE right before EOS
    before_eos = tokens.gather(1, (lengths - 2).clamp(min=0).unsqueeze(1)).squeeze(1)
    formatted = ended & (lengths >= 3) & (tokens[:, 0] == OPEN) & (before_eos == CLOSE)
    channels = [correctness, formatted.float()]
    if config.length_channel:
        channels.append((ended & (lengths <= config.length_budget)).float())
    return torch.stack(channels, dim=1)
