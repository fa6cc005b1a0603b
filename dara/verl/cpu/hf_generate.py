"""Token-in, token-out sampling with ``transformers`` ``generate``: the compute core of the "hf" rollout.

verl's agent loop sends one request per sample (prompt token ids + vLLM-style sampling params) and expects
back the sampled token ids and, per token, the log-probability of that token. Requests that share their
sampling settings are run as one left-padded batch, then cut at the first stop token.

Log-probabilities follow ``rollout.logprobs_mode`` with vLLM's meaning:
- ``processed_logprobs`` (verl's default): log-softmax of the scores the sampler drew from, i.e. logits divided
  by the temperature, then top-k / top-p filtered (filtered-out tokens never get sampled);
- ``raw_logprobs``: log-softmax of the unscaled logits.
With temperature 1.0 and no top-k / top-p both equal verl's trainer log-probs (log-softmax of logits / T).
Greedy requests (temperature 0) report log-probs at temperature 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from transformers import GenerationConfig, PreTrainedModel

LOGPROBS_MODES = ("processed_logprobs", "raw_logprobs")


@dataclass(frozen=True)
class SamplingSettings:
    """The sampling parameters one batch shares (hashable: it groups requests into batches)."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    repetition_penalty: float = 1.0
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass
class GenerationResult:
    """One sample: the generated ids (stop token included), their log-probs, and why generation ended."""

    token_ids: list[int]
    log_probs: list[float]
    stop_reason: str = "completed"
    finished_by_stop_token: bool = field(default=False, repr=False)


def sampling_settings(
    sampling_params: dict, *, default_max_new_tokens: int, max_possible_tokens: int, ignore_eos: bool = False
) -> SamplingSettings:
    """Read vLLM-style sampling params (the keys verl's agent loop sends) into :class:`SamplingSettings`.

    ``max_tokens`` (or sglang's ``max_new_tokens``) defaults to ``default_max_new_tokens``; the result is clamped
    to ``[1, max_possible_tokens]`` like verl's vLLM server does.
    """
    if max_possible_tokens < 1:
        raise ValueError(f"prompt leaves no room to generate (max_possible_tokens={max_possible_tokens})")
    params = dict(sampling_params)
    max_new = params.pop("max_tokens", None)
    if max_new is None:
        max_new = params.pop("max_new_tokens", None)
    if max_new is None:
        max_new = default_max_new_tokens
    max_new = max(1, min(int(max_new), max_possible_tokens))
    top_k = params.get("top_k", -1)
    top_k = -1 if top_k is None else int(top_k)
    stop = params.get("stop_token_ids") or ()
    return SamplingSettings(
        max_new_tokens=max_new,
        temperature=float(params.get("temperature", 1.0)),
        top_p=float(params.get("top_p", 1.0) if params.get("top_p") is not None else 1.0),
        top_k=top_k,
        repetition_penalty=float(params.get("repetition_penalty") or 1.0),
        stop_token_ids=tuple(sorted({int(t) for t in stop})),
        ignore_eos=bool(params.get("ignore_eos", ignore_eos)),
    )


def _generation_config(settings: SamplingSettings, eos_token_ids: Sequence[int], pad_token_id: int) -> GenerationConfig:
    """A GenerationConfig built from scratch so nothing is inherited from the model folder (HF's top_k=50 etc.)."""
    stop_ids = [] if settings.ignore_eos else list(eos_token_ids)
    stop_ids += [t for t in settings.stop_token_ids if t not in stop_ids]
    kwargs = dict(
        max_new_tokens=settings.max_new_tokens,
        min_new_tokens=settings.max_new_tokens if settings.ignore_eos and not settings.stop_token_ids else 0,
        pad_token_id=pad_token_id,
        eos_token_id=stop_ids or None,
        repetition_penalty=settings.repetition_penalty,
        return_dict_in_generate=True,
        output_scores=True,
        output_logits=True,
        use_cache=True,
    )
    if settings.greedy:
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    else:
        kwargs.update(
            do_sample=True,
            temperature=settings.temperature,
            top_p=settings.top_p,
            top_k=settings.top_k if settings.top_k > 0 else 0,
        )
    return GenerationConfig(**kwargs)


@torch.no_grad()
def generate_batch(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    settings: SamplingSettings,
    *,
    eos_token_ids: Sequence[int],
    pad_token_id: int,
    logprobs_mode: str = "processed_logprobs",
) -> list[GenerationResult]:
    """Sample one continuation per prompt with ``model.generate`` on a left-padded batch.

    Each result holds the ids up to and including the first stop token (eos ids unless ``ignore_eos``, plus the
    request's ``stop_token_ids``), or ``max_new_tokens`` ids when none appears (stop reason "completed" in both
    cases, as vLLM reports "stop" and "length" to verl).
    """
    if logprobs_mode not in LOGPROBS_MODES:
        raise ValueError(f"logprobs_mode must be one of {LOGPROBS_MODES}, got {logprobs_mode!r}")
    if not prompts:
        return []
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt) :] = torch.as_tensor(list(prompt), dtype=torch.long)
        attention_mask[row, width - len(prompt) :] = 1

    out = model.generate(
        input_ids=input_ids.to(device),
        attention_mask=attention_mask.to(device),
        generation_config=_generation_config(settings, eos_token_ids, pad_token_id),
    )
    new_tokens = out.sequences[:, width:].cpu()
    if logprobs_mode == "processed_logprobs" and not settings.greedy:
        step_scores = torch.stack(out.scores, dim=1).float()
    else:
        step_scores = torch.stack(out.logits, dim=1).float()
    log_probs = torch.log_softmax(step_scores, dim=-1).gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1).cpu()

    stop_ids = set() if settings.ignore_eos else {int(t) for t in eos_token_ids}
    stop_ids |= set(settings.stop_token_ids)
    results = []
    for row in range(len(prompts)):
        ids = new_tokens[row].tolist()
        end, stopped = len(ids), False
        for position, token in enumerate(ids):
            if token in stop_ids:
                end, stopped = position + 1, True
                break
        results.append(
            GenerationResult(
                token_ids=ids[:end],
                log_probs=log_probs[row, :end].tolist(),
                stop_reason="completed",
                finished_by_stop_token=stopped,
            )
        )
    return results
