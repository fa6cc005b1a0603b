"""Math dynamic sampling as the authors ran it (their ray_trainer.py `fit()` with filter_groups.py): whole
generation rounds of full dataloader batches, each round's rows in their `_balance_batch` order, constant
groups dropped, a round cap and an error when short (the five steps: docs/experiments.md, "Math dynamic
sampling"). `RoundsReplayBuffer` does this as a verl 0.9.1 replay buffer, dispatching each round with verl's
own refill."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import transfer_queue as tq
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
from verl.utils.seqlen_balancing import calculate_workload, get_seqlen_balanced_partitions

logger = logging.getLogger(__name__)

TRAIN_PARTITION = "train"
MODES = ("rounds", "replay")
METRIC_PREFIX = "filter/"


class DynamicSamplingShortError(RuntimeError):
    pass


@dataclass(frozen=True)
class RoundsSettings:
    round_prompts: int  # prompts per generation round (a full dataloader batch)
    max_rounds: int  # rounds per step before the step fails; 0 = no cap
    metric: str  # verl's filter metric: "reward" = summed pre-KL reward, else a reward_extra_info key


def reward_info(value) -> dict:
    """A trajectory's `extra_fields["reward_extra_info"]` (TransferQueue hands a NonTensorData or a dict)."""
    fields = getattr(value, "data", value)
    return fields.get("reward_extra_info", {}) if isinstance(fields, dict) else {}


def rounds_settings(config) -> RoundsSettings | None:
    block = (config.get("run", None) or {}).get("dynamic_sampling", None) or {}
    if (mode := block.get("mode", None)) is not None and mode not in MODES:
        raise ValueError(f"run.dynamic_sampling.mode={mode!r}: expected one of {list(MODES)} or null")
    if mode != "rounds":
        return None
    round_prompts, max_rounds = block.get("round_prompts", None), block.get("max_rounds", None)
    if not isinstance(round_prompts, int) or isinstance(round_prompts, bool) or round_prompts < 1:
        raise ValueError(f"run.dynamic_sampling.round_prompts={round_prompts!r}: a positive number of prompts")
    if not isinstance(max_rounds, int) or isinstance(max_rounds, bool) or max_rounds < 0:
        raise ValueError(f"run.dynamic_sampling.max_rounds={max_rounds!r}: rounds per step (0 = no cap); "
                         "the model config sets it (2 for R1-1.5B, 4 for 4B/7B)")
    metric = (config.algorithm.get("filter_groups", None) or {}).get("metric", None) or "reward"
    return RoundsSettings(int(round_prompts), int(max_rounds), str(metric))


def round_row_order(seq_lens: Sequence[int], world_size: int) -> list[int]:
    """The authors' `_balance_batch` order of one round's rows: `calculate_workload` split into `world_size`
    `get_seqlen_balanced_partitions`, each sorted by (workload, row), its even positions then its odd
    positions reversed."""
    if len(seq_lens) == 0:
        return []
    work = calculate_workload(torch.as_tensor(list(seq_lens), dtype=torch.int64)).numpy()
    parts = min(int(world_size), len(seq_lens))
    # python ints: the same partitions as the tensor their code passes, about 20x faster
    partitions = get_seqlen_balanced_partitions(work.tolist(), k_partitions=parts,
                                                equal_size=len(seq_lens) % parts == 0)
    order: list[int] = []
    for partition in partitions:
        rows = np.asarray(partition, dtype=np.int64)
        ranked = rows[np.lexsort((rows, work[rows]))]
        order.extend(ranked[0::2].tolist() + ranked[1::2][::-1].tolist())
    return order


def shortfall_message(step: int, rounds: int, round_prompts: int, informative: int, needed: int,
                      drawn: int) -> str:
    rate = informative / drawn if drawn else 0.0
    estimate = f"about {math.ceil(needed / (rate * round_prompts))} at this acceptance; " if rate else ""
    return (f"step {step}: {informative} of the {needed} informative groups after {rounds} round(s) of "
            f"{round_prompts} prompts (acceptance {rate:.3f}, cap run.dynamic_sampling.max_rounds={rounds}); to go "
            f"on, rerun with a larger cap, which resumes from the last checkpoint ({estimate}0 = no cap)")


TERMINAL = ("finished", "failure")  # a prompt entry's status once all its sessions ended (verl's replay buffer)


def group_metric(partition_id: str, uids: set[str], keys: list[str], metric: str) -> dict[str, list[float]]:
    """{uid: verl's filter metric of each trajectory}: "reward" = the summed pre-KL reward (`rm_scores`), another
    name = that reward_extra_info key."""
    reward = metric == "reward"
    data = tq.kv_batch_get(keys=keys, partition_id=partition_id,
                           select_fields=["rm_scores"] if reward else ["extra_fields"]) if keys else {}
    values: dict[str, list[float]] = {}
    missing = set(uids) - {key.split("_")[0] for key in keys}  # a finished group without trajectories
    for key, value in zip(keys, list(data["rm_scores"] if reward else data["extra_fields"]) if keys else [],
                          strict=True):
        uid, info = key.split("_")[0], None if reward else reward_info(value)
        if reward or metric in info:
            values.setdefault(uid, []).append(float(value.sum().item() if reward else info[metric]))
        else:
            missing.add(uid)
    if missing:
        raise RuntimeError(f"finished groups are missing the filter metric {metric!r} "
                           f"(algorithm.filter_groups.metric): {sorted(missing)[:5]}")
    return values


class SubmittedPrompts:
    """verl's agent-loop manager, keeping the uids dispatched through it."""

    def __init__(self, manager):
        self.wrapped, self.uids = manager, []

    def __getattr__(self, name: str):
        return getattr(self.wrapped, name)

    def generate_sequences(self, batch, *args, **kwargs):
        self.uids.extend(str(uid) for uid in batch["uid"])
        return self.wrapped.generate_sequences(batch, *args, **kwargs)


class RoundsReplayBuffer(ReplayBuffer):
    """verl's replay buffer sampling its training partition in the authors' rounds. `submit_round(n)` dispatches n
    prompts and returns their uids in dataloader order; `world_size()`: their `_balance_batch` partitions."""

    def __init__(self, settings: RoundsSettings, submit_round: Callable[[int], list[str]],
                 world_size: Callable[[], int], **kwargs):
        super().__init__(filter_groups_metric=settings.metric, **kwargs)
        self.settings, self.submit_round, self.world_size = settings, submit_round, world_size

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[KVBatchMeta, dict]:
        if partition_id != TRAIN_PARTITION:
            return super().sample(global_steps, partition_id, batch_size)
        rounds: list[list[str]] = []  # each round's trajectory keys in the authors' order
        informative: set[str] = set()
        kept: list[str] = []
        entries: dict[str, dict] = {}
        drawn = failed = 0
        while len(kept) < batch_size:
            if self.settings.max_rounds and len(rounds) == self.settings.max_rounds:
                raise DynamicSamplingShortError(shortfall_message(
                    global_steps, len(rounds), self.settings.round_prompts, len(kept), batch_size, drawn))
            uids = self.submit_round(self.settings.round_prompts)
            ordered_keys, good, bad, entries = self._run_round(partition_id, uids)
            rounds.append(ordered_keys)
            informative |= good
            drawn, failed = drawn + len(uids), failed + bad
            # the first batch_size distinct informative uids, in the authors' order
            kept = list(dict.fromkeys(k.split("_")[0] for keys in rounds for k in keys
                                      if k.split("_")[0] in informative))[:batch_size]
            print(f"[dara] step {global_steps}, dynamic sampling round {len(rounds)}: {len(good)}/{len(uids)} groups "
                  f"informative, {len(kept)}/{batch_size} collected", flush=True)  # into logs/main.log
        surplus = informative - set(kept)
        self.discard(partition_id, surplus, [k for k in entries if k.split("_")[0] in surplus])
        tq.kv_clear(partition_id=partition_id, keys=kept)  # the kept prompts' entries (verl's sample does the same)
        selected = set(kept)
        keys = [key for round_keys in rounds for key in round_keys if key.split("_")[0] in selected]
        batch = KVBatchMeta(partition_id=partition_id, keys=keys, tags=[entries[key] for key in keys])
        metrics = {f"{METRIC_PREFIX}rounds": float(len(rounds)), f"{METRIC_PREFIX}drawn_groups": float(drawn),
                   f"{METRIC_PREFIX}kept_groups": float(len(kept)),
                   f"{METRIC_PREFIX}informative_groups": float(len(informative)),
                   f"{METRIC_PREFIX}acceptance_rate": len(informative) / drawn}
        if failed:
            metrics[f"{METRIC_PREFIX}failed_groups"] = float(failed)
        return batch, metrics

    def discard(self, partition_id: str, uids: set[str], rows: list[str], generated: bool = True) -> None:
        """Clear groups `uids` and their trajectories `rows` (`generated`: for the pre-filter recorder)."""
        if uids:
            tq.kv_clear(partition_id=partition_id, keys=[*uids, *rows])

    def _run_round(self, partition_id: str, uids: list[str]) -> tuple[list[str], set[str], int, dict[str, dict]]:
        """Wait for one round, order its rows, drop its uninformative and failed groups: (kept keys in the authors'
        order, informative uids, failed groups, the remaining trajectories' tags)."""
        pending = set(uids)
        while True:
            listed = (tq.kv_list() or {}).get(partition_id, {})
            status = {uid: listed[uid].get("status") for uid in pending if uid in listed}
            if all(status.get(uid) in TERMINAL for uid in pending):
                break
            time.sleep(self.poll_interval)
        entries = {key: tag for key, tag in listed.items() if not tag.get("is_prompt", False)}
        failed = {uid for uid in pending if status[uid] == "failure"}
        finished = pending - failed
        position = {uid: i for i, uid in enumerate(uids)}
        keys = sorted((k for k in entries if k.split("_")[0] in finished), key=lambda k: (position[k.split("_")[0]], *map(int, k.split("_")[1:])))
        order = round_row_order([int(entries[k]["seq_len"]) for k in keys], self.world_size())
        ordered_keys = [keys[i] for i in order]
        values = group_metric(partition_id, finished, [k for k in entries if k.split("_")[0] in finished],
                              self.settings.metric)
        # their rule: a group whose values are all equal is dropped, a group of one response too
        dropped = {uid for uid in finished if len(values[uid]) < 2 or float(np.std(values[uid])) == 0.0}
        self.discard(partition_id, dropped, [k for k in entries if k.split("_")[0] in dropped])
        self.discard(partition_id, failed, [k for k in entries if k.split("_")[0] in failed], generated=False)
        entries = {k: tag for k, tag in entries.items() if k.split("_")[0] not in dropped | failed}
        return [k for k in ordered_keys if k.split("_")[0] not in dropped], finished - dropped, len(failed), entries


def build_rounds_buffer(trainer, settings: RoundsSettings) -> RoundsReplayBuffer:
    sampler = trainer.config.trainer.v1.sampler
    custom = sampler.get("custom_sampler", None) or {}
    if custom.get("path") and custom.get("name"):
        raise ValueError("run.dynamic_sampling.mode=rounds brings its own sampler: unset "
                         "trainer.v1.sampler.custom_sampler (or choose run.dynamic_sampling.mode=replay)")
    if trainer.config.algorithm.filter_groups.get("enable", False):
        raise ValueError("run.dynamic_sampling.mode=rounds filters in its own rounds: "
                         "algorithm.filter_groups.enable must be false (conf/train.yaml derives it from the mode)")
    return RoundsReplayBuffer(
        settings, submit_round=trainer._submit_round, world_size=lambda: trainer.actor_rollout_wg.world_size,
        trainer_mode=trainer.trainer_mode, trainer_config=trainer.config.trainer.v1.get(trainer.trainer_mode, {}),
        max_off_policy_threshold=sampler.max_off_policy_threshold,
        max_off_policy_strategy=sampler.max_off_policy_strategy, sampler_kwargs=sampler.sampler_kwargs,
        refill_fn=trainer.replay_buffer.refill_fn)  # verl's own refill, as verl handed it to its buffer
