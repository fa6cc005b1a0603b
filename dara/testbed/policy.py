"""A tiny autoregressive policy over the task's vocabulary, conditioned on the prompt digits.

Tokens are sampled one at a time and the PPO loss is a token mean, as in verl; instead of a recurrent state each
position sees a summary of its prefix (previous token, position, content tokens so far, the digit of the next
answer slot), so every position is scored in one batched pass.
"""

from __future__ import annotations

import torch
from torch import nn

from dara.testbed.task import EOS, NUM_SPECIAL, TaskConfig, initial_bias


class TinyPolicy(nn.Module):
    """logits_t = head(MLP([emb(d_1); ...; emb(d_S); tok(y_{t-1}); pos(t); count(c_t); slot(c_t, d_{c_t})])).

    c_t is the number of content tokens among y_<t: it tells which answer slot comes next, and
    slot(c_t, d_{c_t}) embeds that slot's digit (a shared "no slot" row once every slot is filled). The head
    starts at zero weights and the calibrated bias (task.initial_bias), so the initial policy samples
    every position from the same known distribution, whatever the prompt.
    """

    def __init__(self, config: TaskConfig, hidden: int = 64, embed: int = 16):
        super().__init__()
        self.config = config
        self.bos = config.vocab_size  # input-only start token
        self.digit_embed = nn.Embedding(config.answer_slots * config.num_content, embed)
        self.token_embed = nn.Embedding(config.vocab_size + 1, embed)
        self.pos_embed = nn.Embedding(config.max_len, embed)
        self.count_embed = nn.Embedding(config.max_len + 1, embed)
        self.slot_embed = nn.Embedding(config.answer_slots * config.num_content + 1, embed)
        width = (config.answer_slots + 4) * embed
        self.body = nn.Sequential(nn.Linear(width, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.head = nn.Linear(hidden, config.vocab_size)
        with torch.no_grad():
            self.head.weight.zero_()
            self.head.bias.copy_(initial_bias(config))

    def prompt_features(self, digits: torch.Tensor) -> torch.Tensor:
        """digits [N, slots] -> [N, slots * embed]; slot i reads its own embedding rows."""
        offsets = torch.arange(self.config.answer_slots) * self.config.num_content
        return self.digit_embed(digits + offsets).flatten(1)

    def slot_digit(self, digits: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        """Row of slot_embed for the next answer slot: slot * num_content + d_slot, or the last row."""
        slots, num_content = self.config.answer_slots, self.config.num_content
        slot = count.clamp(max=slots - 1)
        code = slot * num_content + digits.gather(1, slot)
        return torch.where(count < slots, code, torch.full_like(code, slots * num_content))

    def logits(self, digits: torch.Tensor, previous: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        """digits [N, slots]; previous, count [N, T] (prefix summaries) -> logits [N, T, V]."""
        positions = torch.arange(previous.shape[1]).expand_as(previous)
        prompt = self.prompt_features(digits).unsqueeze(1).expand(-1, previous.shape[1], -1)
        return self._head(prompt, previous, positions, count, self.slot_digit(digits, count))

    def _head(self, prompt, previous, position, count, slot_code) -> torch.Tensor:
        features = [prompt, self.token_embed(previous), self.pos_embed(position), self.count_embed(count),
                    self.slot_embed(slot_code)]
        return self.head(self.body(torch.cat(features, dim=-1)))

    @torch.no_grad()
    def sample(self, digits: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Sample responses [N, max_len] (temperature 1); positions after the first EOS are EOS."""
        n, prompt = digits.shape[0], self.prompt_features(digits)
        previous = torch.full((n,), self.bos, dtype=torch.long)
        count = torch.zeros(n, dtype=torch.long)
        done = torch.zeros(n, dtype=torch.bool)
        tokens = torch.full((n, self.config.max_len), EOS, dtype=torch.long)
        for t in range(self.config.max_len):
            logits = self._head(prompt, previous, torch.full_like(previous, t), count,
                                self.slot_digit(digits, count.unsqueeze(1)).squeeze(1))
            probs = torch.softmax(logits, dim=-1)
            token = torch.multinomial(probs, 1, generator=generator).squeeze(1)
            token = torch.where(done, torch.full_like(token, EOS), token)
            tokens[:, t] = token
            done |= token == EOS
            if bool(done.all()):
                break
            previous = token
            count = count + (token >= NUM_SPECIAL).long()
        return tokens

    def prefix_summaries(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs of every position under teacher forcing: previous token and content count, [N, T] each."""
        previous = torch.cat([torch.full_like(tokens[:, :1], self.bos), tokens[:, :-1]], dim=1)
        is_content = (tokens >= NUM_SPECIAL).long()
        count = torch.cat([torch.zeros_like(tokens[:, :1]), is_content.cumsum(dim=1)[:, :-1]], dim=1)
        return previous, count

    def token_log_probs(self, digits: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced log pi(y_t | prompt, y_<t) and the entropy of each position, both [N, T]."""
        previous, count = self.prefix_summaries(tokens)
        log_probs = torch.log_softmax(self.logits(digits, previous, count), dim=-1)
        chosen = log_probs.gather(2, tokens.unsqueeze(2)).squeeze(2)
        entropy = -(log_probs.exp() * log_probs).sum(dim=-1)
        return chosen, entropy
