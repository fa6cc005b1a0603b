"""Weight sync into vLLM's CPU build: verl's worker extension, with vLLM's layer-wise reload around the load.

verl starts the rollout engine on dummy weights and streams the trainer's weights into it after every update
(``vLLMColocateWorkerExtension.update_weights_from_ipc``: buckets over ZMQ, through shared memory where CUDA IPC
is missing). It then calls ``model.load_weights`` per bucket and ``process_weights_after_loading`` once. On vLLM's
CPU build that is wrong twice over:

- after the first load, vLLM repacks every linear layer for its CPU GEMM kernels and drops ``layer.weight``
  (``dispatch_cpu_unquantized_gemm(remove_weight=True)``), so a second ``load_weights`` has nothing to load into,
  and post-processing an already packed layer fails;
- vLLM's answer for a reload is ``initialize_layerwise_reload`` before ``load_weights`` and
  ``finalize_layerwise_reload`` after (its GPU runner's ``reload_weights`` does the same). Each layer is put back
  in its checkpoint layout, loaded, and repacked once complete; but a tied output head (``tie_word_embeddings``:
  the checkpoint has no ``lm_head.weight``) loads nothing, so the reload puts its old tensor and old GEMM handle
  back and the engine keeps sampling from the weights it started with.

:class:`CPUWeightSyncExtension` does the load inside that bracket, copies each tensor out of the bucket (the
receiver reuses and then closes the shared-memory buffer, and the reload keeps tensors until a layer is complete),
and re-ties and repacks the head afterwards. conf/cluster/cpu.yaml selects it through
``actor_rollout_ref.rollout.engine_kwargs.vllm.worker_extension_cls``; GPU configs keep verl's class.

vLLM's ``<layer>: Failed to load weights`` at each sync is silenced for the two layers that have nothing to load by
design: the rotary embedding (its cos/sin cache is computed from the config and put back unchanged) and a tied
head (re-tied here). Any other layer that loads nothing is still warned about.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager

import torch
from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension

logger = logging.getLogger(__name__)

EXTENSION_PATH = "dara.verl.cpu.vllm_weights.CPUWeightSyncExtension"


class WeightSyncError(RuntimeError):
    """The trainer's weights could not be loaded into the rollout engine."""


class _ExpectedReloadWarnings(logging.Filter):
    """Drop vLLM's "<layer>: Failed to load weights" for layers that have no weights in a checkpoint by design."""

    def __init__(self, layers: tuple[str, ...]):
        super().__init__()
        self.layers = layers

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.endswith("Failed to load weights") and message.startswith(self.layers))


@contextmanager
def _expected_reload_warnings_silenced(model: torch.nn.Module):
    # the rotary cos/sin cache is computed from the config; a tied head is re-tied by retie_output_heads
    layers = ("RotaryEmbedding",) + (("ParallelLMHead",) if _ties_head(model) else ())
    warning_filter = _ExpectedReloadWarnings(layers)
    reload_logger = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    reload_logger.addFilter(warning_filter)
    try:
        yield
    finally:
        reload_logger.removeFilter(warning_filter)


def _ties_head(model: torch.nn.Module) -> bool:
    return bool(getattr(getattr(model, "config", None), "tie_word_embeddings", False)) and hasattr(model, "lm_head")


def retie_output_heads(model: torch.nn.Module) -> int:
    """Point a tied output head at the (reloaded) input embedding again and rebuild its CPU GEMM handle.

    Returns the number of heads re-tied (0 for a model with its own head)."""
    if not _ties_head(model):
        return 0
    embed_tokens = getattr(getattr(model, "model", None), "embed_tokens", None)
    if embed_tokens is None:
        raise WeightSyncError(f"{type(model).__name__} ties its output head, but has no model.embed_tokens to tie "
                              "it to; the CPU weight sync knows only the Qwen2/Llama layout")
    head = model.lm_head.tie_weights(embed_tokens)
    head.quant_method.process_weights_after_loading(head)
    model.lm_head = head
    return 1


class CPUWeightSyncExtension(vLLMColocateWorkerExtension):
    """verl's vLLM worker extension for vLLM's CPU build: full-precision base weights, no LoRA, no quantisation."""

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
        retie_output_heads(model)

    def _check_plain_weights(self, peft_config) -> None:
        if peft_config or getattr(self.model_runner.vllm_config, "quant_config", None) is not None:
            raise WeightSyncError("the CPU weight sync loads full-precision base weights only (no LoRA, no quantisation)")

    def _load(self, weights) -> None:
        # copies: the tensors are views into a buffer the receiver reuses for the next bucket
        self._update_weights([(name, tensor.detach().clone()) for name, tensor in weights],
                             peft_config=None, base_sync_done=False)

    def update_weights_from_ipc(self, peft_config: dict = None, base_sync_done=False, use_shm: bool = False):
        """Receive the trainer's buckets (verl's protocol) and load them with vLLM's layer-wise reload."""
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
        """The same load from (name, tensor) pairs in this process (tests; an in-process ``vllm.LLM``)."""
        self._check_plain_weights(None)
        with self._layerwise_reload():
            self._load(weights)
