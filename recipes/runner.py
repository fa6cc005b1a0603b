"""The shared runner of the paper recipes: runs as data, dry-run listing, local and Slurm launchers.

A `Run` is the Hydra override list of one `python -m dara.train` job; its name and folder follow
`dara.config.run_name` and are known without composing (tests/test_recipes.py checks them against Hydra). A run
whose metrics.jsonl holds its last step is finished and skipped. The Slurm launcher submits one job array per seed
group (index = seed) through scripts/slurm/train.sbatch with --requeue, an explicit --time and the pre-timeout
signal, after `dara.preflight` passes for every group; runs already pending or running in squeue are skipped.
"""

from __future__ import annotations

import getpass
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from omegaconf import OmegaConf

import dara
from dara.config import CONF_DIR, run_name, search_dirs
from dara.io import run_finished

PROJECT_ROOT = dara.PROJECT_ROOT
SBATCH_SCRIPT = PROJECT_ROOT / "scripts" / "slurm" / "train.sbatch"
DEFAULT_OUTPUT_ROOT = "outputs"
# Substituted for the seed when a log path must be written once for a whole job array (Slurm's %a).
SLURM_ARRAY_INDEX = "%a"


class RecipeError(ValueError):
    """A recipe or launcher request that cannot be carried out."""


def method_label(estimator: str, static_form: str = "sym") -> str:
    """`run.method` of an estimator choice (conf/estimator/*.yaml): static_<form>, gd2po_hard_after, or the
    estimator's own name."""
    if estimator == "static":
        return f"static_{static_form}"
    return estimator


@dataclass(frozen=True)
class Run:
    """One training job: the choices per axis, the seed, and any further Hydra overrides.

    `variant` distinguishes runs whose task/model/method/seed coincide but whose settings differ (e.g. "g8"
    in the group-size study); it becomes part of the run name, so every setting has its own folder.
    `estimator_module` names a module of estimators of your own (a .py file, pinned absolute for the Slurm
    job, or an import path): `estimator` is then a name it registers, given as `algorithm.adv_estimator`
    with `algorithm.dara.estimator_module` instead of a conf/estimator/ choice.
    """

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
        return method_label(self.estimator, self.static_form)

    def name_for(self, seed: int | str) -> str:
        return run_name(self.task, self.model, self.method, seed, self.variant)

    @property
    def name(self) -> str:
        return self.name_for(self.seed)

    @property
    def root(self) -> Path:
        """run.output_root as dara.train sees it (the launchers start it in the project root)."""
        return PROJECT_ROOT / self.output_root

    @property
    def output_dir(self) -> Path:
        return self.root / self.name

    def group_overrides(self) -> list[str]:
        """Every override except the seed (the part a Slurm job array shares)."""
        if self.estimator_module:
            chosen = [f"algorithm.adv_estimator={self.estimator}", f"algorithm.dara.estimator_module={self.estimator_module}"]
        else:
            chosen = [f"estimator={self.estimator}"]
        overrides = [f"task={self.task}", f"model={self.model}", *chosen, f"cluster={self.cluster}"]
        if self.estimator == "static":
            overrides.append(f"algorithm.dara.form={self.static_form}")
        if self.variant:
            overrides.append(f"run.variant={self.variant}")
        if self.output_root != DEFAULT_OUTPUT_ROOT:
            overrides.append(f"run.output_root={self.output_root}")
        if self.total_steps is not None:
            overrides.append(f"trainer.total_training_steps={self.total_steps}")
        return overrides + list(self.extra)

    def overrides(self) -> list[str]:
        return self.group_overrides() + [f"run.seed={self.seed}"]

    def group_key(self) -> tuple:
        return tuple(self.group_overrides())


# ----------------------------------------------------------------------------- config facts without composing
def _load_with_defaults(path: Path, dirs: Sequence[Path] = ()):
    """A group file merged over the files its own defaults list names (same group), as Hydra would."""
    node = OmegaConf.load(path)
    defaults = node.pop("defaults", None) or []
    merged = OmegaConf.create()
    for entry in defaults:
        if entry == "_self_":
            merged = OmegaConf.merge(merged, node)
            node = None
        else:
            merged = OmegaConf.merge(merged, _load_with_defaults(group_file(path.parent.name, entry, dirs), dirs))
    return merged if node is None else OmegaConf.merge(merged, node)


def group_file(group: str, choice: str, dirs: Sequence[Path] = ()) -> Path:
    """conf/<group>/<choice>.yaml, else the same file in a folder of your own (`hydra.searchpath`, `dirs`)."""
    folders = [CONF_DIR, *dirs]
    for folder in folders:
        path = Path(folder) / group / f"{choice}.yaml"
        if path.exists():
            return path
    choices = sorted({p.stem for folder in folders for p in (Path(folder) / group).glob("*.yaml")
                      if not p.stem.startswith("_")})
    raise RecipeError(f"{group}={choice} does not exist; choices: {choices}")


def group_value(group: str, choice: str, key: str, default=None, dirs: Sequence[Path] = ()):
    """A plain value a group file sets (e.g. trainer.nnodes of a cluster), read without composing."""
    value = OmegaConf.select(_load_with_defaults(group_file(group, choice, dirs), dirs), key, default=default)
    return default if value is None else value


def _override_value(overrides: Iterable[str], key: str) -> str | None:
    value = None
    for item in overrides:
        name, _, rest = item.lstrip("+").partition("=")
        if name == key:
            value = rest
    return value


def expected_steps(run: Run) -> int:
    """The run's last step: an explicit override, else the task file's trainer.total_training_steps."""
    explicit = _override_value(run.overrides(), "trainer.total_training_steps")
    if explicit is not None:
        return int(explicit)
    return int(group_value("task", run.task, "trainer.total_training_steps", dirs=search_dirs(run.overrides())))


def is_finished(run: Run) -> bool:
    """metrics.jsonl of the run's folder holds its last step (what `run.skip_if_finished` checks)."""
    return run_finished(run.output_dir, expected_steps(run))


def with_options(runs: Sequence[Run], *, output_root: str | None = None, cluster: str | None = None,
                 extra: Sequence[str] = (), total_steps: int | None = None) -> list[Run]:
    """The recipe's runs with the command line's global settings applied."""
    changes = {}
    if output_root is not None:
        changes["output_root"] = str(Path(output_root).absolute())
    if cluster is not None:
        group_file("cluster", cluster)
        changes["cluster"] = cluster
    if total_steps is not None:
        changes["total_steps"] = int(total_steps)
    return [replace(run, extra=run.extra + tuple(extra), **changes) for run in runs]


# ----------------------------------------------------------------------------- listing
def describe(runs: Sequence[Run]) -> str:
    """The dry-run table: each run's name, status, output folder and full override list."""
    lines = []
    for index, run in enumerate(runs, 1):
        status = "finished" if is_finished(run) else "to run"
        lines.append(f"[{index}/{len(runs)}] {run.name}  ({status})")
        lines.append(f"    output: {run.output_dir}")
        lines.append(f"    python -m dara.train {shlex.join(run.overrides())}")
    return "\n".join(lines)


def summary_line(runs: Sequence[Run]) -> str:
    axes = {axis: sorted({str(getattr(r, axis)) for r in runs}) for axis in ("task", "model", "method", "seed")}
    variants = sorted({r.variant for r in runs if r.variant})
    text = "; ".join(f"{axis}: {', '.join(values)}" for axis, values in axes.items())
    return f"{len(runs)} runs ({text}{'; variants: ' + ', '.join(variants) if variants else ''})"


# ----------------------------------------------------------------------------- local launcher
def train_command(run: Run, python: str = sys.executable) -> list[str]:
    return [python, "-m", "dara.train", *run.overrides(), "run.skip_if_finished=true"]


def launch_local(runs: Sequence[Run], python: str = sys.executable) -> int:
    """Run each unfinished run in turn; returns the number of failed runs."""
    failed, done, skipped = [], 0, 0
    for index, run in enumerate(runs, 1):
        if is_finished(run):
            skipped += 1
            print(f"[recipes] [{index}/{len(runs)}] {run.name}: finished, skipped", flush=True)
            continue
        print(f"[recipes] [{index}/{len(runs)}] {run.name}: starting", flush=True)
        start = time.monotonic()
        code = subprocess.call(train_command(run, python), cwd=PROJECT_ROOT)
        minutes = (time.monotonic() - start) / 60
        if code == 0:
            done += 1
            print(f"[recipes] [{index}/{len(runs)}] {run.name}: done in {minutes:.1f} min", flush=True)
        else:
            failed.append(run.name)
            print(f"[recipes] [{index}/{len(runs)}] {run.name}: FAILED (exit {code})", flush=True)
    print(f"[recipes] local: {done} ran, {skipped} already finished, {len(failed)} failed"
          + (f": {', '.join(failed)}" if failed else ""), flush=True)
    return len(failed)


# ----------------------------------------------------------------------------- preflight
def preflight_runs(runs: Sequence[Run], *, skip_env: bool = False, time_limit: str | None = None,
                   calibration: str | None = None, verbose: bool = True) -> list[tuple[list[Run], object]]:
    """`dara.preflight` of every run, composed in this process (one Hydra context), once per seed group: the
    seed changes no value the preflight reads. Each group is checked against the time its jobs get
    (`job_time`). Returns (group, report) pairs."""
    from dara.config import compose
    from dara.preflight import CalibrationError, load_calibration, parse_time_limit, preflight

    try:
        measured = load_calibration(calibration) if calibration else None
    except CalibrationError as error:
        raise RecipeError(str(error)) from None
    results = []
    groups = seed_groups(runs)
    for index, group in enumerate(groups, 1):
        cfg = compose(group[0].overrides())
        minutes = parse_time_limit(job_time(group[0], time_limit))
        report = preflight(cfg, time_limit_minutes=minutes, skip_env=skip_env, calibration=measured)
        results.append((group, report))
        if verbose:
            label = group[0].name_for("{" + ",".join(str(r.seed) for r in group) + "}")
            if report.ok:
                print(f"[recipes] preflight [{index}/{len(groups)}] {label}: ok", flush=True)
            else:
                print(f"[recipes] preflight [{index}/{len(groups)}] {label}: FAILED\n{report.text()}", flush=True)
    return results


# ----------------------------------------------------------------------------- Slurm launcher
@dataclass(frozen=True)
class SlurmOptions:
    partition: str | None = None
    account: str | None = None
    time: str | None = None  # sbatch --time; None: the cluster file's job_time_limit_minutes
    extra_args: tuple[str, ...] = ()
    python: str | None = None
    calibration: str | None = None  # a gpu_smoke calibration file: the preflight's and the job's step minutes


def job_time(run: Run, time: str | None = None) -> str:
    """The --time a job of `run` gets: the launcher's, else its cluster file's job_time_limit_minutes."""
    from dara.slurm_time import format_time_limit, parse_time_limit

    if time:
        if parse_time_limit(time) is None:
            raise RecipeError(f"--time {time!r} sets no limit: a job needs one (its steps are checked against it)")
        return time
    minutes = group_value("cluster", run.cluster, "run.hardware.job_time_limit_minutes")
    if minutes is None:
        raise RecipeError(f"cluster {run.cluster} has no run.hardware.job_time_limit_minutes: pass --time")
    return format_time_limit(float(minutes))


def signal_lead_seconds(run: Run) -> int:
    """sbatch --signal=B:USR1@<this>: the cluster file's run.hardware.signal_lead_minutes (default 5)."""
    from dara.slurm_time import DEFAULT_SIGNAL_LEAD_MINUTES

    lead = group_value("cluster", run.cluster, "run.hardware.signal_lead_minutes", DEFAULT_SIGNAL_LEAD_MINUTES)
    return int(60 * float(lead))


def seed_groups(runs: Sequence[Run]) -> list[list[Run]]:
    """Runs grouped by everything but the seed, in first-seen order (one job array each)."""
    groups: dict[tuple, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.group_key(), []).append(run)
    return list(groups.values())


def array_log_path(run: Run) -> Path:
    """The group's Slurm log path with %A (array job id) and %a (index = seed) left for Slurm to fill."""
    return run.root / run.name_for(SLURM_ARRAY_INDEX) / "logs" / "slurm-%A_%a.out"


def job_name(run: Run) -> str:
    """The Slurm job name of the run's seed group (its array index is the seed)."""
    return run.name_for("x").removesuffix("-sx")


SQUEUE_FORMAT = "%j|%K|%i|%T"  # name | array index (N/A outside arrays) | job id | state


def run_squeue() -> str | None:
    """This user's jobs in squeue, one array element per line (SQUEUE_FORMAT); None when squeue cannot tell."""
    try:
        user = os.environ.get("USER") or getpass.getuser()
        command = ["squeue", "--noheader", "--array", f"--user={user}", f"--format={SQUEUE_FORMAT}"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, KeyError, subprocess.TimeoutExpired):
        return None
    return result.stdout if result.returncode == 0 else None


def _array_indices(text: str) -> list[int | None]:
    """`4`, or a pending range squeue did not expand (`[0-2,5%2]`); N/A (no array) is None."""
    text = text.strip().strip("[]").split("%")[0]
    if not text or text == "N/A":
        return [None]
    indices: list[int | None] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            indices += range(int(first), int(last or first) + 1)
    return indices


def parse_squeue(text: str) -> dict[tuple[str, int | None], tuple[str, str]]:
    """{(job name, array index or None): (job id, state)} from squeue lines in SQUEUE_FORMAT."""
    jobs = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 4:
            continue
        name, index, job_id, state = fields
        for value in _array_indices(index):
            jobs[(name, value)] = (job_id, state)
    return jobs


def queued_job(run: Run, jobs: dict) -> tuple[str, str] | None:
    """(job id, state) of the run's job in squeue: the element (index = seed) of its group's job array."""
    return jobs.get((job_name(run), run.seed))


def sbatch_command(group: Sequence[Run], options: SlurmOptions = SlurmOptions()) -> list[str]:
    """`sbatch` for one job array: nodes and GPUs per node from the cluster file, one task per node."""
    first = group[0]
    seeds = sorted({run.seed for run in group})
    if any(s < 0 for s in seeds):
        raise RecipeError(f"Slurm array indices (= seeds) must be >= 0, got {seeds}")
    nodes = int(group_value("cluster", first.cluster, "trainer.nnodes", 1))
    gpus = int(group_value("cluster", first.cluster, "trainer.n_gpus_per_node", 0))
    device = group_value("cluster", first.cluster, "trainer.device", "cuda")
    command = ["sbatch", "--parsable", f"--job-name={job_name(first)}", f"--array={','.join(map(str, seeds))}",
               f"--nodes={nodes}", "--ntasks-per-node=1", "--requeue", "--open-mode=append",
               f"--chdir={PROJECT_ROOT}", f"--output={array_log_path(first)}"]
    if device == "cuda":
        command += [f"--gpus-per-node={gpus}", "--exclusive"]
    command += [f"--time={job_time(first, options.time)}", f"--signal=B:USR1@{signal_lead_seconds(first)}"]
    for flag, value in (("--partition", options.partition), ("--account", options.account)):
        if value:
            command.append(f"{flag}={value}")
    command += list(options.extra_args)
    command.append(str(SBATCH_SCRIPT))
    if options.python:
        command += ["--python", options.python]
    if options.calibration:
        command += ["--calibration", str(Path(options.calibration).absolute())]
    return command + ["--seed-from-array", *first.group_overrides()]


def submit_sbatch(command: Sequence[str]) -> str:
    """Run `sbatch --parsable ...` from the project root; the job id it printed."""
    result = subprocess.run(list(command), capture_output=True, text=True, cwd=PROJECT_ROOT)
    if result.returncode != 0:
        raise RecipeError(f"sbatch failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout.strip().split(";")[0]  # --parsable: "<id>" or "<id>;<cluster>"


def _not_queued(runs: Sequence[Run], squeue) -> tuple[list[Run], int]:
    """The runs without a pending or running job (each skipped one named), and how many were skipped."""
    text = squeue()
    if text is None:
        print("[recipes] squeue did not answer: runs already queued are not detected", flush=True)
        return list(runs), 0
    jobs = parse_squeue(text)
    free = []
    for run in runs:
        job = queued_job(run, jobs)
        if job is None:
            free.append(run)
        else:
            print(f"[recipes] {run.name}: job {job[0]} is {job[1].lower()}; skipped", flush=True)
    return free, len(runs) - len(free)


def launch_slurm(runs: Sequence[Run], options: SlurmOptions = SlurmOptions(), *, dry_run: bool = False,
                 skip_env: bool = False, squeue=run_squeue) -> list[str]:
    """Submit one job array per seed group (finished runs and runs whose job is in squeue left out); returns
    the job ids.

    Unless dry_run, every group passes `dara.preflight` first (on the cluster's allocation and --time), or
    nothing is submitted."""
    job_ids = []
    pending = [run for run in runs if not is_finished(run)]
    skipped = len(runs) - len(pending)
    pending, queued = _not_queued(pending, squeue) if pending else (pending, 0)
    if not dry_run and pending:
        failed = [job_name(group[0]) for group, report in
                  preflight_runs(pending, skip_env=skip_env, time_limit=options.time,
                                 calibration=options.calibration) if not report.ok]
        if failed:
            raise RecipeError(f"preflight failed for {len(failed)} job array(s), nothing submitted: {', '.join(failed)}")
    for group in seed_groups(pending):
        command = sbatch_command(group, options)
        if dry_run:
            print("[recipes] " + shlex.join(command), flush=True)
            continue
        for run in group:  # Slurm opens the log before the job starts: the folder must exist
            (run.output_dir / "logs").mkdir(parents=True, exist_ok=True)
        job_id = submit_sbatch(command)
        job_ids.append(job_id)
        print(f"[recipes] submitted array {job_id} ({group[0].name_for('{' + ','.join(str(r.seed) for r in group) + '}')})",
              flush=True)
    verb = "to submit" if dry_run else "submitted"
    print(f"[recipes] slurm: {len(seed_groups(pending))} job arrays, {len(pending)} runs {verb}, "
          f"{skipped} already finished" + (f", {queued} queued or running" if queued else ""), flush=True)
    return job_ids
