"""Generation through vLLM's offline engine on a CPU (training's CPU rollout settings) or a GPU: per chat, ``n``
completions (text, generated tokens without eos, ``stop`` | ``length`` | ``over_window``)."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Protocol

from dara import PROJECT_ROOT

log = logging.getLogger(__name__)


# Tokens the authors' BFCL handler kept free beside prompt and answer: min(8192, window - prompt - 2).
WINDOW_RESERVE = 2
# finish_reason of a request whose prompt leaves no room in the context window (nothing was generated).
OVER_WINDOW = "over_window"


@dataclass(frozen=True)
class SamplingConfig:
    """``context_window`` (BFCL): a request generates at most min(max_new_tokens, window - prompt - 2) tokens."""
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
        return self.max_new_tokens if self.context_window is None else min(
            self.max_new_tokens, self.context_window - prompt_tokens - WINDOW_RESERVE)

    def as_dict(self) -> dict:
        """As stored beside the generations (no window key without a clamp)."""
        return {k: v for k, v in asdict(self).items() if k != "context_window" or v is not None}


@dataclass
class Completion:
    text: str
    n_tokens: int
    finish_reason: str  # "stop" | "length" | "over_window"


class Backend(Protocol):
    def chat(self, conversations: Sequence[list[dict]], sampling: SamplingConfig,
             seeds: Sequence[int]) -> list[list[Completion]]:
        """``sampling.n`` completions per conversation; ``seeds[i]`` seeds conversation i."""


class EngineStartError(RuntimeError):
    """vLLM's engine did not start; the message is one line naming the setting to change."""


# training's CPU cluster file: its rollout settings are the evaluation's on a CPU too (one place for them)
CPU_CLUSTER = PROJECT_ROOT / "conf" / "cluster" / "cpu.yaml"


def cpu_engine_settings() -> tuple[dict, dict]:
    """(vLLM engine arguments, VLLM_* environment) of training's CPU rollout (less its training-only extension)."""
    from omegaconf import OmegaConf
    cluster = OmegaConf.load(CPU_CLUSTER)
    rollout = cluster.actor_rollout_ref.rollout
    engine = {key: rollout[key] for key in ("dtype", "enforce_eager", "enable_chunked_prefill", "enable_sleep_mode")}
    engine["tensor_parallel_size"] = rollout.tensor_model_parallel_size
    engine.update({k: v for k, v in OmegaConf.to_container(rollout.engine_kwargs.vllm).items()
                   if k != "worker_extension_cls"})
    env = cluster.ray_kwargs.ray_init.runtime_env.env_vars
    return engine, {key: str(value) for key, value in env.items() if key.startswith("VLLM_")}


def model_positions(model_dir: str) -> int | None:
    from transformers import AutoConfig
    return getattr(AutoConfig.from_pretrained(model_dir), "max_position_embeddings", None)


class VLLMBackend:
    """vLLM's offline engine (GPU: bf16). ``max_model_len``: the window (None: the model's; a longer one extends the
    positions). New tokens are clamped to the window; a prompt that fills it is not sent (``over_window``)."""

    def __init__(self, model_dir: str, *, device: str, tensor_parallel_size: int = 1,
                 gpu_memory_utilization: float = 0.85, max_model_len: int | None = None):
        if device == "cpu":
            engine, env = cpu_engine_settings()
            for key, value in env.items():
                os.environ.setdefault(key, value)
            setting = ("kv_cache_memory_bytes (actor_rollout_ref.rollout.engine_kwargs.vllm in "
                       f"{CPU_CLUSTER.relative_to(PROJECT_ROOT)})")
        else:
            engine = {"dtype": "bfloat16", "tensor_parallel_size": tensor_parallel_size,
                      "gpu_memory_utilization": gpu_memory_utilization}
            setting = "--gpu-memory-utilization"
        if max_model_len is not None and max_model_len > (model_positions(model_dir) or max_model_len):
            engine["hf_overrides"] = {"max_position_embeddings": max_model_len}
        # the engine core in this process: a failed start raises its own error here, not a child process's
        # traceback followed by "Engine core initialization failed. See root cause above."
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM  # imported here: the scoring stages need no vLLM
        try:
            self.llm = LLM(model=model_dir, max_model_len=max_model_len, **engine)
        except Exception as error:  # any failure to start (memory, model, platform): one line, what to change
            cause = str(error).split(" Try ")[0].strip() or type(error).__name__  # vLLM's own hint names GPU flags
            raise EngineStartError(f"vLLM could not start on {device} for {model_dir}: {cause} "
                                   f"(the setting to change: {setting})") from None
        self.tokenizer = self.llm.get_tokenizer()
        self.window = self.llm.model_config.max_model_len  # vLLM refuses a request whose prompt + tokens exceed it

    def chat(self, conversations, sampling: SamplingConfig, seeds) -> list[list[Completion]]:
        from vllm import SamplingParams
        # Token ids, not text: vLLM would add special tokens again to a template that already has them.
        prompt_ids = [self.tokenizer(self.tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False),
                                     add_special_tokens=False)["input_ids"] for m in conversations]
        budgets = [min(sampling.token_budget(len(ids)), self.window - len(ids)) for ids in prompt_ids]
        fits = [i for i, budget in enumerate(budgets) if budget >= 1]  # an over-window prompt is not sent
        if len(fits) < len(prompt_ids):
            log.warning("%d of %d prompts leave no room in the window (%d tokens): not generated (finish_reason %s)",
                        len(prompt_ids) - len(fits), len(prompt_ids), self.window, OVER_WINDOW)
        params = [SamplingParams(n=sampling.n, temperature=sampling.temperature, top_p=sampling.top_p,
                                 max_tokens=budgets[i], seed=seeds[i]) for i in fits]
        prompts = [{"prompt_token_ids": prompt_ids[i]} for i in fits]
        results = self.llm.generate(prompts, params, use_tqdm=False) if fits else []
        eos = self.tokenizer.eos_token_id
        out = [[Completion("", 0, OVER_WINDOW)] * sampling.n for _ in conversations]
        for i, result in zip(fits, results, strict=True):
            out[i] = [Completion(o.text, len(o.token_ids) - int(bool(o.token_ids) and o.token_ids[-1] == eos),
                                 "length" if o.finish_reason == "length" else "stop") for o in result.outputs]
        return out
