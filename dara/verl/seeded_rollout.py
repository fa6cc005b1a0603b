"""Per-request sampling seeds for verl's single-turn agent loop (verl seeds vLLM per request only under
`rollout.full_determinism`, one seed for all: a group's G responses would be one). Each response gets
`request_seed(rollout.seed, step, row, session)`; validation rows are tagged by the trainer
(`ValidationTagged`: verl drops its own mark). Registered as `dara_seeded_single_turn` through
conf/agent_loops.yaml beside this module."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

AGENT_NAME = "dara_seeded_single_turn"
AGENT_LOOP_CONFIG = Path(__file__).with_name("conf") / "agent_loops.yaml"
SEED_BITS = 31  # vLLM takes any int; 31 bits stay a positive int32 for every sampler
VALIDATION_KEY = "dara_validate"  # a validation row's mark (ValidationTagged), an agent-loop keyword


def _as_int(value: Any) -> int:
    if hasattr(value, "item"):
        return int(value.item())
    if isinstance(value, list | tuple):
        (value,) = value
    return int(value)


def request_seed(base_seed: int, step: int, index: int, session: int, validate: bool = False) -> int:
    """A stable seed for one response: a hash of the four numbers and the phase (no seed + step == seed' + step')."""
    key = f"{int(base_seed)}:{int(step)}:{int(index)}:{int(session)}:{'val' if validate else 'train'}"
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % (1 << SEED_BITS)


def seeded_params(sampling_params: dict[str, Any], base_seed: int, request: dict[str, Any]) -> dict[str, Any]:
    """`sampling_params` with this response's seed; a request with a seed, or a greedy one, is left as it is."""
    params = dict(sampling_params)
    if "seed" not in params and float(params.get("temperature", 1.0) or 0.0) > 0.0:
        validate = bool(request.get("validate", False) or request.get(VALIDATION_KEY, False))
        step, session = _as_int(request.get("global_steps", 0)), _as_int(request.get("session_id", 0))
        params["seed"] = request_seed(base_seed, step, _as_int(request["index"]), session, validate)
    return params


class SeededSingleTurnAgentLoop(SingleTurnAgentLoop):
    async def run(self, sampling_params: dict[str, Any], **kwargs):
        return await super().run(seeded_params(sampling_params, self.rollout_config.seed, kwargs), **kwargs)


class ValidationTagged:
    def __init__(self, loader):
        self.loader = loader

    def __iter__(self):
        for batch in self.loader:
            rows = len(next(iter(batch.values())))
            yield {**batch, VALIDATION_KEY: np.full(rows, True, dtype=object)}

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str):
        return getattr(self.loader, name)
