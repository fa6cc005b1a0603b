"""Where a run's work happened: `<run folder>/ray_nodes.json`, the Ray nodes and, per verl worker group, each
rank's node, process group and `work` (forward passes and optimizer steps of each engine since "start",
counted by hooks in the rank's own process). Recorded after the trainer's `init` ("start") and `fit` ("end");
recording never fails a run: an error is written into the file (docs/experiments.md describes the fields)."""

from __future__ import annotations

import functools
import json
import logging
import os
import time
from pathlib import Path

import ray

from dara.io import atomic_write_json
from dara.run_folder import RAY_NODES

logger = logging.getLogger(__name__)

_GROUP_ATTRIBUTES = ("actor_rollout_wg", "ref_policy_wg", "critic_wg", "reward_wg")
_WORK_ATTRIBUTE = "_dara_work_counts"  # set on the worker instance by the first count_work call


def _engines(worker) -> dict[str, object]:
    """The training engines of a verl worker actor by role (colocated ones in `worker_dict` / `fused_worker_dict`)."""
    members = {**(getattr(worker, "worker_dict", None) or {}), **(getattr(worker, "fused_worker_dict", None) or {})}
    engines = {}
    for member in list(members.values()) or [worker]:
        found = {role: getattr(getattr(member, role, None), "engine", None) for role in ("actor", "ref")}
        found = {role: engine for role, engine in found.items() if engine is not None}
        if not found and getattr(member, "engine", None) is not None:
            found["engine"] = member.engine
        engines.update(found)
    return engines


def _bump(counts: dict, key: str, *_hook_args) -> None:
    counts[key] += 1


def count_work(worker) -> dict[str, dict[str, int]]:
    """{role: {"forward_passes", "optimizer_steps"}} since the first call (which installs the hooks)."""
    counters = getattr(worker, _WORK_ATTRIBUTE, None)
    if counters is None:
        counters = {}
        for role, engine in _engines(worker).items():
            counts = counters[role] = {"forward_passes": 0, "optimizer_steps": 0}
            module, optimizer = getattr(engine, "module", None), getattr(engine, "optimizer", None)
            if module is not None:
                module.register_forward_pre_hook(functools.partial(_bump, counts, "forward_passes"))
            if optimizer is not None:
                optimizer.register_step_post_hook(functools.partial(_bump, counts, "optimizer_steps"))
        setattr(worker, _WORK_ATTRIBUTE, counters)
    return {role: dict(counts) for role, counts in counters.items()}


def _worker_location(worker) -> dict:
    """In a verl worker actor (`__ray_call__`): where it runs, its process group and work."""
    import torch.distributed as dist

    process_group = None
    if dist.is_available() and dist.is_initialized():
        process_group = {"backend": str(dist.get_backend()), "world_size": dist.get_world_size()}
    return {"rank": int(os.environ.get("RANK", -1)), "world_size": int(os.environ.get("WORLD_SIZE", 0)),
            "node_id": ray.get_runtime_context().get_node_id(), "ip": ray.util.get_node_ip_address(),
            "pid": os.getpid(), "master_addr": os.environ.get("MASTER_ADDR"), "process_group": process_group,
            "work": count_work(worker)}


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


def _merge(previous: dict, nodes: list[dict], workers: dict[str, list[dict]], stage: str) -> dict:
    recorded = dict(previous.get("recorded", {})) if stage == "end" else {}
    recorded[stage] = time.time()
    distinct = len({row["node_id"] for rows in workers.values() for row in rows})
    return {"nodes": nodes, "worker_groups": {role: list(rows) for role, rows in workers.items()},
            "distinct_worker_nodes": distinct, "recorded": recorded}


def record_placement(trainer, output_dir: str | os.PathLike, stage: str = "start") -> Path:
    """Write ("start") or complete ("end") `<output_dir>/ray_nodes.json`."""
    path = Path(output_dir) / RAY_NODES
    try:
        previous = json.loads(path.read_text()) if stage == "end" and path.exists() else {}
        nodes = ray_nodes()
        # each rank's location, in rank order (a RayWorkerGroup's `workers`: its actor handles)
        workers = {role: sorted(ray.get([handle.__ray_call__.remote(_worker_location) for handle in group.workers or []],
                                        timeout=60.0), key=lambda row: row["rank"])
                   for role, group in worker_groups(trainer).items()}
        content = _merge(previous, nodes, workers, stage)
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

