"""`python -m recipes gpu_smoke`: the first GPU run of a cluster, on the GPU node itself (docs/experiments.md,
"First GPU run"; the steps: `describe_plan`). Writes a checklist, memory against the preflight's plan, the throughput
and a calibration file (minutes per step of every paper run on this GPU's cluster files) to `<run folder>/gpu_smoke/`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from dara.config import CONF_DIR
from dara.preflight.environment import FLASH_ATTN_BUILD
from dara.run_folder import CHECKPOINT_TRACKER, CHECKPOINTS, HF_KEPT, METRICS_FILE
from recipes.runner import PROJECT_ROOT, RecipeError, Run, group_value, override_value

DESCRIPTION = ("GPU smoke: one GPU >= 24 GiB, Qwen2.5-0.5B on ToolRL with vLLM, forced stop + resume, "
               "BFCL + math evaluation; checklist and calibration file")
DEFAULT_SEEDS = (0,)
LOCAL_ONLY = "gpu_smoke runs on the GPU node itself: srun --gpus-per-node=1 python -m recipes gpu_smoke"
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


def checklist(checks: dict[str, tuple[bool, str]]) -> tuple[bool, str]:
    found = [(name, *checks.get(name, (False, "not reached"))) for name in CHECKS]
    return all(ok for _, ok, _ in found), "\n".join(
        f"[gpu_smoke] {name + ' ':.<22s} {'ok  ' if ok else 'FAIL'}  {detail}" for name, ok, detail in found)


def _records(run_dir: Path) -> list[dict]:
    from dara.run_log import read_metrics
    path = run_dir / METRICS_FILE
    return read_metrics(path) if path.exists() else []


def _steps(run_dir: Path) -> list[int]:
    return [int(r["step"]) for r in _records(run_dir)]


def train_with_forced_stop(overrides: list[str], run_dir: Path, stop_after: int = STOP_AFTER_STEP,
                           python: str = sys.executable, timeout_s: float = 3600) -> tuple[int, int, int]:
    """`dara.train` until `stop_after` is logged, a stop request, then the resume: (exit code, step stopped at,
    resume's exit code)."""
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
    logged, marker = _steps(run_dir), run_dir / CHECKPOINTS / CHECKPOINT_TRACKER
    problems = [text for failed, text in (
        (codes != (0, 0), f"exit codes {codes}"),
        (not 0 < stopped_at < steps, f"the first run stopped at step {stopped_at}, not before step {steps}"),
        (not (run_dir / CHECKPOINTS / f"global_step_{stopped_at}").is_dir(),
         f"no checkpoint of the stop's step {stopped_at}"),
        (logged != list(range(1, steps + 1)), f"steps logged {logged}"),
        (not marker.exists() or marker.read_text().strip() != str(steps), "the resume marker is not the last step"),
    ) if failed]
    return not problems, "; ".join(problems) or (f"stopped at step {stopped_at} (checkpoint), resumed to {steps}; "
                                                 f"steps logged once: {logged}")


def rollout_check(records: list[dict]) -> tuple[bool, str]:
    generated = [r.get("response_length/mean", 0.0) for r in records]
    ok = bool(records) and all(g > 0 for g in generated) and all(r.get("timing_s/gen", 0) > 0 for r in records)
    return ok, f"{len(records)} steps, mean response {sum(generated) / max(len(generated), 1):.0f} tokens"


def weight_sync_check(records: list[dict]) -> tuple[bool, str]:
    """Every step synced and the rollout / trainer probability gap stays within 2 x step 1's + 0.01 (a heuristic):
    a missed sync would widen it after updates."""
    gaps = [r.get("training/rollout_probs_diff_mean") for r in records]
    synced = all(r.get("timing_s/update_weights", 0) > 0 for r in records)
    if not records or None in gaps:
        return False, "no training/rollout_probs_diff_mean in the steps"
    limit = 2 * gaps[0] + 0.01
    return synced and max(gaps[1:], default=gaps[0]) <= limit, (
        f"update_weights every step: {synced}; rollout / trainer probability gap "
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
    """Per-GPU throughput of the steps (the first, a warm-up, skipped when there are more)."""
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


_file_value = functools.cache(group_value)  # a calibration reads ~10 keys of ~150 runs


def run_shape(run: Run, cluster: str):
    """A paper run's numbers on `cluster`, from its group files and overrides (nothing composed)."""
    from dara.preflight.calibration import RunShape
    on = replace(run, cluster=cluster)

    def value(group, key, default=None):
        explicit = override_value(on.overrides(), key)
        return explicit if explicit is not None else _file_value(group, getattr(on, group), key, default)

    def flag(key):
        return value("task", key, False) in ("true", "True", True)
    return RunShape(
        num_parameters=int(value("model", "run.model_facts.num_parameters")),
        gpus=int(value("cluster", "trainer.nnodes", 1)) * int(value("cluster", "trainer.n_gpus_per_node", 1)),
        responses=int(value("task", "data.train_batch_size")) * int(value("task", "actor_rollout_ref.rollout.n")),
        max_prompt=int(value("task", "data.max_prompt_length")),
        max_response=int(value("task", "data.max_response_length")),
        ppo_epochs=int(value("task", "actor_rollout_ref.actor.ppo_epochs", 1)),
        uses_reference=flag("algorithm.use_kl_in_reward") or flag("actor_rollout_ref.actor.use_kl_loss"),
        dynamic_sampling=flag("algorithm.filter_groups.enable"),
        measured_task=value("task", "run.data_source") == "rlla")


def paper_runs() -> list[Run]:
    from recipes import RECIPES, load
    return [run for name in RECIPES if name not in ("smoke", "gpu_smoke")
            for run in load(name).runs(load(name).DEFAULT_SEEDS) if run.cluster != "cpu"]


def matching_clusters(gpu_name: str, memory_gib: float) -> list[str]:
    """Cluster files whose `run.hardware.gpu` (e.g. "H100-80GB") names this GPU's model, memory within 10%."""
    found = []
    for path in sorted((CONF_DIR / "cluster").glob("*.yaml")):
        model, _, size = str(group_value("cluster", path.stem, "run.hardware.gpu", "") or "").partition("-")
        if model and size.upper().endswith("GB") and model.upper() in gpu_name.upper().replace(" ", ""):
            if abs(memory_gib - float(size[:-2])) <= 0.1 * float(size[:-2]):
                found.append(path.stem)
    return found


def calibrate(measured: Measured, smoke: Run, clusters: list[str]) -> dict[str, dict[str, float]]:
    """Minutes per step of every paper model on each cluster, the largest over its runs."""
    from dara.preflight.calibration import Throughput, scaled_step_minutes
    shape = run_shape(smoke, smoke.cluster)
    throughput = Throughput(shape.num_parameters, measured.rollout_tokens_per_s, measured.update_tokens_per_s,
                            measured.logprob_tokens_per_s, measured.other_seconds_per_response,
                            measured.mean_prompt / shape.max_prompt, measured.mean_response / shape.max_response)
    table: dict[str, dict[str, float]] = {}
    for cluster in clusters:
        models = table.setdefault(cluster, {})
        for run in paper_runs():
            minutes = round(scaled_step_minutes(throughput, run_shape(run, cluster)), 2)
            models[run.model] = max(minutes, models.get(run.model, 0.0))
    return table


def _smi(*query: str) -> list[str]:
    device = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(query)}", "--format=csv,noheader,nounits",
                          "-i", device], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RecipeError(f"nvidia-smi failed: {out.stderr.strip() or out.stdout.strip()}")
    return [part.strip() for part in out.stdout.splitlines()[0].split(",")]


@contextlib.contextmanager
def sampled_memory(path: Path):
    """GPU memory used (nvidia-smi every 0.5 s) while the block runs, into memory.csv; yields (unix time, MiB)."""
    samples, stop = [], threading.Event()

    def sample():
        while not stop.wait(0.5):
            with contextlib.suppress(RecipeError, OSError, subprocess.TimeoutExpired, ValueError):
                samples.append((time.time(), float(_smi("memory.used")[0])))
    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join(timeout=10)
        path.write_text("unix_time,memory_used_mib\n" + "".join(f"{t:.1f},{m:.0f}\n" for t, m in samples))


def eval_commands(hf_dir: Path, out: Path, python: str = sys.executable) -> dict[str, list[str]]:
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
        summary, scored = out / bench / "summary.json", out / bench / "scores.jsonl"
        cases = len(scored.read_text().splitlines()) if scored.exists() else 0
        missing = json.loads(summary.read_text()).get("missing_cases") if summary.exists() else None
        ok &= code == 0 and missing == 0 and cases == EVAL_CASES
        parts.append(f"{bench} {cases}/{EVAL_CASES} cases scored (exit {code})")
    return ok, "; ".join(parts) + f" in {out}"


def attention_for(env) -> str:
    return "flash_attention_2" if env.flash_attn is None else "sdpa"


NO_PAPER_RUN = ("no paper run can start on sdpa: their memory plans do not fit their clusters' token budgets per GPU "
                "(python -m recipes toolrl_main --preflight --skip-env --set run.attention=sdpa names the budgets "
                f"that do); build flash-attn first: {FLASH_ATTN_BUILD} (40-90 min at MAX_JOBS=32, about 9 GB of RAM "
                "per job), then rerun this smoke")


def attention_check(attention: str, records: list[dict]) -> tuple[bool, str]:
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


def memory_lines(overrides: list[str], memory_gib: float, samples: list, records: list[dict]) -> list[str]:
    from omegaconf import open_dict

    from dara.preflight import compose, model_facts
    from dara.preflight.memory import GIB, MemoryPlan, plan
    cfg = compose(overrides)
    with open_dict(cfg):
        cfg.run.hardware.gpu_memory_gib = memory_gib
    result = plan(cfg, model_facts(cfg))
    totals = [(phase, MemoryPlan.total(terms) / GIB) for phase, terms in result.phases()]
    trainer = max((float(r.get("actor/perf/max_memory_reserved_gb", 0.0)) for r in records), default=0.0)
    return [f"[gpu_smoke] memory plan (preflight, {memory_gib:.1f} GiB card, {result.attention}) vs measured:",
            *(f"[gpu_smoke]   plan {phase:38s} {gib:6.1f} GiB" for phase, gib in totals),
            f"[gpu_smoke]   measured peak, all processes (nvidia-smi)  {max((m for _, m in samples), default=0.0) / 1024:6.1f} GiB "
            f"(plan: the largest phase, {max(gib for _, gib in totals):.1f})",
            f"[gpu_smoke]   measured trainer torch peak (training)    {trainer:6.1f} GiB "
            "(actor/perf/max_memory_reserved_gb)"]


def run_locally(runs: list[Run], args) -> int:
    from dara.preflight.environment import probe_environment
    run = runs[0]
    if run.output_dir.exists():  # a smoke starts from nothing: an earlier smoke's folder would be resumed
        print(f"[gpu_smoke] removing the previous smoke run {run.output_dir}", flush=True)
        shutil.rmtree(run.output_dir)
    out = run.output_dir / "gpu_smoke"
    out.mkdir(parents=True, exist_ok=True)
    checks, env = {}, probe_environment()
    try:
        gpu_name, total_mib = _smi("name", "memory.total")
        memory_gib = float(total_mib) / 1024
    except (RecipeError, OSError, subprocess.TimeoutExpired):
        gpu_name, memory_gib = None, None
    checks["install"] = install_check(env, gpu_name, memory_gib)
    if checks["install"][0]:
        overrides = [*run.overrides(), f"run.attention={attention_for(env)}"]
        with sampled_memory(out / "memory.csv") as samples:
            records = train_and_check(run, overrides, checks, args)
        if records:
            report_and_calibrate(run, overrides, records, gpu_name, memory_gib, samples, out, args)
    ok, text = checklist(checks)
    (out / "checklist.json").write_text(json.dumps({n: {"ok": o, "detail": d} for n, (o, d) in checks.items()},
                                                   indent=1) + "\n")
    print(f"{text}\n[gpu_smoke] {'all checks ok' if ok else 'FAILED'}; files in {out}", flush=True)
    return 0 if ok else 1


def train_and_check(run: Run, overrides: list[str], checks: dict, args) -> list[dict]:
    first, stopped_at, second = train_with_forced_stop(overrides, run.output_dir, python=args.python_exe)
    records = _records(run.output_dir)
    checks["attention"] = attention_check(overrides[-1].split("=", 1)[1], records)
    checks["rollout"] = rollout_check(records)
    checks["weight sync"] = weight_sync_check(records)
    checks["checkpoint + resume"] = checkpoint_resume_check(run.output_dir, STEPS, stopped_at, (first, second))
    if checks["checkpoint + resume"][0]:
        out, hf_dir = run.output_dir / "gpu_smoke" / "eval", run.output_dir / HF_KEPT / f"global_step_{STEPS}"
        codes = {bench: subprocess.call(command, cwd=PROJECT_ROOT)
                 for bench, command in eval_commands(hf_dir, out, args.python_exe).items()}
        checks["evaluation"] = evaluation_check(out, codes)
    return records


def report_and_calibrate(run, overrides, records, gpu_name, memory_gib, samples, out: Path, args) -> None:
    from dara.preflight.calibration import DYNAMIC_SAMPLING_DRAWS, write_calibration
    shape = run_shape(run, run.cluster)
    try:
        m = measure(records, shape.responses)
    except ZeroDivisionError:
        print("[gpu_smoke] the steps logged no generation / update / log-prob timing: no throughput, no calibration")
        return
    print("\n".join(memory_lines(overrides, memory_gib, samples, records)), flush=True)
    print(f"[gpu_smoke] throughput per GPU: rollout {m.rollout_tokens_per_s:.0f} generated tokens/s, update "
          f"{m.update_tokens_per_s:.0f} tokens/s, log-probs {m.logprob_tokens_per_s:.0f} tokens/s, the rest "
          f"{m.other_seconds_per_response * 1000:.0f} ms/response; mean prompt {m.mean_prompt:.0f}, response "
          f"{m.mean_response:.0f} tokens", flush=True)
    clusters = [args.calibrate_for] if args.calibrate_for else matching_clusters(gpu_name, memory_gib)
    if not clusters:
        print(f"[gpu_smoke] no cluster file has this GPU ({gpu_name}, {memory_gib:.0f} GiB): no calibration written "
              "(--calibrate-for CLUSTER names one)", flush=True)
        return
    table = calibrate(m, run, clusters)
    path = write_calibration(out / f"calibration-{gpu_name.replace(' ', '_')}.json", gpu=gpu_name,
                             measured_at=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), step_minutes=table,
                             measured={**asdict(m), "num_parameters": shape.num_parameters,
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


def describe_plan(runs: list[Run]) -> str:
    run = runs[0]
    evals = eval_commands(run.output_dir / HF_KEPT / f"global_step_{STEPS}", run.output_dir / "gpu_smoke" / "eval")
    return "\n".join(f"[gpu_smoke] {line}" for line in (
        f"1. install: environment check of this node, one GPU of >= {MIN_GPU_GIB:g} GiB (nvidia-smi)",
        f"2. the training command above with run.attention=<flash_attention_2|sdpa>; a stop request once step "
        f"{STOP_AFTER_STEP} is logged: checkpoint at step {STOP_AFTER_STEP + 1}",
        f"3. the same command again: resumes to step {STEPS}",
        *(f"4. {shlex.join(command)}" for command in evals.values()),
        f"5. checklist, memory vs plan, throughput, calibration in {run.output_dir / 'gpu_smoke'}"))
