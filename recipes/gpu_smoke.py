"""`python -m recipes gpu_smoke`: the first GPU run of a cluster (docs/experiments.md, "First GPU run"). On one GPU
of >= 24 GiB: the environment check; steps 1-3 of Qwen2.5-0.5B on ToolRL with a forced stop after step 2; the
resume to step 4; BFCL and math evaluation of step 4's export; then a checklist, the GPU memory measured against
the preflight's plan, the throughput and a calibration file of minutes per step for every paper run on the
cluster files of this GPU. Everything goes to `<run folder>/gpu_smoke/`.
"""

from __future__ import annotations

import functools
import json
import shlex
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from dara.config import CONF_DIR
from dara.preflight.environment import FLASH_ATTN_BUILD
from dara.run_folder import CHECKPOINT_TRACKER, CHECKPOINTS, HF_KEPT, METRICS_FILE
from recipes.runner import PROJECT_ROOT, RecipeError, Run, group_value

DESCRIPTION = ("GPU smoke: one GPU >= 24 GiB, Qwen2.5-0.5B on ToolRL with vLLM, forced stop + resume, "
               "BFCL + math evaluation; checklist and calibration file")
DEFAULT_SEEDS = (0,)
STEPS = 4
STOP_AFTER_STEP = 2  # the stop is requested once this step is logged: the trainer stops at the next one
MIN_GPU_GIB = 24.0
EVAL_CASES = 20
MATH_DATA = "data/math_eval/test.parquet"
OVERRIDES = (
    # 16 prompts x 4 responses, one PPO update a step; a larger lr than the paper's so that a missed weight
    # sync would show in the rollout / trainer probability gap
    "data.train_batch_size=16", "actor_rollout_ref.actor.ppo_mini_batch_size=16",
    "actor_rollout_ref.actor.optim.lr=1e-5", "trainer.save_freq=2", "trainer.test_freq=-1",
    "trainer.val_before_train=false", f"run.checkpoint.keep_hf_steps=[{STEPS}]",
)
CHECKS = ("install", "attention", "rollout", "weight sync", "checkpoint + resume", "evaluation")


def runs(seeds=DEFAULT_SEEDS) -> list[Run]:
    return [Run(task="toolrl", model="qwen2.5-0.5b-instruct", estimator="dara_asym", cluster="one_gpu", seed=seed,
                variant="gpu_smoke", total_steps=STEPS, extra=OVERRIDES) for seed in seeds]


# ----------------------------------------------------------------------------- the checklist
@dataclass
class Checklist:
    items: dict[str, tuple[bool, str]] = field(default_factory=dict)

    def add(self, name: str, ok: bool, detail: str) -> bool:
        self.items[name] = (bool(ok), detail)
        return bool(ok)

    @property
    def ok(self) -> bool:
        return all(ok for ok, _ in self.items.values()) and set(self.items) >= set(CHECKS)

    def text(self) -> str:
        lines = []
        for name in CHECKS:
            ok, detail = self.items.get(name, (False, "not reached"))
            lines.append(f"[gpu_smoke] {name + ' ':.<22s} {'ok  ' if ok else 'FAIL'}  {detail}")
        return "\n".join(lines)

    def as_json(self) -> dict:
        return {name: {"ok": ok, "detail": detail} for name, (ok, detail) in self.items.items()}


# ----------------------------------------------------------------------------- training with a forced stop
def _records(run_dir: Path) -> list[dict]:
    from dara.run_log import read_metrics

    path = run_dir / METRICS_FILE
    return read_metrics(path) if path.exists() else []


def _steps(run_dir: Path) -> list[int]:
    return [int(r["step"]) for r in _records(run_dir)]


def train_with_forced_stop(overrides: list[str], run_dir: Path, stop_after: int = STOP_AFTER_STEP,
                           python: str = sys.executable, timeout_s: float = 3600) -> tuple[int, int, int]:
    """`dara.train` until `stop_after` is logged, a stop request, then the same command again (the resume).
    Returns (first exit code, the step the first run stopped at, second exit code)."""
    from dara.verl.stop_request import clear_stop_request, request_stop

    command = [python, "-m", "dara.train", *overrides]
    clear_stop_request(run_dir)
    first = subprocess.Popen(command, cwd=PROJECT_ROOT)
    deadline = time.monotonic() + timeout_s
    while first.poll() is None and stop_after not in _steps(run_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    if first.poll() is None:
        request_stop(run_dir, f"gpu_smoke: forced stop after step {stop_after}")
    first_code = first.wait(timeout=max(60.0, deadline - time.monotonic()))
    stopped_at = max(_steps(run_dir), default=0)
    second_code = subprocess.call(command, cwd=PROJECT_ROOT, timeout=timeout_s) if first_code == 0 else -1
    return first_code, stopped_at, second_code


def checkpoint_resume_check(run_dir: Path, steps: int, stopped_at: int, codes: tuple[int, int]) -> tuple[bool, str]:
    """The forced stop left a checkpoint at its step, the resume ran the rest, every step is logged once."""
    logged = _steps(run_dir)
    marker = run_dir / CHECKPOINTS / CHECKPOINT_TRACKER
    stop_checkpoint = run_dir / CHECKPOINTS / f"global_step_{stopped_at}"
    problems = []
    if codes != (0, 0):
        problems.append(f"exit codes {codes}")
    if not 0 < stopped_at < steps:
        problems.append(f"the first run stopped at step {stopped_at}, not before step {steps}")
    if not stop_checkpoint.is_dir():
        problems.append(f"no checkpoint of the stop's step {stopped_at}")
    if logged != list(range(1, steps + 1)):
        problems.append(f"steps logged {logged}")
    if not marker.exists() or marker.read_text().strip() != str(steps):
        problems.append("the resume marker is not the last step")
    detail = f"stopped at step {stopped_at} (checkpoint), resumed to {steps}; steps logged once: {logged}"
    return not problems, "; ".join(problems) or detail


# ----------------------------------------------------------------------------- what the steps logged
def rollout_check(records: list[dict]) -> tuple[bool, str]:
    generated = [r.get("response_length/mean", 0.0) for r in records]
    ok = bool(records) and all(g > 0 for g in generated) and all(r.get("timing_s/gen", 0) > 0 for r in records)
    return ok, f"{len(records)} steps, mean response {sum(generated) / max(len(generated), 1):.0f} tokens"


def weight_sync_check(records: list[dict]) -> tuple[bool, str]:
    """Every step synced (timing_s/update_weights) and the rollout's token probabilities stay as close to the
    trainer's as at step 1 (both from the same weights then): a missed sync would widen the gap after updates.
    The tolerance (2 x step 1 + 0.01) is a heuristic, not measured here."""
    gaps = [r.get("training/rollout_probs_diff_mean") for r in records]
    synced = all(r.get("timing_s/update_weights", 0) > 0 for r in records)
    if not records or None in gaps:
        return False, "no training/rollout_probs_diff_mean in the steps"
    limit = 2 * gaps[0] + 0.01
    ok = synced and max(gaps[1:], default=gaps[0]) <= limit
    return ok, (f"update_weights every step: {synced}; rollout / trainer probability gap "
                f"{', '.join(f'{g:.4f}' for g in gaps)} (limit {limit:.4f})")


@dataclass(frozen=True)
class Measured:
    rollout_tokens_per_s: float
    update_tokens_per_s: float
    logprob_tokens_per_s: float
    other_seconds_per_response: float
    mean_prompt: float
    mean_response: float


def measure(records: list[dict], responses: int) -> Measured:
    """Per-GPU throughput of the steps (the first skipped when there are more: it warms up)."""
    steps = records[1:] if len(records) > 1 else records

    def mean(key):
        return sum(float(r.get(key, 0.0)) for r in steps) / len(steps)

    prompt, response = mean("prompt_length/mean"), mean("response_length/mean")
    tokens = responses * (prompt + response)
    gen, update = mean("timing_s/gen"), mean("timing_s/update_actor")
    logprob = mean("timing_s/old_log_prob") + mean("timing_s/ref")
    other = max(0.0, mean("timing_s/step") - gen - update - logprob)
    return Measured(responses * response / gen, tokens / update, tokens * (2 if mean("timing_s/ref") else 1) / logprob,
                    other / responses, prompt, response)


# ----------------------------------------------------------------------------- calibration
@functools.cache
def _file_value(group: str, choice: str, key: str, default=None):
    return group_value(group, choice, key, default)  # cached: a calibration reads ~10 keys of ~150 runs


def _value(run: Run, group: str, key: str, default=None):
    from recipes.runner import _override_value

    explicit = _override_value(run.overrides(), key)
    if explicit is not None:
        return explicit
    choice = {"task": run.task, "model": run.model, "cluster": run.cluster}[group]
    return _file_value(group, choice, key, default)


def run_shape(run: Run, cluster: str):
    """A paper run's numbers (task, model, cluster files and the run's overrides; nothing composed) on `cluster`."""
    from dara.preflight.calibration import RunShape

    on = replace(run, cluster=cluster)
    truthy = {"true", "True", True}
    return RunShape(
        num_parameters=int(_value(on, "model", "run.model_facts.num_parameters")),
        gpus=int(_value(on, "cluster", "trainer.nnodes", 1)) * int(_value(on, "cluster", "trainer.n_gpus_per_node", 1)),
        responses=int(_value(on, "task", "data.train_batch_size")) * int(_value(on, "task", "actor_rollout_ref.rollout.n")),
        max_prompt=int(_value(on, "task", "data.max_prompt_length")),
        max_response=int(_value(on, "task", "data.max_response_length")),
        ppo_epochs=int(_value(on, "task", "actor_rollout_ref.actor.ppo_epochs", 1)),
        uses_reference=(_value(on, "task", "algorithm.use_kl_in_reward", False) in truthy
                        or _value(on, "task", "actor_rollout_ref.actor.use_kl_loss", False) in truthy),
        dynamic_sampling=_value(on, "task", "algorithm.filter_groups.enable", False) in truthy,
        measured_task=_value(on, "task", "run.data_source") == "rlla")


def paper_runs() -> list[Run]:
    """Every GPU run of the project's recipes (the CPU races, cluster=cpu, are not paper runs; a race whose
    runs wait for its pilot's protocol is one of them)."""
    from recipes import RECIPES, load

    runs = []
    for name in RECIPES:
        if name in ("smoke", "gpu_smoke"):
            continue
        module = load(name)
        try:
            runs += [run for run in module.runs(module.DEFAULT_SEEDS) if run.cluster != "cpu"]
        except RecipeError:
            continue
    return runs


def matching_clusters(gpu_name: str, memory_gib: float) -> list[str]:
    """Cluster files whose `run.hardware.gpu` (e.g. "H100-80GB") is this GPU: its model in the name, its memory
    within 10% of the card's."""
    found = []
    for path in sorted((CONF_DIR / "cluster").glob("*.yaml")):
        label = str(group_value("cluster", path.stem, "run.hardware.gpu", "") or "")
        model, _, size = label.partition("-")
        if model and size.upper().endswith("GB") and model.upper() in gpu_name.upper().replace(" ", ""):
            if abs(memory_gib - float(size[:-2])) <= 0.1 * float(size[:-2]):
                found.append(path.stem)
    return found


def calibrate(measured: Measured, smoke: Run, clusters: list[str]) -> dict[str, dict[str, float]]:
    """Minutes per step of every paper model on each cluster, the largest over its runs (tasks, variants)."""
    from dara.preflight.calibration import Throughput, scaled_step_minutes

    smoke_shape = run_shape(smoke, smoke.cluster)
    throughput = Throughput(smoke_shape.num_parameters, measured.rollout_tokens_per_s, measured.update_tokens_per_s,
                            measured.logprob_tokens_per_s, measured.other_seconds_per_response,
                            measured.mean_prompt / smoke_shape.max_prompt,
                            measured.mean_response / smoke_shape.max_response)
    table: dict[str, dict[str, float]] = {}
    for cluster in clusters:
        for run in paper_runs():
            minutes = round(scaled_step_minutes(throughput, run_shape(run, cluster)), 2)
            models = table.setdefault(cluster, {})
            models[run.model] = max(minutes, models.get(run.model, 0.0))
    return table


# ----------------------------------------------------------------------------- the GPU (nvidia-smi)
def _smi(*query: str) -> list[str]:
    import os

    device = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(query)}", "--format=csv,noheader,nounits",
                          "-i", device], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RecipeError(f"nvidia-smi failed: {out.stderr.strip() or out.stdout.strip()}")
    return [part.strip() for part in out.stdout.splitlines()[0].split(",")]


class MemorySampler:
    """GPU memory used by every process (nvidia-smi every 0.5 s) while training runs, into memory.csv."""

    def __init__(self, path: Path):
        self.path, self.samples, self._stop = path, [], threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self._stop.wait(0.5):
            try:
                self.samples.append((time.time(), float(_smi("memory.used")[0])))
            except (RecipeError, OSError, subprocess.TimeoutExpired, ValueError):
                continue

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=10)
        self.path.write_text("unix_time,memory_used_mib\n" + "".join(f"{t:.1f},{m:.0f}\n" for t, m in self.samples))

    @property
    def peak_gib(self) -> float:
        return max((m for _, m in self.samples), default=0.0) / 1024


# ----------------------------------------------------------------------------- evaluation
def eval_commands(hf_dir: Path, out: Path, python: str = sys.executable) -> dict[str, list[str]]:
    """The real evaluation path (results.evaluation, vLLM backend) on 20 BFCL cases and 20 math questions."""
    common = ["--model", str(hf_dir), "--device", "cuda", "--limit", str(EVAL_CASES), "--boot", "200"]
    return {
        "bfcl": [python, "-m", "results.evaluation", "bfcl", "all", "--out", str(out / "bfcl"),
                 "--categories", "simple_python", "--max-new-tokens", "2048", *common],
        "math": [python, "-m", "results.evaluation", "math", "all", "--out", str(out / "math"), "--data",
                 MATH_DATA, "--samples", "1", "--max-new-tokens", "4096", *common],
    }


def evaluation_check(out: Path, codes: dict[str, int]) -> tuple[bool, str]:
    parts, ok = [], True
    for bench, code in codes.items():
        summary = out / bench / "summary.json"
        scored = out / bench / "scores.jsonl"
        cases = len(scored.read_text().splitlines()) if scored.exists() else 0
        missing = json.loads(summary.read_text()).get("missing_cases") if summary.exists() else None
        good = code == 0 and missing == 0 and cases == EVAL_CASES
        ok &= good
        parts.append(f"{bench} {cases}/{EVAL_CASES} cases scored (exit {code})")
    return ok, "; ".join(parts) + f" in {out}"


# ----------------------------------------------------------------------------- the run
def attention_for(env) -> str:
    return "flash_attention_2" if env.flash_attn is None else "sdpa"


# what an SDPA fallback means for the paper runs (their cluster files plan flash_attention_2; dara.preflight.memory)
NO_PAPER_RUN = ("no paper run can start on sdpa: their memory plans do not fit their clusters' token budgets per GPU "
                "(python -m recipes toolrl_main --preflight --skip-env --set run.attention=sdpa names the budgets "
                f"that do); build flash-attn first: {FLASH_ATTN_BUILD} (40-90 min at MAX_JOBS=32, about 9 GB of RAM "
                "per job), then rerun this smoke")


def attention_check(attention: str, records: list[dict]) -> tuple[bool, str]:
    """ok when the steps trained with flash_attention_2; the SDPA fallback fails the check (the rest of the GPU
    path is still checked with it)."""
    if attention == "sdpa":
        return False, f"sdpa (no flash_attn), {len(records)} steps trained with it; {NO_PAPER_RUN}"
    return bool(records), f"{attention} (flash_attn imports), {len(records)} steps trained with it"


def install_check(env, gpu_name: str | None, memory_gib: float | None) -> tuple[bool, str]:
    from dara.preflight.environment import describe, problems

    found = problems(env, attention=attention_for(env))
    if gpu_name is None:
        found.append("no GPU visible (nvidia-smi)")
    elif memory_gib < MIN_GPU_GIB - 0.5:
        found.append(f"{gpu_name} has {memory_gib:.1f} GiB, the smoke needs {MIN_GPU_GIB:g}")
    return not found, "; ".join(found) or f"{describe(env)}; {gpu_name}, {memory_gib:.1f} GiB"


def memory_lines(overrides: list[str], memory_gib: float, sampler: MemorySampler, records: list[dict]) -> list[str]:
    """Measured GPU memory next to the preflight's plan of the same config on this card."""
    from omegaconf import open_dict

    from dara.preflight import compose, model_facts
    from dara.preflight.memory import GIB, MemoryPlan, plan

    cfg = compose(overrides)
    with open_dict(cfg):
        cfg.run.hardware.gpu_memory_gib = memory_gib
    result = plan(cfg, model_facts(cfg))
    lines = [f"[gpu_smoke] memory plan (preflight, {memory_gib:.1f} GiB card, {result.attention}) vs measured:"]
    for phase, terms in result.phases():
        lines.append(f"[gpu_smoke]   plan {phase:38s} {MemoryPlan.total(terms) / GIB:6.1f} GiB")
    trainer = max((float(r.get("actor/perf/max_memory_reserved_gb", 0.0)) for r in records), default=0.0)
    lines.append(f"[gpu_smoke]   measured peak, all processes (nvidia-smi)  {sampler.peak_gib:6.1f} GiB "
                 f"(plan: the largest phase, {max(MemoryPlan.total(t) for _, t in result.phases()) / GIB:.1f})")
    lines.append(f"[gpu_smoke]   measured trainer torch peak (training)    {trainer:6.1f} GiB "
                 f"(actor/perf/max_memory_reserved_gb)")
    return lines


def throughput_lines(measured: Measured) -> list[str]:
    return [f"[gpu_smoke] throughput per GPU: rollout {measured.rollout_tokens_per_s:.0f} generated tokens/s, "
            f"update {measured.update_tokens_per_s:.0f} tokens/s, log-probs {measured.logprob_tokens_per_s:.0f} "
            f"tokens/s, the rest {measured.other_seconds_per_response * 1000:.0f} ms/response; mean prompt "
            f"{measured.mean_prompt:.0f}, response {measured.mean_response:.0f} tokens"]


def run_locally(runs: list[Run], args) -> int:
    """The smoke on this node's first GPU (see the module docstring); exit 0 when every check is ok."""
    from dara.preflight.environment import probe_environment

    run = runs[0]
    if run.output_dir.exists():  # a smoke starts from nothing: an earlier smoke's folder would be resumed
        print(f"[gpu_smoke] removing the previous smoke run {run.output_dir}", flush=True)
        shutil.rmtree(run.output_dir)
    out = run.output_dir / "gpu_smoke"
    out.mkdir(parents=True, exist_ok=True)
    checks, env = Checklist(), probe_environment()
    try:
        gpu_name, total_mib = _smi("name", "memory.total")
        memory_gib = float(total_mib) / 1024
    except (RecipeError, OSError, subprocess.TimeoutExpired):
        gpu_name, memory_gib = None, None
    if checks.add("install", *install_check(env, gpu_name, memory_gib)):
        overrides = [*run.overrides(), f"run.attention={attention_for(env)}"]
        with MemorySampler(out / "memory.csv") as sampler:
            records = train_and_check(run, overrides, checks, args)
        if records:
            report_and_calibrate(run, overrides, records, gpu_name, memory_gib, sampler, out, args)
    print(checks.text(), flush=True)
    (out / "checklist.json").write_text(json.dumps(checks.as_json(), indent=1) + "\n")
    print(f"[gpu_smoke] {'all checks ok' if checks.ok else 'FAILED'}; files in {out}", flush=True)
    return 0 if checks.ok else 1


def train_and_check(run: Run, overrides: list[str], checks: Checklist, args) -> list[dict]:
    """Steps 1-3 with the forced stop, the resume to step 4, the evaluation; the checks of each. The steps' records."""
    first, stopped_at, second = train_with_forced_stop(overrides, run.output_dir, python=args.python_exe)
    records = _records(run.output_dir)
    checks.add("attention", *attention_check(overrides[-1].split("=", 1)[1], records))
    checks.add("rollout", *rollout_check(records))
    checks.add("weight sync", *weight_sync_check(records))
    if checks.add("checkpoint + resume", *checkpoint_resume_check(run.output_dir, STEPS, stopped_at, (first, second))):
        out = run.output_dir / "gpu_smoke" / "eval"
        hf_dir = run.output_dir / HF_KEPT / f"global_step_{STEPS}"
        codes = {bench: subprocess.call(command, cwd=PROJECT_ROOT)
                 for bench, command in eval_commands(hf_dir, out, args.python_exe).items()}
        checks.add("evaluation", *evaluation_check(out, codes))
    return records


def report_and_calibrate(run, overrides, records, gpu_name, memory_gib, sampler, out: Path, args) -> None:
    from dara.preflight.calibration import DYNAMIC_SAMPLING_DRAWS, write_calibration

    shape = run_shape(run, run.cluster)
    try:
        measured = measure(records, shape.responses)
    except ZeroDivisionError:
        print("[gpu_smoke] the steps logged no generation / update / log-prob timing: no throughput, no calibration")
        return
    print("\n".join(memory_lines(overrides, memory_gib, sampler, records) + throughput_lines(measured)), flush=True)
    clusters = [args.calibrate_for] if args.calibrate_for else matching_clusters(gpu_name, memory_gib)
    if not clusters:
        print(f"[gpu_smoke] no cluster file has this GPU ({gpu_name}, {memory_gib:.0f} GiB): no calibration written "
              "(--calibrate-for CLUSTER names one)", flush=True)
        return
    table = calibrate(measured, run, clusters)
    path = write_calibration(out / f"calibration-{gpu_name.replace(' ', '_')}.json", gpu=gpu_name,
                             measured_at=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), step_minutes=table,
                             measured={**asdict(measured), "num_parameters": shape.num_parameters,
                                       "responses_per_step": shape.responses, "steps": len(records)},
                             derivation=("dara.preflight.calibration.scaled_step_minutes: throughput x (measured "
                                         "params / run params), max lengths x measured fills on the tool-calling "
                                         f"task (1.0 elsewhere), {DYNAMIC_SAMPLING_DRAWS} draws per kept group under "
                                         "dynamic sampling; the largest over each model's runs"))
    for cluster, models in table.items():
        print(f"[gpu_smoke] calibrated minutes per step on {cluster}: "
              + ", ".join(f"{m} {v:g}" for m, v in sorted(models.items())), flush=True)
    print(f"[gpu_smoke] calibration: {path}\n[gpu_smoke] use it: python -m recipes math_main --preflight "
          f"--calibration {path}", flush=True)


def describe_plan(runs: list[Run], python: str = "python") -> str:
    """The dry run: what the smoke would run, in order."""
    run = runs[0]
    command = shlex.join([python, "-m", "dara.train", *run.overrides(), "run.attention=<flash_attention_2|sdpa>"])
    evals = eval_commands(run.root / run.name / HF_KEPT / f"global_step_{STEPS}",
                          run.output_dir / "gpu_smoke" / "eval", python)
    return "\n".join([
        f"[gpu_smoke] 1. install: environment check of this node, one GPU of >= {MIN_GPU_GIB:g} GiB (nvidia-smi)",
        f"[gpu_smoke] 2. {command}",
        f"[gpu_smoke]    stop request once step {STOP_AFTER_STEP} is logged: checkpoint at step {STOP_AFTER_STEP + 1}",
        f"[gpu_smoke] 3. the same command again: resumes to step {STEPS}",
        f"[gpu_smoke] 4. {shlex.join(evals['bfcl'])}",
        f"[gpu_smoke]    {shlex.join(evals['math'])}",
        f"[gpu_smoke] 5. checklist, memory vs plan, throughput, calibration in {run.output_dir / 'gpu_smoke'}",
    ])


def submit(runs: list[Run], options, dry_run: bool = False, extra_args: tuple[str, ...] = ()) -> str | None:
    """sbatch scripts/slurm/gpu_smoke.sbatch: one node, one GPU, the cluster file's time."""
    from recipes.runner import job_time, submit_sbatch

    run = runs[0]
    command = ["sbatch", "--parsable", "--nodes=1", "--gpus-per-node=1", f"--time={job_time(run, options.time)}",
               f"--chdir={PROJECT_ROOT}", f"--output={run.output_dir}/logs/slurm-gpu_smoke-%j.out"]
    command += [f"{flag}={value}" for flag, value in (("--partition", options.partition),
                                                      ("--account", options.account)) if value]
    command += [*options.extra_args, str(PROJECT_ROOT / "scripts" / "slurm" / "gpu_smoke.sbatch"), *extra_args]
    print("[recipes] " + shlex.join(command), flush=True)
    if dry_run:
        return None
    (run.output_dir / "logs").mkdir(parents=True, exist_ok=True)
    job = submit_sbatch(command)
    print(f"[recipes] submitted gpu_smoke job {job}; its output: {run.output_dir}/logs/slurm-gpu_smoke-{job}.out")
    return job
