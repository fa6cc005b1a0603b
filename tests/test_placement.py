"""dara/verl/placement.py without a cluster: the verl seams it reads, the start/end merge of ray_nodes.json, and
that a failed record writes the error instead of failing the run. The real placement over two nodes is asserted
by tests/test_multinode.py."""

from __future__ import annotations

import json

import ray
from verl.single_controller.base.worker_group import WorkerGroup
from verl.single_controller.ray.base import RayWorkerGroup
from verl.trainer.main_ppo import TaskRunnerV1

from dara.verl.placement import (
    RAY_NODES_FILE,
    PlacementRecorderMixin,
    _merge,
    record_placement,
    worker_groups,
)
from dara.verl.task_runner import DaraTaskRunner


def test_seam_task_runner_hooks_and_worker_handles():
    base = TaskRunnerV1.__ray_actor_class__
    assert callable(base.init_agent_loop_manager) and callable(base.run)
    runner = base()
    assert runner.trainer is None and runner.config is None  # the attributes the mixin reads
    assert issubclass(DaraTaskRunner.__ray_actor_class__, PlacementRecorderMixin)
    # the actor handles of a worker group (verl's WorkerGroup keeps them in `_workers`), read by locate_workers
    assert issubclass(RayWorkerGroup, WorkerGroup)
    assert WorkerGroup(resource_pool=None)._workers == []


def test_worker_groups_lists_a_shared_group_once():
    class Trainer:
        actor_rollout_wg = object()
        critic_wg = None

    trainer = Trainer()
    trainer.ref_policy_wg = trainer.actor_rollout_wg  # ref inside the actor
    assert worker_groups(trainer) == {"actor_rollout": trainer.actor_rollout_wg}


def _row(rank, node, cpu):
    return {"rank": rank, "node_id": node, "ip": f"10.0.0.{rank}", "cpu_seconds": cpu}


def test_merge_keeps_start_cpu_time_and_counts_distinct_nodes():
    nodes = [{"node_id": "a", "alive": True}, {"node_id": "b", "alive": True}]
    start = _merge({}, nodes, {"actor_rollout": [_row(1, "b", 2.0), _row(0, "a", 3.0)]}, "start")
    assert [row["cpu_seconds"] for row in start["worker_groups"]["actor_rollout"]] == [{"start": 2.0},
                                                                                      {"start": 3.0}]
    assert start["distinct_worker_nodes"] == 2 and set(start["recorded"]) == {"start"}
    end = _merge(json.loads(json.dumps(start)), nodes, {"actor_rollout": [_row(0, "a", 9.0), _row(1, "b", 8.0)]},
                 "end")
    by_rank = {row["rank"]: row["cpu_seconds"] for row in end["worker_groups"]["actor_rollout"]}
    assert by_rank == {0: {"start": 3.0, "end": 9.0}, 1: {"start": 2.0, "end": 8.0}}
    assert set(end["recorded"]) == {"start", "end"}
    # a fresh "start" (a requeued job) forgets the previous allocation's record
    again = _merge(end, nodes, {"actor_rollout": [_row(0, "a", 1.0)]}, "start")
    assert again["worker_groups"]["actor_rollout"][0]["cpu_seconds"] == {"start": 1.0}
    assert again["distinct_worker_nodes"] == 1


def test_a_failed_record_writes_the_error_and_does_not_raise(tmp_path, monkeypatch):
    class BrokenGroup:
        @property
        def _workers(self):
            raise RuntimeError("no workers here")

    class Trainer:
        actor_rollout_wg = BrokenGroup()

    path = record_placement(Trainer(), tmp_path, "start")  # no Ray in this process: named, none started
    assert path == tmp_path / RAY_NODES_FILE
    content = json.loads(path.read_text())
    assert content == {"error": "RuntimeError: Ray is not initialised in this process", "stage": "start"}
    assert not ray.is_initialized()

    monkeypatch.setattr("dara.verl.placement.ray_nodes", lambda: [])
    content = json.loads(record_placement(Trainer(), tmp_path, "end").read_text())
    assert content == {"error": "RuntimeError: no workers here", "stage": "end"}
    assert sorted(tmp_path.iterdir()) == [path]  # no temporary file left beside it
