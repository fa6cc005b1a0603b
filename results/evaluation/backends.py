"""Pluggable generation backends: HF transformers (CPU, the tiny smoke model) and vLLM (GPUs).

Both take chat conversations, apply the model's own chat template (add_generation_prompt=True),
and return, per conversation, ``n`` completions with the decoded text, the number of generated
tokens (the end-of-sequence token not counted) and why generation stopped: ``"stop"`` (an eos
token), ``"length"`` (the token budget ran out, i.e. the response is truncated) or ``"over_window"`` (the
prompt leaves no room in the context window, ``SamplingConfig.context_window``; nothing is generated).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Protocol

log = logging.getLogger(__name__)


# Tokens the authors' BFCL handler kept free beside prompt and answer: min(8192, window - prompt - 2).
WINDOW_RESERVE = 2
# finish_reason of a request whose prompt leaves no room in the context window (nothing was generated).
OVER_WINDOW = "over_window"


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling settings of one evaluation (EXPERIMENTS.md: math 16 x T=0.6, top-p 0.95, 32,768 tokens).

    ``context_window`` (BFCL): each request may generate at most min(max_new_tokens, window - prompt - 2)
    tokens; a prompt that leaves none gets no generation (finish_reason ``over_window``). None: no clamp."""

    n: int = 1
    temperature: float = 0.6
    top_p: float = 0.95
    max_new_tokens: int = 32768
    seed: int = 0
    context_window: int | None = None

    def __post_init__(self):
        if self.n < 1 or self.max_new_tokens < 1:
            raise ValueError(f"n and max_new_tokens must be positive: {self}")
        if self.n > 1 and self.temperature <= 0:
            raise ValueError(f"{self.n} samples per case need temperature > 0 (greedy decoding gives one answer)")
        if self.context_window is not None and self.context_window <= WINDOW_RESERVE:
            raise ValueError(f"context_window must exceed {WINDOW_RESERVE} tokens: {self}")

    def token_budget(self, prompt_tokens: int) -> int:
        """New tokens a prompt of ``prompt_tokens`` may get; < 1 means it is over the window."""
        if self.context_window is None:
            return self.max_new_tokens
        return min(self.max_new_tokens, self.context_window - prompt_tokens - WINDOW_RESERVE)

    def as_dict(self) -> dict:
        """The settings as stored beside the generations (no window key when there is no clamp, as before)."""
        settings = asdict(self)
        if self.context_window is None:
            del settings["context_window"]
        return settings


@dataclass
class Completion:
    text: str
    n_tokens: int
    finish_reason: str  # "stop" | "length" | "over_window"

    def as_dict(self) -> dict:
        return asdict(self)


def over_window(n: int) -> list[Completion]:
    """The completions of a prompt that leaves no room in the context window: nothing generated."""
    return [Completion(text="", n_tokens=0, finish_reason=OVER_WINDOW) for _ in range(n)]


class Backend(Protocol):
    name: str

    def chat(
        self, conversations: Sequence[list[dict]], sampling: SamplingConfig, seeds: Sequence[int]
    ) -> list[list[Completion]]:
        """``sampling.n`` completions for each conversation; ``seeds[i]`` seeds conversation i."""
        ...


class HFBackend:
    """transformers ``generate`` one conversation at a time (the tiny CPU model; any HF folder)."""

    name = "hf"

    def __init__(self, model_dir: str, *, device: str = "cpu", dtype: str = "float32", threads: int | None = None):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if threads:
            torch.set_num_threads(threads)
        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).to(device).eval()
        self.device = device
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        if eos is None:
            raise ValueError(f"{model_dir}: neither the generation config nor the tokenizer names an eos token")
        self.eos_ids = set(eos if isinstance(eos, list) else [eos])
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else min(self.eos_ids)

    def _completion(self, token_ids: list[int], max_new_tokens: int) -> Completion:
        stop_at = next((i for i, t in enumerate(token_ids) if t in self.eos_ids), None)
        kept = token_ids if stop_at is None else token_ids[:stop_at]
        truncated = stop_at is None and len(token_ids) >= max_new_tokens
        text = self.tokenizer.decode(kept, skip_special_tokens=True)
        return Completion(text=text, n_tokens=len(kept), finish_reason="length" if truncated else "stop")

    def chat(self, conversations, sampling: SamplingConfig, seeds) -> list[list[Completion]]:
        torch = self.torch
        out = []
        for messages, seed in zip(conversations, seeds, strict=True):
            prompt = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            enc = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False).to(self.device)
            budget = sampling.token_budget(enc["input_ids"].shape[1])
            if budget < 1:
                out.append(over_window(sampling.n))
                continue
            torch.manual_seed(seed)
            sample = sampling.temperature > 0
            extra = {"temperature": sampling.temperature, "top_p": sampling.top_p} if sample else {}
            with torch.no_grad():
                generated = self.model.generate(
                    **enc,
                    do_sample=sample,
                    max_new_tokens=budget,
                    num_return_sequences=sampling.n,
                    eos_token_id=sorted(self.eos_ids),
                    pad_token_id=self.pad_id,
                    **extra,
                )
            new_tokens = generated[:, enc["input_ids"].shape[1] :].tolist()
            out.append([self._completion(row, budget) for row in new_tokens])
        return out


class VLLMBackend:
    """vLLM offline engine (GPU). Prompts are rendered with the tokenizer's chat template, as in HFBackend."""

    name = "vllm"

    def __init__(
        self,
        model_dir: str,
        *,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.85,
        max_model_len: int | None = None,
        dtype: str = "bfloat16",
    ):
        from vllm import LLM  # imported here: vLLM is a GPU-only extra

        self.llm = LLM(
            model=model_dir,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            dtype=dtype,
        )
        self.tokenizer = self.llm.get_tokenizer()

    def chat(self, conversations, sampling: SamplingConfig, seeds) -> list[list[Completion]]:
        from vllm import SamplingParams

        # Token ids, not text: vLLM would add special tokens again to a template that already has them.
        prompt_ids = [
            self.tokenizer(
                self.tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False),
                add_special_tokens=False,
            )["input_ids"]
            for m in conversations
        ]
        budgets = [sampling.token_budget(len(ids)) for ids in prompt_ids]
        fits = [i for i, budget in enumerate(budgets) if budget >= 1]  # an over-window prompt is not sent
        params = [
            SamplingParams(
                n=sampling.n,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_tokens=budgets[i],
                seed=seeds[i],
            )
            for i in fits
        ]
        prompts = [{"prompt_token_ids": prompt_ids[i]} for i in fits]
        results = self.llm.generate(prompts, params, use_tqdm=False) if fits else []
        eos = self.tokenizer.eos_token_id
        out = [over_window(sampling.n) for _ in conversations]
        for i, result in zip(fits, results, strict=True):
            completions = []
            for o in result.outputs:
                ids = list(o.token_ids)
                n_tokens = len(ids) - (1 if ids and ids[-1] == eos else 0)
                reason = "length" if o.finish_reason == "length" else "stop"
                completions.append(Completion(text=o.text, n_tokens=n_tokens, finish_reason=reason))
            out[i] = completions
        return out


def make_backend(kind: str, model_dir: str, **options) -> Backend:
    """``hf`` or ``vllm``; options go to the backend's constructor."""
    if kind == "hf":
        return HFBackend(model_dir, **options)
    if kind == "vllm":
        return VLLMBackend(model_dir, **options)
    raise ValueError(f"unknown backend {kind!r}; choose hf or vllm")
