"""The "hf" rollout server: a Ray actor that serves verl's token-in, token-out ``generate`` with transformers.

It answers the calls verl makes on a rollout server (the vLLM server's interface, see
``verl/workers/rollout/vllm_rollout/vllm_async_server.py``): ``generate`` from the agent loop;
``wake_up``/``sleep``/``clear_kv_cache``/``release_kv_cache``/``resume_kv_cache``/``abort_all_requests``/
``resume_generation`` from the replica and checkpoint manager; ``set_global_steps`` after a weight sync. The
trainer's weights arrive through :class:`dara.verl.cpu.hf_adapter.HFServerAdapter` as
``begin_weight_update`` / ``load_weights`` (one call per bucket) / ``finish_weight_update``.

Concurrent ``generate`` calls are gathered for ``batch_wait_s`` seconds and run as one batch per group of equal
sampling settings (one batch at a time, in a worker thread so the actor keeps answering).

Backend options live in ``actor_rollout_ref.rollout.engine_kwargs.hf``: ``num_threads`` (torch threads, null
keeps torch's default), ``max_batch_size`` (default 64), ``batch_wait_s`` (default 0.02).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from dara.verl.cpu.hf_generate import GenerationResult, SamplingSettings, generate_batch, sampling_settings

logger = logging.getLogger(__name__)

ENGINE_KWARGS_KEY = "hf"
DEFAULT_MAX_BATCH_SIZE = 64
DEFAULT_BATCH_WAIT_S = 0.02
DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


@dataclass
class _Pending:
    prompt_ids: list[int]
    settings: SamplingSettings
    future: asyncio.Future


def _resolve_configs(config: Any, model_config: Any):
    """verl hands replicas a RolloutConfig dataclass and the model node as a DictConfig: make both dataclasses."""
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import HFModelConfig, RolloutConfig

    if not isinstance(config, RolloutConfig):
        config = omega_conf_to_dataclass(config, dataclass_type=RolloutConfig)
    if not isinstance(model_config, HFModelConfig):
        model_config = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
    return config, model_config


def _eos_token_ids(model_config: Any, model) -> list[int]:
    """Stop ids: the generation config's eos ids (may be a list), else the tokenizer's / model config's eos id."""
    ids: list[int] = []
    for source in (getattr(model_config, "generation_config", None), model.generation_config, model.config):
        eos = getattr(source, "eos_token_id", None) if source is not None else None
        if eos is None:
            continue
        for token in eos if isinstance(eos, list | tuple) else [eos]:
            if int(token) not in ids:
                ids.append(int(token))
        if ids:
            break
    tokenizer = getattr(model_config, "tokenizer", None)
    if not ids and tokenizer is not None and tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    if not ids:
        raise ValueError(f"model at {model_config.local_path} defines no eos token id: generation could never stop")
    return ids


class HFRolloutServer:
    """One rollout server per replica node, holding a full copy of the policy in host memory."""

    def __init__(self, config: Any, model_config: Any, rollout_mode: Any = None, replica_rank: int = 0,
                 node_rank: int = 0):
        self.config, self.model_config = _resolve_configs(config, model_config)
        self.rollout_mode = rollout_mode
        self.replica_rank = replica_rank
        self.node_rank = node_rank
        options = dict((self.config.engine_kwargs or {}).get(ENGINE_KWARGS_KEY) or {})
        if options.get("num_threads"):
            torch.set_num_threads(int(options["num_threads"]))
        self.max_batch_size = int(options.get("max_batch_size") or DEFAULT_MAX_BATCH_SIZE)
        self.batch_wait_s = float(options.get("batch_wait_s", DEFAULT_BATCH_WAIT_S))
        dtype = DTYPES.get(str(self.config.dtype))
        if dtype is None:
            raise ValueError(f"rollout.dtype {self.config.dtype!r} is not one of {sorted(DTYPES)}")

        torch.manual_seed(self.config.seed + replica_rank)
        self.model = AutoModelForCausalLM.from_pretrained(
            self.model_config.local_path,
            dtype=dtype,
            attn_implementation="sdpa",
            trust_remote_code=self.model_config.trust_remote_code,
        ).eval()
        self.eos_token_ids = _eos_token_ids(self.model_config, self.model)
        tokenizer = self.model_config.tokenizer
        pad = tokenizer.pad_token_id if tokenizer is not None else None
        pad = pad if pad is not None else getattr(self.model.config, "pad_token_id", None)
        # left padding is masked out, so any id works; eos is the fallback when nothing names a pad token
        self.pad_token_id = int(pad if pad is not None else self.eos_token_ids[0])
        max_positions = getattr(self.model.config, "max_position_embeddings", None)
        self.max_model_len = int(self.config.max_model_len or max_positions or 1 << 30)

        self.global_steps = None
        self.awake = True
        self._pending: list[_Pending] = []
        self._batch_loop: asyncio.Task | None = None
        self._compute_lock: asyncio.Lock | None = None
        self._update_names: set[str] | None = None
        self.stats = {"requests": 0, "batches": 0, "generated_tokens": 0, "generate_seconds": 0.0,
                      "weight_updates": 0}

    # ------------------------------------------------------------------------------------------------
    # generation
    # ------------------------------------------------------------------------------------------------
    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str,
                       image_data: Any = None, video_data: Any = None, audio_data: Any = None, **kwargs: Any):
        """Token-in, token-out generation, answered as verl's ``TokenOutput`` (ids, log-probs, global_steps)."""
        from verl.utils import normalize_token_ids
        from verl.workers.rollout.replica import TokenOutput

        if image_data is not None or video_data is not None or audio_data is not None:
            raise NotImplementedError("the hf rollout serves text-only models")
        if not self.awake:
            logger.warning("hf rollout server %d got a request while asleep; serving it", self.replica_rank)
        prompt_ids = list(normalize_token_ids(prompt_ids))
        params = dict(sampling_params)
        want_logprobs = bool(params.pop("logprobs", False))
        default_new = min(self.config.response_length,
                          self.config.prompt_length + self.config.response_length - len(prompt_ids))
        settings = sampling_settings(
            params,
            default_max_new_tokens=default_new,
            max_possible_tokens=self.max_model_len - len(prompt_ids),
            ignore_eos=bool(self.config.ignore_eos),
        )
        result = await self._submit(prompt_ids, settings)
        return TokenOutput(
            token_ids=result.token_ids,
            log_probs=result.log_probs if want_logprobs else None,
            stop_reason=result.stop_reason,
            num_preempted=0,
            extra_fields={"global_steps": self.global_steps},
        )

    async def _submit(self, prompt_ids: list[int], settings: SamplingSettings) -> GenerationResult:
        loop = asyncio.get_running_loop()
        if self._compute_lock is None:
            self._compute_lock = asyncio.Lock()
        future = loop.create_future()
        self._pending.append(_Pending(prompt_ids, settings, future))
        self.stats["requests"] += 1
        if self._batch_loop is None or self._batch_loop.done():
            self._batch_loop = loop.create_task(self._run_batches())
        return await future

    async def _run_batches(self) -> None:
        """Drain the queue: wait briefly so concurrent requests join, then run one batch per sampling group."""
        while self._pending:
            await asyncio.sleep(self.batch_wait_s)
            first = self._pending[0].settings
            batch = [p for p in self._pending if p.settings == first][: self.max_batch_size]
            taken = {id(p) for p in batch}
            self._pending = [p for p in self._pending if id(p) not in taken]
            try:
                async with self._compute_lock:
                    start = time.perf_counter()
                    results = await asyncio.to_thread(
                        generate_batch,
                        self.model,
                        [p.prompt_ids for p in batch],
                        first,
                        eos_token_ids=self.eos_token_ids,
                        pad_token_id=self.pad_token_id,
                        logprobs_mode=self.config.logprobs_mode or "processed_logprobs",
                    )
                    self.stats["generate_seconds"] += time.perf_counter() - start
            except Exception as error:  # every waiting request learns why its batch failed
                for pending in batch:
                    if not pending.future.done():
                        pending.future.set_exception(error)
                continue
            self.stats["batches"] += 1
            for pending, result in zip(batch, results, strict=True):
                self.stats["generated_tokens"] += len(result.token_ids)
                if not pending.future.done():
                    pending.future.set_result(result)

    # ------------------------------------------------------------------------------------------------
    # weights from the trainer
    # ------------------------------------------------------------------------------------------------
    async def begin_weight_update(self) -> None:
        """Start a full weight sync; generation waits until :meth:`finish_weight_update`."""
        if self._compute_lock is None:
            self._compute_lock = asyncio.Lock()
        await self._compute_lock.acquire()
        self._update_names = set()

    async def load_weights(self, named_tensors: list[tuple[str, torch.Tensor]]) -> int:
        """Copy one bucket of ``(hf_name, full_tensor)`` pairs into the model; unknown names are an error."""
        if self._update_names is None:
            raise RuntimeError("load_weights called outside begin_weight_update/finish_weight_update")
        state = self.model.state_dict(keep_vars=True)
        unknown = [name for name, _ in named_tensors if name not in state]
        if unknown:
            raise KeyError(f"weights not in the rollout model: {unknown[:5]} (model has e.g. {list(state)[:5]})")
        with torch.no_grad():
            for name, tensor in named_tensors:
                target = state[name]
                if tuple(target.shape) != tuple(tensor.shape):
                    raise ValueError(f"weight {name}: shape {tuple(tensor.shape)} != rollout {tuple(target.shape)}")
                target.copy_(tensor.to(dtype=target.dtype))
                self._update_names.add(name)
        return len(named_tensors)

    async def finish_weight_update(self, global_steps: int | None = None, check_complete: bool = True) -> int:
        """End the sync: every parameter (tied ones count once) must have been received.

        ``check_complete=False`` only releases generation (the sender failed half-way and reports its own error).
        """
        if self._update_names is None:
            raise RuntimeError("finish_weight_update without begin_weight_update")
        try:
            if not check_complete:
                return len(self._update_names)
            received_storages = {
                self.model.state_dict(keep_vars=True)[name].data_ptr() for name in self._update_names
            }
            missing = [
                name for name, param in self.model.named_parameters() if param.data_ptr() not in received_storages
            ]
            if missing:
                raise ValueError(f"weight sync left {len(missing)} parameters stale, e.g. {missing[:5]}")
            if global_steps is not None:
                self.global_steps = global_steps
            self.stats["weight_updates"] += 1
            return len(self._update_names)
        finally:
            self._update_names = None
            self._compute_lock.release()

    async def set_global_steps(self, global_steps: int) -> None:
        """Version of the weights, returned with every sample as ``extra_fields['global_steps']``."""
        self.global_steps = global_steps

    # ------------------------------------------------------------------------------------------------
    # life cycle calls verl makes on every rollout server; host memory has no cache to free
    # ------------------------------------------------------------------------------------------------
    async def wake_up(self, tags: list[str] | None = None) -> None:
        self.awake = True

    async def sleep(self) -> None:
        self.awake = False

    async def clear_kv_cache(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def wait_for_requests_to_drain(self) -> None:
        while self._pending or (self._batch_loop is not None and not self._batch_loop.done()):
            await asyncio.sleep(0.01)

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict:
        """Nothing is preempted mid-batch: drain instead, then report that no request was aborted."""
        await self.wait_for_requests_to_drain()
        return {"aborted_count": 0, "request_ids": []}

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True) -> dict:
        return {"aborted": False, "request_id": request_id, "error": "the hf rollout does not abort requests"}

    async def resume_generation(self) -> None:
        return None

    async def resume_engine_generation(self) -> None:
        return None

    async def open_submission_gate(self) -> None:
        return None

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None

    def get_rollout_config(self):
        return self.config

    def get_stats(self) -> dict:
        """Counters for tests and logs: requests, batches, generated tokens, seconds generating, weight syncs."""
        return dict(self.stats, global_steps=self.global_steps, awake=self.awake)

    def get_state_dict(self) -> dict[str, torch.Tensor]:
        """A copy of the served weights (tests compare them with the trainer's)."""
        return {name: tensor.detach().clone() for name, tensor in self.model.state_dict().items()}
