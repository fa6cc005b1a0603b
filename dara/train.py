"""`python -m dara.train`: the project's main job, a Hydra app over verl's trainer config plus conf/.

    python -m dara.train                                   # tiny CPU training run (task=smoke)
    python -m dara.train task=toolrl model=qwen2.5-1.5b-instruct estimator=dara_asym cluster=a100_40g_x4
    python -m dara.train ... --cfg job                     # print the resolved config, start nothing

Order of work: check the config (fails before Ray starts), build offline assets if the task asks,
write run_info.json, then verl's own `run_ppo` with the project's TaskRunner; Ray is started and
stopped by the run.
"""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf, open_dict

from dara.config_checks import ConfigError, check_config, check_inputs
from dara.run_log import METRICS_FILE, read_metrics

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


def _absolute_paths(cfg: DictConfig) -> None:
    """Pin the run folders to absolute paths before Ray actors (other working dirs) read them."""
    with open_dict(cfg):
        cfg.run.output_root = os.path.abspath(cfg.run.output_root)
        for key in ("output_dir", "assets_dir"):
            cfg.run[key] = os.path.abspath(cfg.run[key])


def _apply_runtime_env(cfg: DictConfig) -> None:
    """The env vars the cluster config gives Ray workers also hold in this driver process.

    verl reads a few settings only from the environment (its platform plug-in, engine device); the
    project keeps them in config (`ray_kwargs.ray_init.runtime_env.env_vars`) and applies them here.
    """
    env_vars = OmegaConf.select(cfg, "ray_kwargs.ray_init.runtime_env.env_vars", default=None) or {}
    for key, value in env_vars.items():
        os.environ[str(key)] = str(value)
    modules = os.environ.get("VERL_USE_EXTERNAL_MODULES", "")
    for module in filter(None, (m.strip() for m in modules.split(","))):
        __import__(module)


def _prepare_assets(cfg: DictConfig) -> None:
    if cfg.run.assets == "smoke":
        from data_prep import smoke

        print(f"[dara] preparing offline smoke assets in {cfg.run.assets_dir}", flush=True)
        smoke.build(cfg.run.assets_dir, seed=0)
    elif cfg.run.assets == "smoke_math":  # the tiny model, then synthetic problems through data_prep deepscaler
        from data_prep import deepscaler, smoke

        print(f"[dara] preparing offline math smoke assets in {cfg.run.assets_dir}", flush=True)
        model_dir = smoke.build(Path(cfg.run.output_root) / "assets" / "smoke", seed=0)["model_dir"]
        deepscaler.build_smoke(cfg.run.assets_dir, model_dir)
    elif cfg.run.assets is not None:
        raise ConfigError(f"run.assets={cfg.run.assets!r} is not known (expected 'smoke', 'smoke_math' or null)")


def _finished(cfg: DictConfig) -> bool:
    path = Path(cfg.run.output_dir) / METRICS_FILE
    total = cfg.trainer.total_training_steps
    return bool(total) and path.exists() and any(r.get("step") == total for r in read_metrics(path))


def _write_run_info(cfg: DictConfig) -> None:
    info = {"run_name": cfg.run.name, "method": cfg.run.method, "seed": int(cfg.run.seed), "task": cfg.run.task,
            "model": cfg.run.model, "estimator": cfg.algorithm.adv_estimator,
            "reward_channels": list(cfg.algorithm.reward_channels), "command": " ".join(sys.argv),
            # the reward options, among them which math grader scored correctness
            "reward_options": OmegaConf.to_container(
                OmegaConf.select(cfg, "reward.custom_reward_function.reward_kwargs", default=None) or {})}
    out = Path(cfg.run.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "run_info.json.tmp"
    tmp.write_text(json.dumps(info, indent=2) + "\n")
    os.replace(tmp, out / "run_info.json")


@contextmanager
def _ray_session(cfg: DictConfig):
    """A local Ray started and stopped by this run, its temp files and auth token inside the run folder.

    With `ray_kwargs.ray_init.address` set (a Slurm job's cluster), the existing cluster is used as it is.
    """
    if OmegaConf.select(cfg, "ray_kwargs.ray_init.address", default=None):
        yield
        return
    from dara.verl.cpu import local_ray_session

    with local_ray_session(cfg.run.output_dir) as extra, open_dict(cfg):
        for key, value in extra.items():
            cfg.ray_kwargs.ray_init[key] = value
        yield


def _summary(cfg: DictConfig, seconds: float) -> str:
    path = Path(cfg.run.output_dir) / METRICS_FILE
    records = read_metrics(path) if path.exists() else []
    if not records:
        return f"[dara] finished in {seconds:.0f}s, no step logged ({path})"
    last = records[-1]
    channels = list(cfg.algorithm.reward_channels)
    parts = [f"{c}: reward {last.get(f'reward/{c}/mean', float('nan')):.3f}, "
             f"density {last.get(f'dara/density/{c}', float('nan')):.2f}, "
             f"weight {last.get(f'dara/weight/{c}', float('nan')):.2f}" for c in channels]
    return (f"[dara] {cfg.run.name}: {len(records)} steps in {seconds:.0f}s; last step " + "; ".join(parts)
            + f"\n[dara] metrics: {path}")


def train(cfg: DictConfig) -> None:
    """Check, prepare and run one training job (the body of the Hydra app)."""
    _absolute_paths(cfg)
    OmegaConf.resolve(cfg)  # Ray actors then see plain values, no project resolvers needed there
    check_config(cfg)
    if cfg.run.skip_if_finished and _finished(cfg):
        print(f"[dara] {cfg.run.name} already finished ({cfg.run.output_dir}); skipping", flush=True)
        return
    _apply_runtime_env(cfg)
    _prepare_assets(cfg)
    check_inputs(cfg)
    _write_run_info(cfg)

    import ray
    from verl.trainer.main_ppo import run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    from dara.verl.task_runner import DaraTaskRunner

    if cfg.trainer.device == "cpu":
        from dara.verl.cpu import use_cpu_platform

        use_cpu_platform()  # before verl's auto_set_device, which would otherwise pick CUDA
    auto_set_device(cfg)
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    start = time.monotonic()
    with _ray_session(cfg):
        try:
            run_ppo(cfg, task_runner_class=DaraTaskRunner)
        except ray.exceptions.RayTaskError as error:  # surface the cause, not a Ray traceback wall
            cause = error.as_instanceof_cause()
            raise SystemExit(f"[dara] training failed: {type(cause).__name__}: {cause}") from None
        finally:
            if ray.is_initialized():
                ray.shutdown()
    print(_summary(cfg, time.monotonic() - start), flush=True)


@hydra.main(config_path=str(CONF_DIR), config_name="train", version_base=None)
def main(cfg: DictConfig) -> None:
    try:
        train(cfg)
    except ConfigError as error:
        raise SystemExit(f"[dara] invalid configuration: {error}") from None


if __name__ == "__main__":
    main()
