"""The CPU races (docs/headline_cpu.md): methods x seeds with the settings of the committed
results/<race>/protocol.json, in turn on a CPU. race_format and race_length keep each finished run's logs in
results/<race>/logs (``--commit``: committed as the race goes) and restore them in a fresh clone."""

from __future__ import annotations

import functools
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

from dara.io import atomic_write_text
from recipes.paper import grid
from recipes.runner import PROJECT_ROOT, RecipeError, Run, is_finished, run_in_turn
from results import headline

LOG_FILES = ("metrics.jsonl", "run_info.json")
STATIC_WEIGHTS = "algorithm.dara.weights=[1.0,5.0]"  # the authors' fixed weights, in the channels' order


def load_protocol(path) -> dict:
    try:
        return headline.load_protocol(path)
    except headline.ProtocolError as error:
        raise RecipeError(str(error)) from None


def keep_logs(run: Run, logs_dir):
    target = logs_dir / run.name
    for name in LOG_FILES:
        atomic_write_text(target / name, (run.output_dir / name).read_text())
    return target


def restore_logs(batch: Sequence[Run], logs_dir) -> int:
    """Committed logs back into runs' missing folders (a fresh clone), so they count as finished: how many."""
    restored = 0
    for run in batch:
        kept = logs_dir / run.name
        if (kept / "metrics.jsonl").is_file() and not is_finished(run):
            run.output_dir.mkdir(parents=True, exist_ok=True)
            for name in LOG_FILES:
                shutil.copyfile(kept / name, run.output_dir / name)
            restored += 1
    return restored


def commit_logs(run: Run, logs_dir, label: str, attempts: int = 5) -> bool:
    """Keep the run's logs and commit that folder alone, waiting out another git command; a failure is one line."""
    relative = str(keep_logs(run, logs_dir).relative_to(PROJECT_ROOT))
    message = f"results/{label}: {run.method} seed {run.seed} ({run.name})"
    for attempt in range(attempts):
        if all(subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True).returncode == 0 for command in (
                ["git", "add", "--", relative], ["git", "commit", "-q", "-m", message, "--", relative])):
            return True
        time.sleep(2 * (attempt + 1))
    print(f"[{label}] could not commit {relative}: kept there, commit it by hand", flush=True)
    return False


@dataclass(frozen=True)
class Race:
    NAME: str
    DESCRIPTION: str
    task: str
    model: str
    methods: tuple[str, ...]
    DEFAULT_SEEDS: tuple[int, ...] = tuple(range(12))
    extra_methods: tuple[str, ...] = ()  # run after every seed of the main methods
    seed_by_seed: bool = True             # False: method by method
    keeps_logs: bool = True

    @property
    def protocol_file(self):
        return PROJECT_ROOT / "results" / self.NAME / "protocol.json"

    @property
    def logs_dir(self):
        return PROJECT_ROOT / "results" / self.NAME / "logs"

    def run(self, method: str, seed: int, protocol: dict) -> Run:
        extra = ((STATIC_WEIGHTS,) if method.startswith("static_") else ()) + (
            f"trainer.total_training_steps={int(protocol['steps'])}",
            f"actor_rollout_ref.rollout.temperature={float(protocol['temperature'])}",
            f"actor_rollout_ref.rollout.n={int(protocol['group_size'])}",
            f"data.train_batch_size={int(protocol['prompts_per_step'])}",
            f"trainer.save_freq={int(protocol['save_freq'])}", "trainer.max_actor_ckpt_to_keep=1")
        return grid(self.task, [self.model], [method], "cpu", [seed], output_root=f"outputs/{self.NAME}",
                    extra=extra)[0]

    def runs(self, seeds: Sequence[int] | None = None, protocol: dict | None = None) -> list[Run]:
        seeds, protocol = self.DEFAULT_SEEDS if seeds is None else seeds, protocol or load_protocol(self.protocol_file)
        if not self.seed_by_seed:
            return [self.run(method, seed, protocol) for method in self.methods for seed in seeds]
        return [self.run(method, seed, protocol) for methods in (self.methods, self.extra_methods)
                for seed in seeds for method in methods]

    def run_locally(self, race: Sequence[Run], args) -> int:
        after = None
        if self.keeps_logs:
            if restored := restore_logs(race, self.logs_dir):
                print(f"[{self.NAME}] {restored} finished runs restored from {self.logs_dir}", flush=True)
            after = (functools.partial(commit_logs, logs_dir=self.logs_dir, label=self.NAME)
                     if getattr(args, "commit", False) else functools.partial(keep_logs, logs_dir=self.logs_dir))
        return 1 if run_in_turn(race, self.NAME, args.python_exe, after_run=after) else 0

    def describe_plan(self, race: Sequence[Run]) -> str:
        return "\n".join(f"{index:2d}. method {run.method:10s} seed {run.seed}  {run.name}"
                         for index, run in enumerate(race, 1))


CPU_HEADLINE = Race(
    "cpu_headline", "Toy headline race on a CPU: GRPO, GDPO, DARA-Sym, DARA-Asym on a sparse format reward, 5 seeds",
    "smoke_sparse", "tiny_sparse", headline.METHODS, DEFAULT_SEEDS=(0, 1, 2, 3, 4), seed_by_seed=False,
    keeps_logs=False)
RACE_FORMAT = Race(
    "race_format", "Format race on a CPU: GRPO, GDPO, DARA-Sym, DARA-Asym x 12 paired seeds, format sparse for many "
    "steps", "smoke_rare", "tiny_rare", ("gdpo", "dara_asym", "dara_sym", "grpo"))
RACE_LENGTH = Race(
    "race_length", "Length race on a CPU: GDPO, DARA-Asym, DARA-Sym x 12 paired seeds, length compliance sparse by "
    "group", "smoke_length", "tiny_length", ("gdpo", "dara_asym", "dara_sym"),
    extra_methods=("grpo", "static_asym", "static_sym"))
