"""Where a run's work happened: the Ray nodes that joined and the node of every verl worker, in the run folder.

`<run folder>/ray_nodes.json` (rewritten atomically):

    {"nodes": [{"node_id", "ip", "hostname", "alive", "is_head", "resources": {"CPU", "GPU", ...}}, ...],
     "worker_groups": {"actor_rollout": [{"rank", "world_size", "node_id", "ip", "pid", "master_addr",
                                          "process_group": {"backend", "world_size"} | null,
                                          "cpu_seconds": {"start": s, "end": s}}, ...], ...},
     "distinct_worker_nodes": n, "recorded": {"start": unix time, "end": unix time}}

"start" is taken once verl's workers are up (before the first step), "end" after `fit` returns; `cpu_seconds`
is each worker process's CPU time then, so start -> end is the training work that rank did on its node. A job
requeued onto a fresh allocation rewrites the file with its own nodes.

`PlacementRecorderMixin` goes before verl's TaskRunner (dara/verl/task_runner.py); only this module knows the
file. Recording never fails a run: an error is written into the file and logged.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import ray

from dara.io import atomic_write_json
from dara.run_folder import RAY_NODES as RAY_NODES_FILE

logger = logging.getLogger(__name__)

_GROUP_ATTRIBUTES = ("actor_rollout_wg", "ref_policy_wg", "critic_wg", "reward_wg")


def _worker_location(worker) -> dict:
    """Runs inside a verl worker actor (`__ray_call__` passes the actor instance): where it is, its process group."""
    import torch.distributed as dist

    process_group = None
    if dist.is_available() and dist.is_initialized():
        process_group = {"backend": str(dist.get_backend()), "world_size": dist.get_world_size()}
    return {"rank": int(os.environ.get("RANK", -1)), "world_size": int(os.environ.get("WORLD_SIZE", 0)),
            "node_id": ray.get_runtime_context().get_node_id(), "ip": ray.util.get_node_ip_address(),
            "pid": os.getpid(), "master_addr": os.environ.get("MASTER_ADDR"), "process_group": process_group,
            "cpu_seconds": round(time.process_time(), 3)}


def worker_groups(trainer) -> dict[str, object]:
    """The trainer's verl worker groups by role (a group shared by two roles listed once)."""
    groups: dict[str, object] = {}
    for attribute in _GROUP_ATTRIBUTES:
        group = getattr(trainer, attribute, None)
        if group is not None and all(group is not known for known in groups.values()):
            groups[attribute.removesuffix("_wg")] = group
    return groups


def ray_nodes() -> list[dict]:
    """Every node the Ray cluster knows (a requeued job's fresh cluster only has its own)."""
    if not ray.is_initialized():  # ray.nodes() would start a private local Ray and report it
        raise RuntimeError("Ray is not initialised in this process")
    head_host = ray.get_runtime_context().gcs_address.rsplit(":", 1)[0]
    return [{"node_id": node["NodeID"], "ip": node["NodeManagerAddress"], "hostname": node.get("NodeManagerHostname"),
             "alive": bool(node.get("Alive")), "is_head": node["NodeManagerAddress"] == head_host,
             "resources": {key: value for key, value in (node.get("Resources") or {}).items()
                           if not key.startswith(("node:", "bundle_group"))}}
            for node in ray.nodes()]


def locate_workers(trainer, timeout_s: float = 60.0) -> dict[str, list[dict]]:
    """{role: [location of each rank, in rank order]} for every verl worker group of the trainer."""
    located = {}
    for role, group in worker_groups(trainer).items():
        handles = list(getattr(group, "_workers", []) or [])
        rows = ray.get([handle.__ray_call__.remote(_worker_location) for handle in handles], timeout=timeout_s)
        located[role] = sorted(rows, key=lambda row: row["rank"])
    return located


def _merge(previous: dict, nodes: list[dict], workers: dict[str, list[dict]], stage: str) -> dict:
    """The file's content after this stage: nodes as now, each worker's cpu_seconds at start and end."""
    before = previous.get("worker_groups", {}) if stage == "end" else {}
    groups = {}
    for role, rows in workers.items():
        earlier = {row["rank"]: row for row in before.get(role, [])}
        merged = []
        for row in rows:
            cpu = dict(earlier.get(row["rank"], {}).get("cpu_seconds", {})) if stage == "end" else {}
            cpu[stage] = row["cpu_seconds"]
            merged.append({**row, "cpu_seconds": cpu})
        groups[role] = merged
    recorded = dict(previous.get("recorded", {})) if stage == "end" else {}
    recorded[stage] = time.time()
    distinct = len({row["node_id"] for rows in workers.values() for row in rows})
    return {"nodes": nodes, "worker_groups": groups, "distinct_worker_nodes": distinct, "recorded": recorded}


def record_placement(trainer, output_dir: str | os.PathLike, stage: str = "start") -> Path:
    """Write (stage "start") or complete (stage "end") `<output_dir>/ray_nodes.json`; returns its path."""
    path = Path(output_dir) / RAY_NODES_FILE
    try:
        previous = json.loads(path.read_text()) if stage == "end" and path.exists() else {}
        content = _merge(previous, ray_nodes(), locate_workers(trainer), stage)
        summary = ", ".join(f"{role}: ranks on {len({row['ip'] for row in rows})} node(s) "
                            f"({' '.join(sorted({row['ip'] for row in rows}))})"
                            for role, rows in content["worker_groups"].items())
        print(f"[dara] ray nodes ({stage}): {sum(node['alive'] for node in content['nodes'])} alive; {summary}",
              flush=True)
    except Exception as error:  # noqa: BLE001 -- a record must never fail the training run
        logger.warning("could not record the Ray placement: %s", error)
        content = {"error": f"{type(error).__name__}: {error}", "stage": stage}
    atomic_write_json(path, content)
    return path


class PlacementRecorderMixin:
    """Before verl's TaskRunner class: records ray_nodes.json once the workers are up and again after fit."""

    def init_agent_loop_manager(self):
        record_placement(self.trainer, self.config.run.output_dir, "start")
        return super().init_agent_loop_manager()

    def run(self, config):
        result = super().run(config)
        record_placement(self.trainer, config.run.output_dir, "end")
        return result
