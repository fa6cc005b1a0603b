"""The project's verl trainer: reward channels into the advantage step, diagnostics into the logs.

verl 0.9.1's v1 trainer fetches only uid, masks, rm_scores and log-probs from TransferQueue for the
advantage step, so per-channel rewards (reward_extra_info) never reach an estimator. `ChannelTrainerMixin`
adds a pre-advantage step (the shape of verl's later `advantage_extra_fields`: fetch the extra fields the
estimator needs, hand them to it through the step's config): it reads the channels named in
`algorithm.reward_channels` from the samples' extra fields, then runs verl's own `_compute_advantage`
with a `ChannelContext` as the algorithm config the step passes to the registered estimator. KL in the
reward, rollout correction, gamma/lam/norm_adv_by_std_in_grpo and the write-back stay verl's code.

The mixin is registered over each verl trainer mode as `dara_<mode>` (`trainer.v1.trainer_mode`); the CPU
runtime's worker mixin joins it only where the CPU platform is active (`dara.verl.cpu`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
import transfer_queue as tq
from omegaconf import OmegaConf, open_dict
from verl.trainer.ppo.v1 import (
    PPOTrainerColocateAsync,
    PPOTrainerSeparateAsync,
    PPOTrainerSync,
    register_trainer,
)

from dara.config import library_estimator
from dara.io import atomic_write_text
from dara.run_folder import CHECKPOINT_TRACKER, REWARD_ERRORS  # the resume marker in default_local_dir
from dara.run_log import RunLog, reward_means
from dara.verl.engine_watchdog import HEALTH_ENDPOINT_ENGINES, EngineWatchdog
from dara.verl.estimators import ChannelContext, check_reward_ranges
from dara.verl.grad_clip import UNCLIPPED, UpdateRecorder, grad_clip_metrics, updates_per_step
from dara.verl.prefilter import with_prefilter_metrics
from dara.verl.rounds import RoundsReplayBuffer, build_rounds_buffer, rounds_settings
from dara.verl.seeded_rollout import AGENT_NAME as SEEDED_AGENT
from dara.verl.seeded_rollout import ValidationTagged
from dara.verl.stop_request import StopAtStepBoundaryMixin
from dara.verl.wandb_steps import WandbStepMixin
from rewards.spec import ERROR_KEY, TIMEOUT_KEY

logger = logging.getLogger(__name__)

METRIC_PREFIX = "dara/"


def channel_scores_from_extra_fields(extra_fields, channels: list[str]) -> torch.Tensor:
    """[N, K] float64 channel scores from each sample's `extra_fields["reward_extra_info"]`.

    Raises a ValueError naming the missing channel and the keys the reward function did return.
    """
    infos = []
    for value in extra_fields:
        fields = getattr(value, "data", value)
        infos.append(fields.get("reward_extra_info", {}) if isinstance(fields, dict) else {})
    available = sorted(infos[0]) if infos else []
    for channel in channels:
        missing = sum(channel not in info for info in infos)
        if missing:
            raise ValueError(
                f"reward channel {channel!r} (algorithm.reward_channels) is missing from the reward's extra info of "
                f"{missing}/{len(infos)} samples; the reward function returned keys {available}"
            )
    rows = [[float(info[c]) for c in channels] for info in infos]
    scores = torch.tensor(rows, dtype=torch.float64).reshape(len(infos), len(channels))
    if not torch.isfinite(scores).all():
        bad = (~torch.isfinite(scores)).nonzero()[0].tolist()
        raise ValueError(f"reward channel {channels[bad[1]]!r} is NaN or inf for sample {bad[0]}")
    return scores


def group_filter_counts(batch, metrics: dict) -> dict[str, float]:
    """Dynamic sampling made explicit: groups kept in the step's batch and groups drawn to fill it.

    verl's group filter logs the groups it evicted (summed reward constant) and the surplus it discarded;
    kept is the number of distinct prompt groups among the batch's real (non-padding) samples.
    """
    kept = len({key.split("_")[0] for key, tag in zip(batch.keys, batch.tags, strict=True)
                if not tag.get("is_padding", False)})
    evicted = sum(float(v) for k, v in metrics.items() if k.endswith("/filter_groups/evicted_samples"))
    surplus = sum(float(v) for k, v in metrics.items() if k.endswith("/filter_groups/discarded_surplus_samples"))
    return {"filter/kept_groups": float(kept), "filter/drawn_groups": kept + evicted + surplus}


REWARD_FLAGS = {TIMEOUT_KEY: "reward/timeouts", ERROR_KEY: "reward/errors"}  # each item's flags (rewards.spec)


def reward_flag_counts(extra_fields) -> dict[str, float]:
    """Per-step counts of the reward manager's per-sample flags (timed out, failed), where it sets them."""
    counts = dict.fromkeys(REWARD_FLAGS.values(), 0.0)
    seen = False
    for value in extra_fields:
        fields = getattr(value, "data", value)
        info = fields.get("reward_extra_info", {}) if isinstance(fields, dict) else {}
        for flag, key in REWARD_FLAGS.items():
            if flag in info:
                seen = True
                counts[key] += float(info[flag])
    return counts if seen else {}


def check_reward_failures(counts: dict, items: int, step: int, run_dir: str | None) -> None:
    """A step whose every item failed to score stops the run (no training on fallback scores), with the first
    error the reward manager logged in the run folder."""
    errors = counts.get(REWARD_FLAGS[ERROR_KEY], 0.0)
    if not items or errors < items:
        return
    log = Path(run_dir) / REWARD_ERRORS if run_dir else None
    first = log.read_text().splitlines()[0] if log is not None and log.exists() and log.stat().st_size else None
    raise ValueError(f"the reward function failed on every item of step {step} ({int(errors)} of {items})"
                     + (f"; first error: {first}" if first else "") + (f" (all: {log})" if log else ""))


class ChannelTrainerMixin(WandbStepMixin):
    """Overrides verl's advantage step for the project's estimators; logs a run log per step (and to wandb by
    training step, dara.verl.wandb_steps)."""

    VERL_MODE: str  # the verl trainer mode the class implements ("sync", "colocate_async", ...)

    def __init__(self, config):
        # verl's trainer branches on the mode's *name* (replay buffer, refill, checkpoints: `== "sync"`) and
        # reads the mode's options under trainer.v1.<mode>. TaskRunner already chose this class by its
        # registered name (dara_<mode>), so from here on verl sees the mode the class implements.
        with open_dict(config):
            config.trainer.v1.trainer_mode = self.VERL_MODE
        super().__init__(config)

    def _build_replay_buffer(self):
        # run.dynamic_sampling.mode=rounds: the authors' generation rounds (dara.verl.rounds); otherwise
        # verl's own buffer (its DAPO filter in mode replay). Both record rollout_prefilter/<channel>/mean
        # over every generated response, evicted groups included.
        channels = list(self.config.algorithm.get("reward_channels", None) or [])
        settings = rounds_settings(self.config)
        buffer = build_rounds_buffer(self, settings) if settings else super()._build_replay_buffer()
        return with_prefilter_metrics(buffer, channels)

    def prepare_step(self) -> dict:
        if isinstance(self.replay_buffer, RoundsReplayBuffer):  # it submits each round itself
            return {}
        return super().prepare_step()

    def _submit_round(self, num_prompts: int) -> list[str]:
        """Dispatch the next `num_prompts` dataloader prompts; their uids in dataloader order."""
        batch = self._next_train_batch(num_prompts)
        self._submit_batch_to_rollout(batch)
        return [str(uid) for uid in batch["uid"]]

    def _update_actor(self, batch, metrics: dict):
        """verl's actor update; logs whether each optimizer update was clipped (dara.verl.grad_clip)."""
        recorder = UpdateRecorder(self.actor_rollout_wg)
        self.actor_rollout_wg = recorder
        try:
            batch = super()._update_actor(batch, metrics)
        finally:
            self.actor_rollout_wg = recorder.wrapped
        actor = self.config.actor_rollout_ref.actor
        expect = bool((self.config.get("run", None) or {}).get("expect_clipped_updates", False))
        updates = updates_per_step(len(batch.keys), actor.ppo_mini_batch_size, self.config.actor_rollout_ref.rollout.n,
                                   actor.ppo_epochs)
        clip = grad_clip_metrics(recorder.grad_norms, float(actor.optim.clip_grad), updates, expect)
        metrics.update(clip)
        if clip.get(UNCLIPPED, 0) > 0:
            logger.warning("step %d: %d of %d optimizer updates were not clipped (pre-clip norms %s, clip_grad %s); "
                           "run.expect_clipped_updates says every update should be", self.global_steps,
                           clip[UNCLIPPED], updates, [round(n, 4) for n in recorder.grad_norms], actor.optim.clip_grad)
        return batch

    def init(self):
        super().init()
        if self.config.actor_rollout_ref.rollout.agent.default_agent_loop == SEEDED_AGENT:
            self.val_dataloader = ValidationTagged(self.val_dataloader)  # validation seeded apart from training
        self.run_log = RunLog.from_config(self.config, resumed_step=self.global_steps)
        self.engine_watchdog = self._start_engine_watchdog()

    def _start_engine_watchdog(self) -> EngineWatchdog | None:
        """Watch the rollout servers (dara.verl.engine_watchdog); run.engine_watchdog_s=0 turns it off."""
        interval = float(OmegaConf.select(self.config, "run.engine_watchdog_s", default=0) or 0)
        manager = getattr(self, "llm_server_manager", None)
        replicas = manager.get_replicas() if manager is not None else []
        addresses = [r.server_address for r in replicas if getattr(r, "server_address", None)]
        run_dir = OmegaConf.select(self.config, "run.output_dir", default=None)
        engine = str(self.config.actor_rollout_ref.rollout.name)
        if interval <= 0 or not addresses or engine not in HEALTH_ENDPOINT_ENGINES:
            return None
        return EngineWatchdog(engine, addresses, run_dir, interval_s=interval).start()

    def fit(self, *args, **kwargs):
        watchdog = getattr(self, "engine_watchdog", None)
        try:
            return super().fit(*args, **kwargs)
        except Exception as error:  # whatever verl raised on the way (lost samples, ...): the engine's death first
            if watchdog is not None:
                watchdog.raise_if_dead(cause=error)
            raise
        finally:  # the servers shut down after training: no longer a failure
            if watchdog is not None:
                watchdog.stop()

    def _reward_channels(self) -> list[str]:
        channels = list(self.config.algorithm.get("reward_channels", None) or [])
        if not channels:
            raise ValueError("algorithm.reward_channels is empty: name the reward_extra_info keys to use as channels")
        return channels

    def _compute_advantage(self, batch, metrics: dict):
        """verl's own advantage step, with the batch's channel scores in its algorithm config."""
        if getattr(self, "engine_watchdog", None) is not None:  # samples of a dead engine are lost or padding
            self.engine_watchdog.raise_if_dead()
        if library_estimator(str(self.config.algorithm.adv_estimator)) is None:  # one of verl's own estimators
            return super()._compute_advantage(batch, metrics)
        context = self._channel_context(batch, metrics)
        config = self.config
        self.config = _WithAlgorithm(config, context)  # what verl's step reads as self.config.algorithm
        try:
            batch = super()._compute_advantage(batch, metrics)
        finally:
            self.config = config
        metrics.update({METRIC_PREFIX + k: v for k, v in context.metrics.items()})
        real_scores = context.channel_scores[context.real]
        metrics.update(reward_means(real_scores, context.channel_names))
        return batch

    def _channel_context(self, batch, metrics: dict) -> ChannelContext:
        """The pre-advantage step: channel scores from the samples' extra fields, padding rows marked."""
        channels = self._reward_channels()
        extra_fields = list(tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                                            select_fields=["extra_fields"])["extra_fields"])
        counts = reward_flag_counts(extra_fields)
        check_reward_failures(counts, len(extra_fields), getattr(self, "global_steps", None),
                              OmegaConf.select(self.config, "run.output_dir", default=None))
        metrics.update(counts)
        real = torch.tensor([not tag.get("is_padding", False) for tag in batch.tags], dtype=torch.bool)
        context = ChannelContext(self.config.algorithm, channel_scores_from_extra_fields(extra_fields, channels),
                                 channels, real)
        check_reward_ranges(context.channel_scores[context.real], channels, context.options.reward_ranges,
                            getattr(self, "global_steps", None))
        return context

    def _save_checkpoint(self):
        tracker = Path(self.config.trainer.default_local_dir) / CHECKPOINT_TRACKER
        previous = tracker.read_text() if tracker.exists() else None
        super()._save_checkpoint()
        if getattr(self, "run_log", None) is None or not tracker.exists():
            return
        # verl marks the step resumable before the step's metrics are logged; hold the mark back until
        # the run log has the step, so a job killed in between redoes the step instead of losing its line.
        self._pending_tracker = tracker.read_text()
        if previous is None:
            tracker.unlink()
        else:
            atomic_write_text(tracker, previous)

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        if self.config.algorithm.filter_groups.get("enable", False):
            metrics.update(group_filter_counts(batch, metrics))
        if getattr(self, "run_log", None) is not None:
            self.run_log.write(global_steps, metrics, self._reward_channels())
            pending, self._pending_tracker = getattr(self, "_pending_tracker", None), None
            if pending is not None:
                atomic_write_text(Path(self.config.trainer.default_local_dir) / CHECKPOINT_TRACKER, pending)


class _WithAlgorithm:
    """The trainer config with another `algorithm` node; every other key is the config's own."""

    def __init__(self, config, algorithm):
        self._config, self.algorithm = config, algorithm

    def __getattr__(self, key: str):
        return getattr(self._config, key)

    def get(self, key: str, default=None):
        return self.algorithm if key == "algorithm" else self._config.get(key, default)


@register_trainer("dara_sync")
class DaraTrainerSync(StopAtStepBoundaryMixin, ChannelTrainerMixin, PPOTrainerSync):
    """verl's synchronous trainer with the project's advantage step."""

    VERL_MODE = "sync"


@register_trainer("dara_colocate_async")
class DaraTrainerColocateAsync(StopAtStepBoundaryMixin, ChannelTrainerMixin, PPOTrainerColocateAsync):
    """verl's colocated asynchronous trainer with the project's advantage step."""

    VERL_MODE = "colocate_async"


@register_trainer("dara_separate_async")
class DaraTrainerSeparateAsync(StopAtStepBoundaryMixin, ChannelTrainerMixin, PPOTrainerSeparateAsync):
    """verl's separate-pool asynchronous trainer with the project's advantage step."""

    VERL_MODE = "separate_async"


CPU_SUFFIX = "_cpu"


def _register_cpu_variant(cls: type) -> type:
    """`dara_<mode>_cpu`: the trainer with the CPU runtime's worker classes (gloo process group)."""
    from dara.verl.cpu.workers import CPUWorkersMixin

    variant = type(f"{cls.__name__}CPU", (CPUWorkersMixin, cls),
                   {"__doc__": f"{cls.__doc__} On the CPU platform.", "__module__": __name__})
    globals()[variant.__name__] = variant  # importable by name, as Ray and pickle expect
    return register_trainer(f"dara_{cls.VERL_MODE}{CPU_SUFFIX}")(variant)


for _cls in (DaraTrainerSync, DaraTrainerColocateAsync, DaraTrainerSeparateAsync):
    _register_cpu_variant(_cls)


def trainer_mode_for_device(mode: str, device: str) -> str:
    """The registered trainer name for `trainer.v1.trainer_mode` on `trainer.device`."""
    if device == "cpu" and mode.startswith("dara_") and not mode.endswith(CPU_SUFFIX):
        return mode + CPU_SUFFIX
    return mode
