"""The `dara_sync` trainer (`trainer.v1.trainer_mode=dara_sync`): verl 0.9.1's sync trainer whose advantage step
also gets the per-channel rewards (`algorithm.reward_channels`, fetched from TransferQueue and published through
`dara.verl.estimators.channels_for_step`); verl's own `_compute_advantage` then runs unchanged."""

from __future__ import annotations

import importlib
import logging
from pathlib import Path

import ray
import torch
import transfer_queue as tq
from omegaconf import OmegaConf
from verl.trainer.ppo.v1 import PPOTrainerSync, register_trainer

from dara.config_checks import check_config
from dara.estimators import load_estimator_module
from dara.io import atomic_write_text
from dara.run_folder import CHECKPOINT_TRACKER, REWARD_ERRORS  # the resume marker in default_local_dir
from dara.run_log import RunLog, reward_means
from dara.tracking import log_by_step_metric
from dara.verl import estimators, placement, prefilter, rounds
from dara.verl.engine_watchdog import HEALTH_ENDPOINT_ENGINES, EngineWatchdog
from dara.verl.grad_clip import UNCLIPPED, UpdateRecorder, grad_clip_metrics, updates_per_step
from dara.verl.rounds import reward_info
from dara.verl.seeded_rollout import AGENT_NAME as SEEDED_AGENT
from dara.verl.seeded_rollout import ValidationTagged
from dara.verl.stop_request import clear_stop_request, stop_requested
from rewards.spec import ERROR_KEY, TIMEOUT_KEY

logger = logging.getLogger(__name__)

METRIC_PREFIX = "dara/"


def channel_scores_from_extra_fields(extra_fields, channels: list[str]) -> torch.Tensor:
    """[N, K] float64 channel scores of the samples; a ValueError names a missing channel and the keys returned."""
    infos = [reward_info(value) for value in extra_fields]
    available = sorted(infos[0]) if infos else []
    for channel in channels:
        if missing := sum(channel not in info for info in infos):
            raise ValueError(f"reward channel {channel!r} (algorithm.reward_channels) is missing from the reward's "
                             f"extra info of {missing}/{len(infos)} samples; the reward function returned keys {available}")
    scores = torch.tensor([[float(info[c]) for c in channels] for info in infos],
                          dtype=torch.float64).reshape(len(infos), len(channels))
    if not torch.isfinite(scores).all():
        bad = (~torch.isfinite(scores)).nonzero()[0].tolist()
        raise ValueError(f"reward channel {channels[bad[1]]!r} is NaN or inf for sample {bad[0]}")
    return scores


def group_filter_counts(batch, metrics: dict) -> dict[str, float]:
    """Groups kept in the step's batch (distinct real prompt groups) and drawn to fill it (kept + what verl's
    group filter evicted and discarded as surplus)."""
    kept = len({key.split("_")[0] for key, tag in zip(batch.keys, batch.tags, strict=True)
                if not tag.get("is_padding", False)})
    evicted = sum(float(v) for k, v in metrics.items() if k.endswith("/filter_groups/evicted_samples"))
    surplus = sum(float(v) for k, v in metrics.items() if k.endswith("/filter_groups/discarded_surplus_samples"))
    return {"filter/kept_groups": float(kept), "filter/drawn_groups": kept + evicted + surplus}


REWARD_FLAGS = {TIMEOUT_KEY: "reward/timeouts", ERROR_KEY: "reward/errors"}  # each item's flags (rewards.spec)


def reward_flag_counts(extra_fields) -> dict[str, float]:
    """Per-step counts of the reward manager's per-sample flags (timed out, failed), where it sets them."""
    infos = [reward_info(value) for value in extra_fields]
    if not any(flag in info for info in infos for flag in REWARD_FLAGS):
        return {}
    return {key: sum(float(info.get(flag, 0.0)) for info in infos) for flag, key in REWARD_FLAGS.items()}


def check_reward_failures(counts: dict, items: int, step: int, run_dir: str | None) -> None:
    """A step whose every item failed to score stops the run (no training on fallback scores), quoting the first
    error the reward manager logged."""
    errors = counts.get(REWARD_FLAGS[ERROR_KEY], 0.0)
    if not items or errors < items:
        return
    log = Path(run_dir) / REWARD_ERRORS if run_dir else None
    first = log.read_text().splitlines()[0] if log is not None and log.exists() and log.stat().st_size else None
    raise ValueError(f"the reward function failed on every item of step {step} ({int(errors)} of {items})"
                     + (f"; first error: {first}" if first else "") + (f" (all: {log})" if log else ""))


def _run_key(config, key: str, default=None):
    return OmegaConf.select(config, f"run.{key}", default=default)


@register_trainer("dara_sync")
class DaraTrainer(PPOTrainerSync):
    def __init__(self, config):
        if not config.algorithm.get("reward_channels", None):
            # started by verl's own main_ppo (python -m dara.train checked before Ray and filled the channels)
            check_config(config)
        # in the TaskRunner's actor: a user's estimator module, then run.import_modules, before verl looks them up
        module = OmegaConf.select(config, "algorithm.dara.estimator_module", default=None)
        if module:  # checked by check_config; its path is absolute by now
            load_estimator_module(module)
            estimators.register_all()
        for name in _run_key(config, "import_modules") or []:
            importlib.import_module(name)
        super().__init__(config)
        # run.dynamic_sampling.mode=rounds: the authors' generation rounds replace verl's buffer (mode replay keeps
        # verl's, with its DAPO filter); both record rollout_prefilter/<channel>/mean
        settings = rounds.rounds_settings(self.config)
        buffer = rounds.build_rounds_buffer(self, settings) if settings else self.replay_buffer
        self.replay_buffer = prefilter.with_prefilter_metrics(buffer, self._reward_channels(required=False))

    @property
    def trainer_mode(self) -> str:  # verl branches on the name ("sync": replay buffer, refill, checkpoints)
        return "sync"

    @trainer_mode.setter
    def trainer_mode(self, _registered_name: str) -> None:
        pass

    @property
    def logger(self):
        return self.__dict__.get("_dara_tracking")

    @logger.setter
    def logger(self, tracking) -> None:  # verl's fit builds its Tracking: wandb rows by training step (dara.tracking)
        log_by_step_metric(tracking, _run_key(self.config, "output_dir"))
        self.__dict__["_dara_tracking"] = tracking

    def _init_resource_pool_mgr(self):
        super()._init_resource_pool_mgr()
        if self.config.trainer.device == "cpu":  # gloo process groups (dara.verl.cpu.workers says why)
            from dara.verl.cpu.workers import cpu_worker_class

            for role, worker in list(self.role_worker_mapping.items()):
                if (replacement := cpu_worker_class(worker)) is not None:
                    self.role_worker_mapping[role] = ray.remote(replacement)

    def prepare_step(self) -> dict:  # the rounds buffer submits each round itself
        return {} if isinstance(self.replay_buffer, rounds.RoundsReplayBuffer) else super().prepare_step()

    def _submit_round(self, num_prompts: int) -> list[str]:
        """Dispatch the next `num_prompts` dataloader prompts with verl's own refill; their uids in dataloader order."""
        recorder = rounds.SubmittedPrompts(self.agent_loop_manager)
        self.agent_loop_manager = recorder
        try:
            self.replay_buffer.refill_fn(num_prompts)
        finally:
            self.agent_loop_manager = recorder.wrapped
        return recorder.uids

    def init(self):
        super().init()
        if self.config.actor_rollout_ref.rollout.agent.default_agent_loop == SEEDED_AGENT:
            self.val_dataloader = ValidationTagged(self.val_dataloader)  # validation seeded apart from training
        self.run_log = RunLog.from_config(self.config, resumed_step=self.global_steps)
        self.engine_watchdog = self._start_engine_watchdog()
        if _run_key(self.config, "output_dir"):
            placement.record_placement(self, self.config.run.output_dir, "start")

    def _start_engine_watchdog(self) -> EngineWatchdog | None:
        """Watch the rollout servers; run.engine_watchdog_s=0 turns it off."""
        interval = float(_run_key(self.config, "engine_watchdog_s", 0) or 0)
        manager = getattr(self, "llm_server_manager", None)
        replicas = manager.get_replicas() if manager is not None else []
        addresses = [r.server_address for r in replicas if getattr(r, "server_address", None)]
        engine = str(self.config.actor_rollout_ref.rollout.name)
        if interval <= 0 or not addresses or engine not in HEALTH_ENDPOINT_ENGINES:
            return None
        return EngineWatchdog(engine, addresses, _run_key(self.config, "output_dir"), interval_s=interval).start()

    def fit(self, *args, **kwargs):
        watchdog = getattr(self, "engine_watchdog", None)
        try:
            result = super().fit(*args, **kwargs)
        except Exception as error:  # whatever verl raised on the way (lost samples, ...): the engine's death first
            if watchdog is not None:
                watchdog.raise_if_dead(cause=error)
            raise
        finally:  # the servers shut down after training: no longer a failure
            if watchdog is not None:
                watchdog.stop()
        if _run_key(self.config, "output_dir"):
            placement.record_placement(self, self.config.run.output_dir, "end")
        return result

    def _reward_channels(self, required: bool = True) -> list[str]:
        if not (channels := [str(c) for c in self.config.algorithm.get("reward_channels", None) or []]) and required:
            raise ValueError("algorithm.reward_channels is empty: name the reward_extra_info keys to use as channels")
        return channels

    def _compute_advantage(self, batch, metrics: dict):
        """verl's own advantage step, with the batch's channel scores published for the registered estimator."""
        if getattr(self, "engine_watchdog", None) is not None:  # a dead engine's samples are lost or padding
            self.engine_watchdog.raise_if_dead()
        if not estimators.is_ours(self.config.algorithm.adv_estimator):  # one of verl's own estimators
            return super()._compute_advantage(batch, metrics)
        channels = self._channel_batch(batch, metrics)
        with estimators.channels_for_step(channels):
            batch = super()._compute_advantage(batch, metrics)
        metrics.update({METRIC_PREFIX + k: v for k, v in channels.metrics.items()})
        metrics.update(reward_means(channels.scores[channels.real], channels.names))
        return batch

    def _channel_batch(self, batch, metrics: dict) -> estimators.ChannelBatch:
        """The pre-advantage step: channel scores from the samples' extra fields, padding rows marked."""
        names = self._reward_channels()
        extra_fields = list(tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                                            select_fields=["extra_fields"])["extra_fields"])
        counts = reward_flag_counts(extra_fields)
        step = getattr(self, "global_steps", None)
        check_reward_failures(counts, len(extra_fields), step, _run_key(self.config, "output_dir"))
        metrics.update(counts)
        real = torch.tensor([not tag.get("is_padding", False) for tag in batch.tags], dtype=torch.bool)
        channels = estimators.ChannelBatch(channel_scores_from_extra_fields(extra_fields, names), names, real)
        estimators.check_reward_ranges(channels.scores[real], names,
                                       estimators.algo_options(self.config.algorithm).reward_ranges, step)
        return channels

    def _update_actor(self, batch, metrics: dict):
        """verl's actor update; logs whether each optimizer update was clipped (dara.verl.grad_clip)."""
        recorder = UpdateRecorder(self.actor_rollout_wg)
        self.actor_rollout_wg = recorder
        try:
            batch = super()._update_actor(batch, metrics)
        finally:
            self.actor_rollout_wg = recorder.wrapped
        actor = self.config.actor_rollout_ref.actor
        expect = bool(_run_key(self.config, "expect_clipped_updates", False))
        updates = updates_per_step(len(batch.keys), actor.ppo_mini_batch_size, self.config.actor_rollout_ref.rollout.n,
                                   actor.ppo_epochs)
        clip = grad_clip_metrics(recorder.grad_norms, float(actor.optim.clip_grad), updates, expect)
        metrics.update(clip)
        if clip.get(UNCLIPPED, 0) > 0:
            logger.warning("step %d: %d of %d optimizer updates were not clipped (pre-clip norms %s, clip_grad %s); "
                           "run.expect_clipped_updates says every update should be", self.global_steps,
                           clip[UNCLIPPED], updates, [round(n, 4) for n in recorder.grad_norms], actor.optim.clip_grad)
        return batch

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        if self.config.algorithm.filter_groups.get("enable", False):
            metrics.update(group_filter_counts(batch, metrics))
        if getattr(self, "run_log", None) is not None:
            self.run_log.write(global_steps, metrics, self._reward_channels())
            pending, self._pending_tracker = getattr(self, "_pending_tracker", None), None
            if pending is not None:
                atomic_write_text(Path(self.config.trainer.default_local_dir) / CHECKPOINT_TRACKER, pending)

    def _save_checkpoint(self):
        tracker = Path(self.config.trainer.default_local_dir) / CHECKPOINT_TRACKER
        previous = tracker.read_text() if tracker.exists() else None
        super()._save_checkpoint()
        if getattr(self, "run_log", None) is None or not tracker.exists():
            return
        # verl marks the step resumable before its metrics are logged: hold the mark back until the run log has
        # the step, so a job killed in between redoes the step instead of losing its line
        self._pending_tracker = tracker.read_text()
        if previous is None:
            tracker.unlink()
        else:
            atomic_write_text(tracker, previous)

    def on_step_end(self):
        """A stop request (dara.verl.stop_request) checkpoints this step and ends fit after it."""
        run_dir = _run_key(self.config, "output_dir")
        reason = stop_requested(run_dir) if run_dir else None
        if reason is None or self.global_steps >= self.total_training_steps:
            return super().on_step_end()  # no request, or the last step: verl saves and ends anyway
        freq = int(self.config.trainer.save_freq)
        saved = freq > 0 and self.global_steps % freq == 0  # verl saved this step already
        if not saved:
            self._save_checkpoint()
        print(f"[dara] stop requested ({reason}): step {self.global_steps} checkpointed"
              f"{' by its save_freq save' if saved else ''}; stopping after this step", flush=True)
        self.total_training_steps = self.global_steps  # verl's fit loop ends once this step is logged
        clear_stop_request(run_dir)
        return super().on_step_end()
