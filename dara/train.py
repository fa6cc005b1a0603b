"""`python -m dara.train`: the project's main job, a Hydra app over verl's trainer config plus conf/.

    python -m dara.train                                   # tiny CPU training run (task=smoke)
    python -m dara.train task=toolrl model=qwen2.5-1.5b-instruct estimator=dara_asym cluster=a100_40g_x4
    python -m dara.train ... --cfg job --resolve           # print the resolved config, start nothing

Checks the config before Ray, locks the run folder, then runs verl's own `run_ppo` in a Ray it starts and stops;
the console gets a header, a line per step and a summary, the rest goes to `<run>/logs/main.log` (`--verbose`).
"""

from __future__ import annotations

if __name__ == "__main__":  # without the verl extra: one line naming it, not an import traceback
    from dara import missing_extra

    if problem := missing_extra("verl", "python -m dara.train"):
        raise SystemExit(f"[dara] {problem}")

import os
import sys
import time
import traceback
from contextlib import ExitStack, contextmanager, nullcontext
from functools import partial
from pathlib import Path

import hydra
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from dara.assets import prepare_assets
from dara.config import CONF_DIR, verl_validation_error, with_verl_searchpath
from dara.config_checks import (
    ConfigError,
    check_config,
    check_inputs,
    check_ray_options,
    check_reward,
    composition_error_line,
    estimator_module,
)
from dara.console import follow_progress, quiet_output
from dara.io import atomic_path, atomic_write_json, run_finished
from dara.preflight.rollout import check_rollout
from dara.reaper import adopt_orphans, end_descendants, now_ticks
from dara.run_folder import (
    MAIN_LOG,
    METRICS_FILE,
    RUN_INFO,
    VERL_CONFIG,
    RunFolderError,
    absolute_run_paths,
    check_same_estimator_module,
    check_same_experiment,
    experiment_config,
)
from dara.run_lock import run_folder_lock, weight_sync_lock
from dara.run_log import Progress, read_metrics
from dara.tracking import apply_wandb_env
from dara.verl.engine_watchdog import clear_engine_failure, read_engine_failure
from dara.verl.retention import apply_retention

VERBOSE_FLAG = "--verbose"


def _env_vars(cfg: DictConfig) -> dict:
    return OmegaConf.select(cfg, "ray_kwargs.ray_init.runtime_env.env_vars", default=None) or {}


def _module_record(cfg: DictConfig) -> dict | None:
    return None if (loaded := estimator_module(cfg)) is None else loaded.record()


def _write_run_info(cfg: DictConfig) -> None:
    info = {"run_name": cfg.run.name, "method": cfg.run.method, "seed": int(cfg.run.seed), "task": cfg.run.task,
            "model": cfg.run.model, "estimator": cfg.algorithm.adv_estimator,
            "reward_channels": list(cfg.algorithm.reward_channels), "command": " ".join(sys.argv),
            "recipe": cfg.run.get("recipe", None) or cfg.run.task,
            "reward_options": OmegaConf.to_container(  # among them the math grader
                OmegaConf.select(cfg, "reward.custom_reward_function.reward_kwargs", default=None) or {}),
            "estimator_module": _module_record(cfg), "config": experiment_config(cfg)}
    atomic_write_json(Path(cfg.run.output_dir) / RUN_INFO, info)


@contextmanager
def _ray_session(cfg: DictConfig):
    """A local Ray started and stopped by this run; with `ray_kwargs.ray_init.address` (a Slurm job's) that one."""
    if OmegaConf.select(cfg, "ray_kwargs.ray_init.address", default=None):
        yield
        return
    from dara.verl.cpu import local_ray_session

    # HOME moves only on the CPU path: a GPU run keeps the user's HF, wandb and pip caches
    with local_ray_session(cfg.run.output_dir, move_home=cfg.trainer.device == "cpu") as extra, open_dict(cfg):
        for key, value in extra.items():
            cfg.ray_kwargs.ray_init[key] = value
        yield


def _header(cfg: DictConfig, wandb: dict[str, str], verbose: bool) -> list[str]:
    from hydra.core.hydra_config import HydraConfig

    run, steps = cfg.run, cfg.trainer.total_training_steps or "all"
    # "?" where not under Hydra (a test calling train() directly)
    cluster = HydraConfig.get().runtime.choices.get("cluster", "?") if HydraConfig.initialized() else "?"
    lines = [f"[dara] {run.name}: task {run.task}, model {run.model}, estimator {cfg.algorithm.adv_estimator} "
             f"(channels {', '.join(cfg.algorithm.reward_channels)}), cluster {cluster}, "
             f"{steps} steps, seed {run.seed}",
             f"[dara] output   {run.output_dir}"]
    if not verbose:
        lines.append(f"[dara] logs     {MAIN_LOG} (verl, Ray workers), {VERL_CONFIG} (full config); "
                     "--verbose prints them here")
    if wandb:
        where = "wandb/ in the run folder" if wandb["WANDB_MODE"] == "offline" else "the wandb server"
        lines.append(f"[dara] wandb    {wandb['WANDB_MODE']} run {wandb['WANDB_RUN_ID']} (project "
                     f"{cfg.trainer.project_name}, group {wandb['WANDB_RUN_GROUP']}) in {where}")
    return lines


def _summary(cfg: DictConfig, seconds: float) -> str:
    path = Path(cfg.run.output_dir) / METRICS_FILE
    if not (records := read_metrics(path) if path.exists() else []):
        return f"[dara] finished in {seconds:.0f}s, no step logged ({path})"
    last = records[-1]
    parts = [f"{c}: reward {last.get(f'reward/{c}/mean', float('nan')):.3f}, "
             f"density {last.get(f'dara/density/{c}', float('nan')):.2f}, "
             f"weight {last.get(f'dara/weight/{c}', float('nan')):.2f}"
             for c in cfg.algorithm.reward_channels]
    text = (f"[dara] {cfg.run.name}: {len(records)} steps in {seconds:.0f}s; last step " + "; ".join(parts)
            + f"\n[dara] metrics: {path}")
    if _env_vars(cfg).get("WANDB_MODE") == "offline" and "wandb" in list(cfg.trainer.logger or []):
        text += f"\n[dara] wandb offline run: wandb sync {Path(cfg.run.output_dir) / 'wandb'}/offline-run-*"
    return text


@contextmanager
def _one_line():
    try:
        yield
    except RunFolderError as error:
        raise SystemExit(f"[dara] {error}") from None


def _claim_run_folder(cfg: DictConfig, stack: ExitStack) -> None:
    with _one_line():
        stack.enter_context(run_folder_lock(cfg.run.output_dir))
        unrecorded = check_same_experiment(cfg.run.output_dir, experiment_config(cfg), cfg.run.name, cfg.run.seed)
        check_same_estimator_module(cfg.run.output_dir, _module_record(cfg), cfg.run.name, cfg.run.seed)
    if unrecorded:
        shown = ", ".join(unrecorded[:4]) + (f" and {len(unrecorded) - 4} more" if len(unrecorded) > 4 else "")
        print(f"[dara] {RUN_INFO} of this folder's run lacks (or this code lacks) {shown}: taken as unchanged",
              flush=True)


def train(cfg: DictConfig) -> None:
    absolute_run_paths(cfg)
    OmegaConf.resolve(cfg)  # Ray actors then see plain values, no project resolvers needed there
    check_config(cfg)
    check_rollout(cfg)  # the rollout's name and options; on a CPU run vLLM's CPU build, head_dim and dtype
    with ExitStack() as claim:
        _claim_run_folder(cfg, claim)
        if cfg.run.skip_if_finished and run_finished(cfg.run.output_dir, cfg.trainer.total_training_steps):
            print(f"[dara] {cfg.run.name} already finished ({cfg.run.output_dir}); skipping", flush=True)
            return
        apply_retention(cfg, at_start=True)
        with _one_line():  # one run per host and /tmp: verl's weight-sync socket names would cross
            claim.enter_context(weight_sync_lock(cfg.run.output_dir))
        wandb = apply_wandb_env(cfg)
        # verl reads a few settings (platform, engine device) only from the environment: the cluster config's
        os.environ.update({str(key): str(value) for key, value in _env_vars(cfg).items()})
        prepare_assets(cfg)
        check_inputs(cfg)
        check_reward(cfg)
        _write_run_info(cfg)
        verbose = bool(cfg.run.get("verbose", False))
        print("\n".join(_header(cfg, wandb, verbose)), flush=True)
        main_log, start = Path(cfg.run.output_dir) / MAIN_LOG, time.monotonic()
        with ExitStack() as stack:
            write = print
            if not verbose:  # from here on everything printed goes to logs/main.log; progress to the console
                write = partial(print, file=stack.enter_context(quiet_output(main_log)), flush=True)
            try:
                _run_verl(cfg, write, follow=not verbose)
            except SystemExit as error:
                if verbose:
                    raise
                raise SystemExit(f"{error.code} (full output: {main_log})") from None
        print(_summary(cfg, time.monotonic() - start), flush=True)


def _run_verl(cfg: DictConfig, write, follow: bool) -> None:
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.utils.device import auto_set_device

    from dara.verl.cpu.ray_local import stop_local_ray

    if cfg.trainer.device == "cpu":
        from dara.verl.cpu import use_cpu_platform

        use_cpu_platform()  # before verl's auto_set_device, which would otherwise pick CUDA
    auto_set_device(cfg)
    # verl's own checks (batch sizes, parallelism): one line, not a traceback
    if (error := verl_validation_error(cfg)) is not None:
        raise ConfigError(f"verl rejects the config: {error}")
    progress = Progress(Path(cfg.run.output_dir) / METRICS_FILE, list(cfg.algorithm.reward_channels),
                        cfg.trainer.total_training_steps)
    check_ray_options(cfg)  # again: the wandb settings and the session's own options were added since
    started = now_ticks()
    adopt_orphans()  # a Ray worker's orphaned forks come to this process, not init (dara.reaper)
    with _ray_session(cfg):
        with atomic_path(Path(cfg.run.output_dir) / VERL_CONFIG) as tmp:
            OmegaConf.save(cfg, tmp)
        clear_engine_failure(cfg.run.output_dir)  # an earlier start's line must not explain this start's failure
        try:
            with follow_progress(progress, write) if follow else nullcontext():
                run_ppo(cfg, task_runner_class=TaskRunnerV1)
        except Exception as error:  # a failed ray.init, a dead worker, the trainer's error: its cause, one line
            traceback.print_exc(file=sys.stderr)  # into logs/main.log unless --verbose
            sys.stderr.flush()
            # a dead rollout engine: the watchdog's line, not Ray's "actor died"
            line = read_engine_failure(cfg.run.output_dir) or failure_line(error)
            raise SystemExit(f"[dara] training failed: {line}") from None
        finally:
            stop_local_ray()  # also the processes of a ray.init that failed halfway
            end_descendants(since_ticks=started)  # what Ray's shutdown does not know: its workers' forks


def failure_line(error: BaseException) -> str:
    """`Type: first line` of the error, of a Ray task error's cause."""
    import ray

    if isinstance(error, ray.exceptions.RayTaskError):
        cause = error.cause if isinstance(error.cause, BaseException) else error.as_instanceof_cause()
        if cause is not error:
            return failure_line(cause)
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else '(no message)'}"


_users_hydra_full_error: str | None = None  # main() sets HYDRA_FULL_ERROR=1 for the composition only


@hydra.main(config_path=str(CONF_DIR), config_name="train", version_base=None)
def _hydra_main(cfg: DictConfig) -> None:
    _restore_hydra_full_error()  # composed: the run's own errors get Hydra's usual report again
    try:
        train(cfg)
    except ConfigError as error:
        raise SystemExit(f"[dara] invalid configuration: {error}") from None


def _restore_hydra_full_error() -> None:
    os.environ.pop("HYDRA_FULL_ERROR", None)
    if _users_hydra_full_error is not None:
        os.environ["HYDRA_FULL_ERROR"] = _users_hydra_full_error


def main() -> None:
    """The Hydra app. HYDRA_FULL_ERROR=1 (unless the user set it) makes Hydra raise a bad override's error, shortened
    here to one line; the task restores the variable first, so the run's own errors keep Hydra's report."""
    global _users_hydra_full_error
    if VERBOSE_FLAG in sys.argv[1:]:
        sys.argv = [sys.argv[0], "run.verbose=true", *(arg for arg in sys.argv[1:] if arg != VERBOSE_FLAG)]
    sys.argv = [sys.argv[0], *with_verl_searchpath(sys.argv[1:])]  # a task folder of your own keeps verl's
    _users_hydra_full_error = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        _hydra_main()
    except KeyboardInterrupt:  # the run's Ray was stopped and its alias in /tmp removed on the way out
        print("[dara] interrupted (Ctrl-C): what Ray started is stopped; the same command resumes from the last "
              "checkpoint", file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    except (HydraException, OmegaConfBaseException) as error:
        if _users_hydra_full_error is not None:
            raise
        raise SystemExit(f"[dara] invalid override: {composition_error_line(error)}") from None
    finally:  # an in-process caller goes on with its own environment
        _restore_hydra_full_error()


if __name__ == "__main__":
    main()
