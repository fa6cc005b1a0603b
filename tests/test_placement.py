"""dara/verl/placement.py without a cluster: each rank's work counts, the start/end merge of ray_nodes.json, and a
failed record written instead of failing the run (two real nodes: tests/test_multinode.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import ray
import torch

from dara.run_folder import RAY_NODES
from dara.verl.placement import _merge, count_work, record_placement, worker_groups


def _row(rank, node, updates):
    return {"rank": rank, "node_id": node, "ip": f"10.0.0.{rank}",
            "work": {"actor": {"forward_passes": 2 * updates, "optimizer_steps": updates}}}


def test_merge_keeps_the_stage_times_and_counts_distinct_nodes():
    nodes = [{"node_id": "a", "alive": True}, {"node_id": "b", "alive": True}]
    start = _merge({}, nodes, {"actor_rollout": [_row(0, "a", 0), _row(1, "b", 0)]}, "start")
    assert start["distinct_worker_nodes"] == 2 and set(start["recorded"]) == {"start"}
    end = _merge(json.loads(json.dumps(start)), nodes, {"actor_rollout": [_row(0, "a", 3), _row(1, "b", 3)]}, "end")
    assert [row["work"]["actor"]["optimizer_steps"] for row in end["worker_groups"]["actor_rollout"]] == [3, 3]
    assert end["recorded"]["start"] == start["recorded"]["start"] and set(end["recorded"]) == {"start", "end"}
    again = _merge(end, nodes, {"actor_rollout": [_row(0, "a", 0)]}, "start")  # a requeued job starts afresh
    assert set(again["recorded"]) == {"start"} and again["distinct_worker_nodes"] == 1


def _engine(optimizer: bool = True):
    """The two attributes count_work reads from a verl engine: its module and its optimizer."""
    module = torch.nn.Linear(3, 1)
    return SimpleNamespace(module=module, optimizer=torch.optim.SGD(module.parameters(), lr=0.1) if optimizer else None)


def test_count_work_counts_what_the_worker_ran_after_the_first_call():
    worker = SimpleNamespace(actor=SimpleNamespace(engine=_engine()), ref=SimpleNamespace(engine=_engine(False)))
    worker.actor.engine.module(torch.ones(1, 3))  # before the first call: not counted
    zero = {"forward_passes": 0, "optimizer_steps": 0}
    assert count_work(worker) == {"actor": zero, "ref": zero}
    for _ in range(3):  # three updates; one reference forward
        worker.actor.engine.module(torch.ones(2, 3)).sum().backward()
        worker.actor.engine.optimizer.step()
    worker.ref.engine.module(torch.ones(2, 3))
    assert count_work(worker) == {"actor": {"forward_passes": 3, "optimizer_steps": 3},
                                  "ref": {"forward_passes": 1, "optimizer_steps": 0}}
    assert count_work(SimpleNamespace(engine=_engine())) == {"engine": zero}  # a standalone TrainingWorker
    # verl's colocated Ray actor (WorkerDict) holds the role workers in `worker_dict`
    colocated = SimpleNamespace(worker_dict={"actor_rollout": SimpleNamespace(actor=SimpleNamespace(engine=_engine()))})
    assert count_work(colocated) == {"actor": zero}
    colocated.worker_dict["actor_rollout"].actor.engine.optimizer.step()
    assert count_work(colocated)["actor"]["optimizer_steps"] == 1


def test_a_failed_record_writes_the_error_and_does_not_raise(tmp_path, monkeypatch):
    class BrokenGroup:
        @property
        def workers(self):
            raise RuntimeError("no workers here")

    trainer = SimpleNamespace(actor_rollout_wg=BrokenGroup())
    trainer.ref_policy_wg = trainer.actor_rollout_wg  # a group shared by two roles is listed once
    assert list(worker_groups(trainer)) == ["actor_rollout"]
    path = record_placement(trainer, tmp_path, "start")  # no Ray in this process: named, none started
    assert path == tmp_path / RAY_NODES and not ray.is_initialized()
    assert json.loads(path.read_text()) == {"error": "RuntimeError: Ray is not initialised in this process",
                                            "stage": "start"}
    monkeypatch.setattr("dara.verl.placement.ray_nodes", lambda: [])
    content = json.loads(record_placement(trainer, tmp_path, "end").read_text())
    assert content == {"error": "RuntimeError: no workers here", "stage": "end"}
    assert sorted(tmp_path.iterdir()) == [path]  # no temporary file left beside it
