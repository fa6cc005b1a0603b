"""verl's rollout seams for the "hf" backend: a replica (``RolloutReplicaRegistry``) and a server adapter
(``_ROLLOUT_REGISTRY``).

- :class:`HFReplica` is what verl's ``LLMServerManager`` builds per replica: it starts one
  :class:`~dara.verl.cpu.hf_server.HFRolloutServer` actor on the node of the replica's trainer ranks, named
  ``hf_server_<replica>_<node>`` so the adapter can find it.
- :class:`HFServerAdapter` lives inside each trainer rank (verl's ``ActorRolloutRefWorker.rollout``). With
  verl's default "naive" checkpoint backend, verl calls, after every training step:
  ``resume(["weights"])`` -> ``update_weights(<(name, tensor) generator>, global_steps=...)`` ->
  ``resume(["kv_cache"])``, and ``release()`` before training. The adapter of the replica's first rank streams
  the full tensors to the server in buckets of ``checkpoint_engine.update_weights_bucket_megabytes``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Generator
from typing import Any

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica

from dara.verl.cpu.hf_server import HFRolloutServer

logger = logging.getLogger(__name__)

ROLLOUT_NAME = "hf"
SERVER_NAME_PREFIX = f"{ROLLOUT_NAME}_"


def server_actor_name(replica_rank: int, node_rank: int = 0) -> str:
    """The Ray actor name of a replica's server, the same pattern verl's vLLM backend uses."""
    return f"{SERVER_NAME_PREFIX}server_{replica_rank}_{node_rank}"


class HFReplica(RolloutReplica):
    """A rollout replica served by transformers on the host CPU (tensor parallel 1: one server per replica)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.world_size != 1:
            raise ValueError(
                "the hf rollout runs one process per replica: set actor_rollout_ref.rollout."
                f"tensor_model_parallel_size/data_parallel_size/pipeline_model_parallel_size to 1 (world size {self.world_size})"
            )
        self.server_class = ray.remote(HFRolloutServer)

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self) -> None:
        """Start this replica's server on the node of its trainer rank (hybrid) or anywhere (standalone)."""
        if self.is_reward_model or self.is_teacher_model:
            raise NotImplementedError("the hf rollout serves the policy only (no reward or teacher model)")
        options: dict[str, Any] = {
            "name": server_actor_name(self.replica_rank, 0) + self.name_suffix,
            "max_concurrency": self.max_concurrency,
            "num_cpus": 0,
        }
        if self.workers:
            node_id = await self.workers[0].__ray_call__.remote(lambda worker: ray.get_runtime_context().get_node_id())
            options["scheduling_strategy"] = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                node_id=node_id, soft=False
            )
        server = self.server_class.options(**options).remote(
            config=self.config,
            model_config=self.model_config,
            rollout_mode=self.rollout_mode,
            replica_rank=self.replica_rank,
            node_rank=0,
        )
        await server.get_stats.remote()  # surfaces a failed model load here, not at the first request
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"ray-actor://{server_actor_name(self.replica_rank, 0)}"


class HFServerAdapter(BaseRollout):
    """Trainer-side handle of the hf server: forwards sleep/wake and pushes the trainer's weights."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any = None, replica_rank: int = -1, **kwargs: Any):
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", 0))
        rollout_world_size = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        self.replica_rank = rank // rollout_world_size if replica_rank == -1 else replica_rank
        self.rollout_rank = rank % rollout_world_size
        self.is_leader_rank = self.rollout_rank == 0
        self.server_handle = None
        self.bucket_bytes = int(self.config.checkpoint_engine.update_weights_bucket_megabytes) << 20

    def _server(self):
        """The replica's server actor, looked up lazily: verl launches servers after the trainer ranks."""
        if not self.is_leader_rank:
            return None
        if self.server_handle is None:
            self.server_handle = ray.get_actor(server_actor_name(self.replica_rank, 0))
        return self.server_handle

    async def resume(self, tags: list[str]) -> None:
        server = self._server()
        if server is not None and self.config.free_cache_engine:
            await server.wake_up.remote(tags=tags)

    async def release(self) -> None:
        server = self._server()
        if server is not None and self.config.free_cache_engine:
            await server.sleep.remote()

    @torch.no_grad()
    async def update_weights(
        self,
        weights: Generator[tuple[str, torch.Tensor], None, None],
        global_steps: int | None = None,
        wire_format: str = "named_tensors",
        **kwargs: Any,
    ) -> None:
        """Send every ``(name, full tensor)`` to the server in buckets; the server checks nothing is missing."""
        if wire_format != "named_tensors":
            raise NotImplementedError(f"the hf rollout takes full tensors only, got wire_format={wire_format!r}")
        if kwargs.get("peft_config") is not None:
            raise NotImplementedError("the hf rollout takes merged weights only (set model.lora.merge=true)")
        server = self._server()
        if server is None:
            for _ in weights:  # other ranks still walk the generator: FSDP gathers are collective
                pass
            return
        start = time.perf_counter()
        await server.begin_weight_update.remote()
        sent = 0
        try:
            bucket, bucket_bytes = [], 0
            for name, tensor in weights:
                tensor = tensor.detach().to("cpu").contiguous().clone()
                bucket.append((name, tensor))
                bucket_bytes += tensor.numel() * tensor.element_size()
                if bucket_bytes >= self.bucket_bytes:
                    sent += await server.load_weights.remote(bucket)
                    bucket, bucket_bytes = [], 0
            if bucket:
                sent += await server.load_weights.remote(bucket)
        except BaseException:
            await server.finish_weight_update.remote(check_complete=False)
            raise
        await server.finish_weight_update.remote(global_steps=global_steps)
        logger.info("hf rollout: %d tensors synced in %.2fs (step %s)", sent, time.perf_counter() - start, global_steps)

    def generate_sequences(self, prompts):
        raise NotImplementedError("the hf rollout serves the async agent loop only (token-in, token-out generate)")

