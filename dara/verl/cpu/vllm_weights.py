"""Weight sync into vLLM's CPU build (docs/cpu.md, "The weight sync"): verl's worker extension loading inside
vLLM's layer-wise reload bracket, then re-tying a tied output head (selected by conf/cluster/cpu.yaml)."""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager

import torch
from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension

logger = logging.getLogger(__name__)


class WeightSyncError(RuntimeError):
    pass


@contextmanager
def _expected_reload_warnings_silenced(model: torch.nn.Module):
    layers = ("RotaryEmbedding",) + (("ParallelLMHead",) if _ties_head(model) else ())

    def warning_filter(record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.endswith("Failed to load weights") and message.startswith(layers))

    reload_logger = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    reload_logger.addFilter(warning_filter)
    try:
        yield
    finally:
        reload_logger.removeFilter(warning_filter)


def _ties_head(model: torch.nn.Module) -> bool:
    return bool(getattr(getattr(model, "config", None), "tie_word_embeddings", False)) and hasattr(model, "lm_head")


class CPUWeightSyncExtension(vLLMColocateWorkerExtension):
    @contextmanager
    def _layerwise_reload(self):
        from vllm.model_executor.model_loader.reload import (
            finalize_layerwise_reload,
            initialize_layerwise_reload,
        )

        model = self.model_runner.model
        initialize_layerwise_reload(model)
        yield model
        with _expected_reload_warnings_silenced(model):
            finalize_layerwise_reload(model, self.model_runner.vllm_config.model_config)
        if _ties_head(model):  # point the head at the reloaded input embedding and rebuild its GEMM handle
            embed_tokens = getattr(getattr(model, "model", None), "embed_tokens", None)
            if embed_tokens is None:
                raise WeightSyncError(f"{type(model).__name__} ties its output head, but has no "
                                      "model.embed_tokens to tie it to; the CPU weight sync knows only the "
                                      "Qwen2/Llama layout")
            head = model.lm_head.tie_weights(embed_tokens)
            head.quant_method.process_weights_after_loading(head)
            model.lm_head = head

    def _check_plain_weights(self, peft_config) -> None:
        if peft_config or getattr(self.model_runner.vllm_config, "quant_config", None) is not None:
            raise WeightSyncError("the CPU weight sync loads full-precision base weights only (no LoRA, no quantisation)")

    def _load(self, weights) -> None:
        # copies: the tensors are views into a buffer the receiver reuses for the next bucket
        self._update_weights([(name, tensor.detach().clone()) for name, tensor in weights],
                             peft_config=None, base_sync_done=False)

    def update_weights_from_ipc(self, peft_config: dict = None, base_sync_done=False, use_shm: bool = False):
        from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightReceiver

        try:
            self._check_plain_weights(peft_config)
            receiver = BucketedWeightReceiver(zmq_handle=self._get_zmq_handle(), device=torch.device("cpu"),
                                              use_shm=use_shm)
            with self._layerwise_reload():
                receiver.receive_weights(on_bucket_received=lambda weights, is_last: self._load(weights))
        except BaseException as error:
            # verl's sender would wait for ever on a receiver that gave up, and a half-loaded engine must not
            # sample: end this worker, so vLLM declares the engine dead and the trainer's watchdog stops the run
            logger.error("weight sync into vLLM failed, ending the engine: %s: %s", type(error).__name__, error,
                         exc_info=True)
            logging.shutdown()
            os._exit(1)

    def load_weights_in_place(self, weights: list[tuple[str, torch.Tensor]]) -> None:
        """The same load from (name, tensor) pairs in this process (an in-process ``vllm.LLM``)."""
        self._check_plain_weights(None)
        with self._layerwise_reload():
            self._load(weights)
