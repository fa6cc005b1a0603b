"""The recipes' runner: a `Run` is the Hydra override list of one `python -m dara.train` job (its name and folder
known without composing); the dry-run listing; the local launcher (finished runs skipped) and the Slurm launcher (one
job array per seed group through scripts/slurm/train.sbatch, after `dara.preflight` passes for every group)."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from omegaconf import OmegaConf

import dara
from dara.config import CONF_DIR, run_name, search_dirs
from dara.io import run_finished

PROJECT_ROOT = dara.PROJECT_ROOT
SBATCH_SCRIPT = PROJECT_ROOT / "scripts" / "slurm" / "train.sbatch"
DEFAULT_OUTPUT_ROOT = "outputs"


class RecipeError(ValueError):
    """A recipe or launcher request that cannot be carried out."""


@dataclass(frozen=True)
class Run:
    """One training job. `variant` (e.g. "g8") is part of the run name; `estimator_module`: a module of estimators
    of your own (a .py file, made absolute for Slurm, or an import path) registering `estimator`."""
    task: str
    model: str
    estimator: str
    cluster: str
    seed: int
    variant: str = ""
    extra: tuple[str, ...] = ()
    static_form: str = "sym"
    output_root: str = DEFAULT_OUTPUT_ROOT
    total_steps: int | None = None
    estimator_module: str | None = None

    def __post_init__(self) -> None:
        module = self.estimator_module
        if module and (module.endswith(".py") or "/" in module) and not module.startswith("pkg://"):
            object.__setattr__(self, "estimator_module", str(Path(module).expanduser().absolute()))

    @property
    def method(self) -> str:
        return f"static_{self.static_form}" if self.estimator == "static" else self.estimator

    def name_for(self, seed: int | str) -> str:
        return run_name(self.task, self.model, self.method, seed, self.variant)

    @property
    def name(self) -> str:
        return self.name_for(self.seed)

    @property
    def root(self) -> Path:  # run.output_root as dara.train sees it from the project root
        return PROJECT_ROOT / self.output_root

    @property
    def output_dir(self) -> Path:
        return self.root / self.name

    def group_overrides(self) -> list[str]:
        """Every override except the seed (the part a Slurm job array shares)."""
        if self.estimator_module:
            chosen = [f"algorithm.adv_estimator={self.estimator}",
                      f"algorithm.dara.estimator_module={self.estimator_module}"]
        else:
            chosen = [f"estimator={self.estimator}"]
        optional = ((self.estimator == "static", f"algorithm.dara.form={self.static_form}"),
                    (self.variant, f"run.variant={self.variant}"),
                    (self.output_root != DEFAULT_OUTPUT_ROOT, f"run.output_root={self.output_root}"),
                    (self.total_steps is not None, f"trainer.total_training_steps={self.total_steps}"))
        return [f"task={self.task}", f"model={self.model}", *chosen, f"cluster={self.cluster}",
                *(text for wanted, text in optional if wanted), *self.extra]

    def overrides(self) -> list[str]:
        return self.group_overrides() + [f"run.seed={self.seed}"]


def _load_with_defaults(path: Path, dirs: Sequence[Path] = ()):
    """A group file merged over the files its own defaults list names (same group), as Hydra would."""
    node = OmegaConf.load(path)
    merged = OmegaConf.create()
    for entry in node.pop("defaults", None) or []:
        if entry == "_self_":
            merged, node = OmegaConf.merge(merged, node), None
        else:
            merged = OmegaConf.merge(merged, _load_with_defaults(group_file(path.parent.name, entry, dirs), dirs))
    return merged if node is None else OmegaConf.merge(merged, node)


def group_file(group: str, choice: str, dirs: Sequence[Path] = ()) -> Path:
    """conf/<group>/<choice>.yaml, else the same file in a folder of your own (`hydra.searchpath`, `dirs`)."""
    folders = [CONF_DIR, *dirs]
    for folder in folders:
        if (path := Path(folder) / group / f"{choice}.yaml").exists():
            return path
    choices = sorted({p.stem for folder in folders for p in (Path(folder) / group).glob("*.yaml")
                      if not p.stem.startswith("_")})
    raise RecipeError(f"{group}={choice} does not exist; choices: {choices}")


def group_value(group: str, choice: str, key: str, default=None, dirs: Sequence[Path] = ()):
    """A value a group file sets (e.g. trainer.nnodes of a cluster), read without composing."""
    value = OmegaConf.select(_load_with_defaults(group_file(group, choice, dirs), dirs), key, default=default)
    return default if value is None else value


def override_value(overrides: Iterable[str], key: str) -> str | None:
    found = [rest for name, _, rest in (item.lstrip("+").partition("=") for item in overrides) if name == key]
    return found[-1] if found else None


def expected_steps(run: Run) -> int:
    explicit = override_value(run.overrides(), "trainer.total_training_steps")
    return int(explicit if explicit is not None else group_value(
        "task", run.task, "trainer.total_training_steps", dirs=search_dirs(run.overrides())))


def is_finished(run: Run) -> bool:  # what run.skip_if_finished checks
    return run_finished(run.output_dir, expected_steps(run))


def with_options(runs: Sequence[Run], *, output_root: str | None = None, cluster: str | None = None,
                 extra: Sequence[str] = (), total_steps: int | None = None) -> list[Run]:
    changes = {}
    if output_root is not None:
        changes["output_root"] = str(Path(output_root).absolute())
    if cluster is not None:
        group_file("cluster", cluster)
        changes["cluster"] = cluster
    if total_steps is not None:
        changes["total_steps"] = int(total_steps)
    return [replace(run, extra=run.extra + tuple(extra), **changes) for run in runs]


def describe(runs: Sequence[Run]) -> str:
    return "\n".join(f"[{index}/{len(runs)}] {run.name}  ({'finished' if is_finished(run) else 'to run'})\n"
                     f"    output: {run.output_dir}\n    python -m dara.train {shlex.join(run.overrides())}"
                     for index, run in enumerate(runs, 1))


def summary_line(runs: Sequence[Run]) -> str:
    axes = {axis: sorted({str(getattr(r, axis)) for r in runs}) for axis in ("task", "model", "method", "seed")}
    variants = sorted({r.variant for r in runs if r.variant})
    text = "; ".join(f"{axis}: {', '.join(values)}" for axis, values in axes.items())
    return f"{len(runs)} runs ({text}{'; variants: ' + ', '.join(variants) if variants else ''})"


def train_command(run: Run, python: str = sys.executable) -> list[str]:
    return [python, "-m", "dara.train", *run.overrides(), "run.skip_if_finished=true"]


def run_in_turn(runs: Sequence[Run], label: str = "recipes", python: str = sys.executable,
                after_run: Callable[[Run], object] | None = None) -> int:
    """Each unfinished run in turn (an interrupted one resumes), one line each with the time left; ``after_run`` on
    each that finished. Returns the number of failed runs."""
    todo = [run for run in runs if not is_finished(run)]
    print(f"[{label}] {len(runs)} runs: {len(runs) - len(todo)} finished (skipped), {len(todo)} to run", flush=True)
    failed, spent = [], []
    for index, run in enumerate(todo, 1):
        started = time.monotonic()
        code = subprocess.call(train_command(run, python), cwd=PROJECT_ROOT)
        spent.append(time.monotonic() - started)
        if code:
            failed.append(run.name)
        elif after_run is not None:
            after_run(run)
        print(f"[{label}] {index}/{len(todo)} {run.name}: {'done' if code == 0 else f'FAILED (exit {code})'} in "
              f"{spent[-1] / 60:.1f} min, ~{sum(spent) / index * (len(todo) - index) / 60:.0f} min left", flush=True)
    print(f"[{label}] {len(todo) - len(failed)} ran, {len(runs) - len(todo)} skipped, {len(failed)} failed"
          + (f": {', '.join(failed)}" if failed else ""), flush=True)
    return len(failed)


def preflight_runs(runs: Sequence[Run], *, skip_env: bool = False, time_limit: str | None = None,
                   calibration: str | None = None) -> list[tuple[list[Run], object]]:
    """`dara.preflight` of every seed group (the seed changes nothing it reads) against `job_time`: (group, report)."""
    from dara.config import compose
    from dara.preflight import CalibrationError, load_calibration, parse_time_limit, preflight
    try:
        measured = load_calibration(calibration) if calibration else None
    except CalibrationError as error:
        raise RecipeError(str(error)) from None
    results, groups = [], seed_groups(runs)
    for index, group in enumerate(groups, 1):
        minutes = parse_time_limit(job_time(group[0], time_limit))
        report = preflight(compose(group[0].overrides()), time_limit_minutes=minutes, skip_env=skip_env,
                           calibration=measured)
        results.append((group, report))
        verdict = "ok" if report.ok else f"FAILED\n{report.text()}"
        print(f"[recipes] preflight [{index}/{len(groups)}] {group_label(group)}: {verdict}", flush=True)
    return results


@dataclass(frozen=True)
class SlurmOptions:
    partition: str | None = None
    account: str | None = None
    time: str | None = None  # sbatch --time; None: the cluster file's job_time_limit_minutes
    extra_args: tuple[str, ...] = ()
    python: str | None = None
    calibration: str | None = None  # a gpu_smoke calibration file: the preflight's and the job's step minutes


def job_time(run: Run, time: str | None = None) -> str:
    from dara.slurm_time import format_time_limit, parse_time_limit
    if time:
        if parse_time_limit(time) is None:
            raise RecipeError(f"--time {time!r} sets no limit: a job needs one (its steps are checked against it)")
        return time
    minutes = group_value("cluster", run.cluster, "run.hardware.job_time_limit_minutes")
    if minutes is None:
        raise RecipeError(f"cluster {run.cluster} has no run.hardware.job_time_limit_minutes: pass --time")
    return format_time_limit(float(minutes))


def seed_groups(runs: Sequence[Run]) -> list[list[Run]]:
    groups: dict[tuple, list[Run]] = {}
    for run in runs:
        groups.setdefault(tuple(run.group_overrides()), []).append(run)
    return list(groups.values())


def group_label(group: Sequence[Run]) -> str:
    return group[0].name_for("{" + ",".join(str(r.seed) for r in group) + "}")


def sbatch_command(group: Sequence[Run], options: SlurmOptions = SlurmOptions()) -> list[str]:
    """`sbatch` for one job array: nodes, GPUs and the pre-timeout signal's lead from the cluster file."""
    from dara.slurm_time import DEFAULT_SIGNAL_LEAD_MINUTES
    first, seeds = group[0], sorted({run.seed for run in group})
    if any(s < 0 for s in seeds):
        raise RecipeError(f"Slurm array indices (= seeds) must be >= 0, got {seeds}")

    def cluster(key, default=None):
        return group_value("cluster", first.cluster, key, default)
    lead = int(60 * float(cluster("run.hardware.signal_lead_minutes", DEFAULT_SIGNAL_LEAD_MINUTES)))
    # %a (the array index = the seed) and %A (the array job id) are Slurm's
    log = first.root / first.name_for("%a") / "logs" / "slurm-%A_%a.out"
    command = ["sbatch", "--parsable", f"--job-name={first.name_for('x').removesuffix('-sx')}",
               f"--array={','.join(map(str, seeds))}", f"--nodes={int(cluster('trainer.nnodes', 1))}",
               "--ntasks-per-node=1", "--requeue", "--open-mode=append", f"--chdir={PROJECT_ROOT}", f"--output={log}"]
    if cluster("trainer.device", "cuda") == "cuda":
        command += [f"--gpus-per-node={int(cluster('trainer.n_gpus_per_node', 0))}", "--exclusive"]
    command += [f"--time={job_time(first, options.time)}", f"--signal=B:USR1@{lead}",
                *(f"{flag}={value}" for flag, value in (("--partition", options.partition),
                                                        ("--account", options.account)) if value),
                *options.extra_args, str(SBATCH_SCRIPT)]
    if options.python:
        command += ["--python", options.python]
    if options.calibration:
        command += ["--calibration", str(Path(options.calibration).absolute())]
    return command + ["--seed-from-array", *first.group_overrides()]


def launch_slurm(runs: Sequence[Run], options: SlurmOptions = SlurmOptions(), *, dry_run: bool = False,
                 skip_env: bool = False) -> list[str]:
    """One job array per seed group of the unfinished runs (nothing unless every group passes the preflight)."""
    pending = [run for run in runs if not is_finished(run)]
    groups = seed_groups(pending)
    if not dry_run and pending:
        failed = [group_label(group) for group, report in preflight_runs(
            pending, skip_env=skip_env, time_limit=options.time, calibration=options.calibration) if not report.ok]
        if failed:
            raise RecipeError(f"preflight failed for {len(failed)} job array(s), nothing submitted: {', '.join(failed)}")
    job_ids = []
    for group in groups:
        command = sbatch_command(group, options)
        if dry_run:
            print("[recipes] " + shlex.join(command), flush=True)
            continue
        for run in group:  # Slurm opens the log before the job starts: the folder must exist
            (run.output_dir / "logs").mkdir(parents=True, exist_ok=True)
        result = subprocess.run(command, capture_output=True, text=True, cwd=PROJECT_ROOT)
        if result.returncode != 0:
            raise RecipeError(f"sbatch failed ({result.returncode}): {result.stderr.strip()}")
        job_ids.append(result.stdout.strip().split(";")[0])  # --parsable: "<id>" or "<id>;<cluster>"
        print(f"[recipes] submitted array {job_ids[-1]} ({group_label(group)})", flush=True)
    print(f"[recipes] slurm: {len(groups)} job arrays, {len(pending)} runs {'to submit' if dry_run else 'submitted'}, "
          f"{len(runs) - len(pending)} already finished", flush=True)
    return job_ids
