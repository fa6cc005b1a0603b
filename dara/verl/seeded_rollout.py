"""Per-request sampling seeds for verl's single-turn agent loop: a seed fixes a run's rollouts, not only its
data order and initial weights.

verl seeds vLLM's sampling per request only under `rollout.full_determinism`, and then with one seed for every
request (replica rank + rollout.seed): the G responses of a group would be the same response. This agent loop
gives each response its own seed, `request_seed(rollout.seed, step, row index, session)` (session = the
response's place in its group), so a rerun of the same run seed samples the same responses where the model's
probabilities are the same, and different groups and steps sample independently. A request that already
carries a seed, or a greedy one (temperature 0), is left as it is.

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


class SeededSingleTurnAgentLoop(SingleTurnAgentLoop):
    """verl's single-turn loop with a per-request sampling seed (module docstring)."""

    async def run(self, sampling_params: dict[str, Any], **kwargs):
        params = dict(sampling_params)
        if "seed" not in params and float(params.get("temperature", 1.0) or 0.0) > 0.0:
            params["seed"] = request_seed(
                self.rollout_config.seed,
                _as_int(kwargs.get("global_steps", 0)),
                _as_int(kwargs["index"]),
                _as_int(kwargs.get("session_id", 0)),
                validate=bool(kwargs.get("validate", False)),
            )
        return await super().run(params, **kwargs)
