"""`python -m dara.preflight <overrides> [--nodes N] [--gpus-per-node G] [--time T] [--calibration F] [--skip-env]`.

Answers, on a login node or a laptop without a GPU, "would this run start and finish here?". It composes the
run exactly as `python -m dara.train` does (same conf/, same overrides), then checks, each in its own section:
- rollout: the rollout name and mode are registered with verl, vLLM's engine_kwargs are options of `vllm serve`,
  and on a CPU run the model's head_dim and rollout.dtype are ones vLLM's CPU build takes
  (`dara.preflight.rollout`);
- allocation: verl 0.9.1's own start-up validation for nodes x GPUs, then what verl asserts only later
  (mini-batch x n by the data-parallel size, SP, rollout TP, heads), token budgets and max_model_len
  (`dara.preflight.allocation`);
- memory: the per-GPU plan of the rollout, weight-sync and training phases with its arithmetic, and vLLM's KV
  cache (`dara.preflight.memory`);
- checkpoints: disk per save and per run (`dara.preflight.budget`);
- time limit: whether a job makes progress (a checkpoint) within the time requested (`--time`, else the cluster
  file's `job_time_limit_minutes`), from the cluster file's step estimate or a gpu_smoke calibration file, and
  how: a clean stop at the pre-timeout signal, or a requeue at the limit from the newest checkpoint;
- ray ports: verl's Ray workers and the port range a job's Ray gets for them (`dara.preflight.ray_ports`);
- unless `--skip-env` (the checks of this machine): environment (torch's build against the driver, vllm,
  flash_attn for the chosen attention; on a CPU run vLLM's CPU build at its pinned version, importing; each with
  its fixing command: `dara.preflight.environment`) and disk
  (free space at the checkpoint folder against the retained plan + one save in flight).
`python -m recipes NAME --preflight` runs it for every run of a recipe; the Slurm launcher refuses a failing run.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from dara.config import ConfigError, compose
from dara.config_checks import check_config
from dara.preflight.allocation import check_allocation, with_allocation
from dara.preflight.budget import check_checkpoints, check_disk, check_time
from dara.preflight.calibration import Calibration, CalibrationError, load_calibration
from dara.preflight.environment import check_environment
from dara.preflight.facts import ModelFacts, model_facts
from dara.preflight.memory import check_memory
from dara.preflight.ray_ports import check_ray_ports
from dara.preflight.report import Report
from dara.preflight.rollout import check_rollout_section
from dara.slurm_time import format_time_limit, parse_time_limit

__all__ = ["Calibration", "CalibrationError", "ModelFacts", "Report", "compose", "format_time_limit",
           "load_calibration", "model_facts", "node_checks", "parse_time_limit", "preflight"]


def preflight(cfg: DictConfig, *, nodes: int | None = None, gpus_per_node: int | None = None,
              time_limit_minutes: float | None = None, skip_env: bool = False,
              calibration: Calibration | None = None) -> Report:
    """Every check of the composed run `cfg` on nodes x gpus_per_node (default: the cluster config's)."""
    nodes = int(nodes if nodes is not None else cfg.trainer.nnodes)
    gpus = int(gpus_per_node if gpus_per_node is not None else cfg.trainer.n_gpus_per_node)
    cfg = with_allocation(cfg, nodes, gpus)
    gpu = OmegaConf.select(cfg, "run.hardware.gpu", default=None) or cfg.trainer.device
    report = Report(str(cfg.run.name), f"{nodes} node(s) x {gpus} {gpu}")
    facts = model_facts(cfg)
    config = report.section("configuration")
    try:
        check_config(cfg)
        config.line(f"task {cfg.run.task}, model {cfg.run.model}, estimator {cfg.algorithm.adv_estimator}, "
                    f"cluster {OmegaConf.select(cfg, 'run.cluster', default='cpu')}")
    except ConfigError as error:
        if not str(error).startswith("allocation:"):  # the allocation section reports those
            config.fail(str(error))
    if facts is None:
        config.note("the model file keeps no run.model_facts: model-shape checks skipped")
    check_rollout_section(cfg, report.section("rollout"))
    check_allocation(cfg, facts, report.section("allocation"))
    check_memory(cfg, facts, report.section("memory"))
    check_checkpoints(cfg, facts, report.section("checkpoints"))
    check_time(cfg, facts, report.section("time limit"), time_limit_minutes, calibration)
    check_ray_ports(cfg, report.section("ray ports"))
    if not skip_env:
        check_environment(cfg, report.section("environment"))
        check_disk(cfg, facts, report.section("disk"))
    return report


def node_checks(cfg: DictConfig, *, time_limit_minutes: float | None = None,
                calibration: Calibration | None = None, cpus: int | None = None) -> Report:
    """What the first step of a job checks on its compute node: the environment, free disk at the checkpoint
    folder, progress within the job's actual time limit, and the Ray port range for the node's `cpus` (the
    allocation is the job's own)."""
    report = Report(str(cfg.run.name), "this node")
    facts = model_facts(cfg)
    check_environment(cfg, report.section("environment"))
    check_disk(cfg, facts, report.section("disk"))
    check_time(cfg, facts, report.section("time limit"), time_limit_minutes, calibration)
    check_ray_ports(cfg, report.section("ray ports"), cpus)
    return report
