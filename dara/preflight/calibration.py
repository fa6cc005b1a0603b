"""Minutes per step measured on a GPU type, in place of the cluster files' estimates (`--calibration FILE`).

`python -m recipes gpu_smoke` measures a small model's throughput on one GPU and writes per cluster and model the
minutes of one paper-run step (`scaled_step_minutes`): throughput per GPU goes with 1 / parameters; a step generates
`responses x max_response x response_fill` tokens (x DYNAMIC_SAMPLING_DRAWS under dynamic sampling) and trains on
`responses x (max_prompt x prompt_fill + max_response x response_fill)` tokens `ppo_epochs` times, plus a log-prob
pass of the actor and of the reference; fills are the smoke's on the tool-calling task, 1.0 elsewhere.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from dara.io import atomic_write_json

KIND = "dara-gpu-calibration"
VERSION = 1
DYNAMIC_SAMPLING_DRAWS = 2.0


class CalibrationError(ValueError):
    pass


@dataclass(frozen=True)
class Throughput:
    """What gpu_smoke measured, per GPU."""
    num_parameters: int
    rollout_tokens_per_s: float  # generated (response) tokens / generation seconds
    update_tokens_per_s: float  # trained (prompt + response) tokens / actor-update seconds
    logprob_tokens_per_s: float  # tokens / old-log-prob seconds
    other_seconds_per_response: float  # step time not in those phases, per response
    prompt_fill: float  # mean prompt length / max_prompt_length on the tool-calling task
    response_fill: float  # mean response length / max_response_length


@dataclass(frozen=True)
class RunShape:
    """The numbers of a paper run that its step time follows."""
    num_parameters: int
    gpus: int
    responses: int  # prompts per step x rollout.n
    max_prompt: int
    max_response: int
    ppo_epochs: int
    uses_reference: bool
    dynamic_sampling: bool
    measured_task: bool  # the task the smoke measured (its fills apply)


def scaled_step_minutes(measured: Throughput, run: RunShape) -> float:
    scale = measured.num_parameters / run.num_parameters
    prompt_fill, response_fill = (measured.prompt_fill, measured.response_fill) if run.measured_task else (1.0, 1.0)
    generated = run.responses * run.max_response * response_fill
    trained = run.responses * (run.max_prompt * prompt_fill + run.max_response * response_fill)
    draws = DYNAMIC_SAMPLING_DRAWS if run.dynamic_sampling else 1.0
    seconds = (draws * generated / (measured.rollout_tokens_per_s * scale * run.gpus)
               + run.ppo_epochs * trained / (measured.update_tokens_per_s * scale * run.gpus)
               + (2 if run.uses_reference else 1) * trained / (measured.logprob_tokens_per_s * scale * run.gpus)
               + draws * run.responses * measured.other_seconds_per_response)
    return seconds / 60


@dataclass(frozen=True)
class Calibration:
    path: str
    gpu: str
    measured_at: str
    step_minutes_by_cluster: dict[str, dict[str, float]] = field(default_factory=dict)

    def step_minutes(self, cluster: str, model: str) -> float | None:
        return self.step_minutes_by_cluster.get(cluster, {}).get(model)

    def describe(self) -> str:
        return f"gpu_smoke on {self.gpu}, {self.measured_at}, {self.path}"


def write_calibration(path: str | Path, *, gpu: str, measured_at: str, step_minutes: dict[str, dict[str, float]],
                      measured: dict, derivation: str) -> Path:
    atomic_write_json(path := Path(path), {"kind": KIND, "version": VERSION, "gpu": gpu, "measured_at": measured_at,
                             "step_minutes": step_minutes, "measured": measured, "derivation": derivation})
    return path


def load_calibration(path: str | Path) -> Calibration:
    path = Path(path)
    if not path.is_file():
        raise CalibrationError(f"calibration file {path} does not exist (python -m recipes gpu_smoke writes it)")
    try:
        content = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise CalibrationError(f"calibration file {path} is not JSON: {error}") from None
    if not isinstance(content, dict) or (content.get("kind"), content.get("version")) != (KIND, VERSION):
        raise CalibrationError(f"{path} is not a gpu_smoke calibration file (kind {KIND!r}, version {VERSION})")
    table = content.get("step_minutes")
    if not isinstance(table, dict) or not all(
            isinstance(models, dict) and all(isinstance(v, (int, float)) and v > 0 for v in models.values())
            for models in table.values()):
        raise CalibrationError(f"{path}: step_minutes must map cluster -> model -> positive minutes")
    return Calibration(str(path), str(content.get("gpu", "?")), str(content.get("measured_at", "?")), table)
