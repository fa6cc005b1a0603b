"""Per-request sampling seeds for verl's single-turn agent loop: a seed fixes a run's rollouts, not only its
data order and initial weights.

verl seeds vLLM's sampling per request only under `rollout.full_determinism`, and then with one seed for every
request (replica rank + rollout.seed): the G responses of a group would be the same response. This agent loop
gives each response its own seed, `request_seed(rollout.seed, step, row index, session)` (session = the
response's place in its group), so a rerun of the same run seed samples the same responses where the model's
probabilities are the same, and different groups and steps sample independently. A request that already
carries a seed, or a greedy one (temperature 0), is left as it is.

Validation is seeded apart from training (the phase is part of the key): verl's trainer marks a validation batch
with ``validate`` and its agent-loop worker removes that mark before the loops see the rows, so the trainer
wraps its validation loader (:class:`ValidationTagged`) to add the row key VALIDATION_KEY, which reaches the loop.

Registered under the agent name `dara_seeded_single_turn` through `rollout.agent.agent_loop_config_path`
(AGENT_LOOP_CONFIG, the file beside this module): verl loads that file in every agent-loop worker, so the
registration reaches the Ray actors that run the loop. `rollout.agent.default_agent_loop` chooses it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

AGENT_NAME = "dara_seeded_single_turn"
AGENT_LOOP_CONFIG = Path(__file__).with_name("conf") / "agent_loops.yaml"
SEED_BITS = 31  # vLLM takes any int; 31 bits stay a positive int32 for every sampler
VALIDATION_KEY = "dara_validate"  # a validation row's mark (ValidationTagged), an agent-loop keyword


def _as_int(value: Any) -> int:
    """A 0-d tensor, numpy scalar, one-element sequence or int as an int."""
    if hasattr(value, "item"):
        return int(value.item())
    if isinstance(value, list | tuple):
        (value,) = value
    return int(value)


def request_seed(base_seed: int, step: int, index: int, session: int, validate: bool = False) -> int:
    """A stable seed for one response: blake2b over the four numbers (and the phase), so no two responses of a
    run share a seed by an arithmetic accident (seed + step == seed' + step')."""
    key = f"{int(base_seed)}:{int(step)}:{int(index)}:{int(session)}:{'val' if validate else 'train'}"
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % (1 << SEED_BITS)


def seeded_params(sampling_params: dict[str, Any], base_seed: int, request: dict[str, Any]) -> dict[str, Any]:
    """``sampling_params`` with this response's seed (``request``: the loop's keyword arguments: index,
    global_steps, session_id, a validation mark); a request that has a seed, or a greedy one, is left as it is."""
    params = dict(sampling_params)
    if "seed" not in params and float(params.get("temperature", 1.0) or 0.0) > 0.0:
        params["seed"] = request_seed(
            base_seed,
            _as_int(request.get("global_steps", 0)),
            _as_int(request["index"]),
            _as_int(request.get("session_id", 0)),
            validate=bool(request.get("validate", False) or request.get(VALIDATION_KEY, False)),
        )
    return params


class SeededSingleTurnAgentLoop(SingleTurnAgentLoop):
    """verl's single-turn loop with a per-request sampling seed (module docstring)."""

    async def run(self, sampling_params: dict[str, Any], **kwargs):
        return await super().run(seeded_params(sampling_params, self.rollout_config.seed, kwargs), **kwargs)


class ValidationTagged:
    """A validation dataloader whose batches carry VALIDATION_KEY = True per row (everything else passes
    through), so the seeded loop keys validation requests apart from training ones."""

    def __init__(self, loader):
        self.loader = loader

    def __iter__(self):
        import numpy as np

        for batch in self.loader:
            rows = len(next(iter(batch.values())))
            yield {**batch, VALIDATION_KEY: np.full(rows, True, dtype=object)}

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str):
        return getattr(self.loader, name)
