"""`python -m dara.preflight <overrides> [--nodes N] [--gpus-per-node G] [--time T] [--calibration F] [--skip-env]`.

Answers, without a GPU, "would this run start and finish here?", a section per check with the arithmetic shown:
rollout, allocation, per-GPU memory, checkpoint disk, time limit, Ray ports, and unless `--skip-env` this machine.
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
    report = Report(str(cfg.run.name), f"{nodes} node(s) x {gpus} "
                    f"{OmegaConf.select(cfg, 'run.hardware.gpu', default=None) or cfg.trainer.device}")
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
    """The first step of a Slurm job on its compute node, at its actual time limit and `cpus`."""
    report, facts = Report(str(cfg.run.name), "this node"), model_facts(cfg)
    check_environment(cfg, report.section("environment"))
    check_disk(cfg, facts, report.section("disk"))
    check_time(cfg, facts, report.section("time limit"), time_limit_minutes, calibration)
    check_ray_ports(cfg, report.section("ray ports"), cpus)
    return report
