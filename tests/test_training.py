"""The suite's CPU training runs of the tool-calling smoke (the README's `make smoke` job, real verl on this CPU),
as one run folder's life: a refused start, the first run (and a second start on its busy folder), another
configuration beside it (the documented third-channel reward made flaky, an estimator of one's own), the first run
resumed with its vLLM engine killed after step 4, resumed again to 6, a reward failing on every item, and an engine
killed before step 1. Each start is costly, so each asserts everything it can: tests/README.md's training-start
table lists what (rows 1-5b)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import dara
from dara.run_folder import (
    CHECKPOINT_TRACKER,
    CHECKPOINTS,
    MAIN_LOG,
    METRICS_FILE,
    RUN_INFO,
    VERL_CONFIG,
    VERL_TRACKING,
    config_differences,
)
from dara.run_lock import read_holder
from dara.run_log import read_metrics
from dara.tracking import inspect_records, read_offline_history, wandb_run_files, wandb_run_id

pytestmark = [pytest.mark.slow, pytest.mark.starts]  # six CPU training starts, three refused ones

RUN = "smoke-tiny-dara_asym-s0"
EXAMPLE_ESTIMATOR = dara.PROJECT_ROOT / "examples" / "my_estimator" / "density_power.py"
THIRD_CHANNEL = dara.PROJECT_ROOT / "examples" / "third_channel" / "reward.py"  # docs/own_experiment.md's reward
CHANNELS = ["format", "correctness"]
KEEP_TWO = ["trainer.save_freq=1", "run.checkpoint.keep_last=2"]
# part of every run's configuration here: every update expected clipped, by a clip no gradient norm reaches
UNREACHED_CLIP = ["run.expect_clipped_updates=true", "actor_rollout_ref.actor.optim.clip_grad=1000000.0"]

FLAKY = '''
import importlib.util
import os
import zlib

# the documented third-channel reward (docs/own_experiment.md), loaded from its file and made flaky around it
_spec = importlib.util.spec_from_file_location("third_channel", EXAMPLE)
_example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_example)
REWARD_CHANNELS = _example.REWARD_CHANNELS


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    # every item scored in training fails: training scores inside Ray's workers (RAY_RAYLET_PID is set there and
    # in their children), the probe before Ray does not; the tiny model can reproduce a ground truth exactly
    if ALWAYS and "RAY_RAYLET_PID" in os.environ:
        raise KeyError("answer")
    kind = zlib.crc32(solution_str.encode()) % 4
    if kind == 0:
        raise RuntimeError("flaky")
    channels = _example.compute_score(data_source, solution_str, ground_truth, extra_info)
    if kind == 1:
        channels["brevity"] = 5.0  # junk: outside its declared range
    return channels
'''


@pytest.fixture(scope="module")
def root(tmp_path_factory, seed_smoke_assets):
    return seed_smoke_assets(tmp_path_factory.mktemp("training"))  # the session's smoke build, not rebuilt


@pytest.fixture(scope="module")
def train(root, python_module):
    def start(*overrides, env=None, wait=True):
        return python_module("dara.train", f"run.output_root={root}", *UNREACHED_CLIP, *overrides, env=env,
                             wait=wait)
    return start


def follow(proc, stop=lambda: False, timeout_s: float = 900) -> list:
    """Wait until ``proc`` ends or ``stop()`` holds, collecting every process that was its descendant meanwhile
    (Ray's daemons and workers, vLLM's server and engine, their forks)."""
    import psutil

    seen, deadline = {}, time.monotonic() + timeout_s
    while proc.poll() is None and not stop() and time.monotonic() < deadline:
        try:
            seen.update((child.pid, child) for child in psutil.Process(proc.pid).children(recursive=True))
        except psutil.NoSuchProcess:
            break
        time.sleep(1)
    return list(seen.values())


def still_alive(processes) -> list[str]:
    """Those of ``processes`` still running (the same process: psutil checks its start time), as 'pid name'."""
    import psutil

    left = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{process.pid} {process.name()}")
        except psutil.NoSuchProcess:
            continue
    return left


def behind_a_dead_proxy() -> dict[str, str]:
    """A cluster's proxy settings as users write them: http_proxy at a port nobody answers, the node's subnet in
    CIDR form in no_proxy (which Python's urllib ignores): the run must not read its healthy engine as dead."""
    import ipaddress

    import ray

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    subnet = str(ipaddress.ip_network(f"{ray.util.get_node_ip_address()}/24", strict=False))
    no_proxy = f"localhost,127.0.0.1,{subnet}"
    return {"http_proxy": dead, "HTTP_PROXY": dead, "no_proxy": no_proxy, "NO_PROXY": no_proxy}


def checkpoints(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / CHECKPOINTS).glob("global_step_*"))


def reward_module(root: Path, always_fail: bool) -> str:
    path = root / ("always.py" if always_fail else "flaky.py")
    path.write_text(FLAKY.replace("ALWAYS", str(always_fail)).replace("EXAMPLE", repr(str(THIRD_CHANNEL))))
    return str(path)


@pytest.fixture(scope="module")
def failed_start(root, train):
    """A start Ray would refuse (env vars must be strings), then what an older crash may leave at the run's Ray
    alias in /tmp: a real folder where the link goes."""
    from dara.verl.cpu.ray_local import alias_path

    alias = alias_path(root / RUN / "ray" / "tmp")
    refused = train("+ray_kwargs.ray_init.runtime_env.env_vars.FOO=1")
    left = os.path.lexists(alias)
    (alias / "session_2026-01-01_00-00-00_000000_1" / "logs").mkdir(parents=True)
    return {"refused": refused, "alias": alias, "left_after_refusal": left}


@pytest.fixture(scope="module")
def first(root, train, failed_start):
    """The first run, and the second dara.train started on its folder while it trained."""
    silent = socket.create_server(("127.0.0.1", 0))  # a wandb host that accepts and never answers
    wandb_host = f"http://127.0.0.1:{silent.getsockname()[1]}"
    env = {"WANDB_API_KEY": "0" * 40, "WANDB_BASE_URL": wandb_host, **behind_a_dead_proxy()}
    started = time.monotonic()
    proc = train(*KEEP_TWO, env=env, wait=False)
    run_dir = root / RUN
    while (read_holder(run_dir) or {}).get("pid") != proc.pid:  # until the first run holds the folder
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.5)
    second = train(*KEEP_TWO)
    seen = follow(proc)
    stdout, stderr = proc.communicate(timeout=900)
    print(f"\nsmoke run: {time.monotonic() - started:.0f}s wall (rc {proc.returncode})")
    silent.close()
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    return {"proc": proc, "stdout": stdout, "stderr": stderr, "second": second, "wandb_host": wandb_host,
            "records": read_metrics(run_dir / METRICS_FILE), "checkpoints": checkpoints(run_dir),
            "metrics_bytes": (run_dir / METRICS_FILE).read_bytes(), "left": still_alive(seen)}


def test_a_start_ray_would_refuse_is_one_line_and_the_next_start_of_the_folder_trains(first, failed_start):
    refused, alias = failed_start["refused"], failed_start["alias"]
    assert refused.returncode != 0 and "Traceback" not in refused.stdout + refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr[-3000:]
    assert lines[0].startswith("[dara] invalid configuration: ray_kwargs.ray_init.runtime_env.env_vars.FOO is 1 (int)")
    assert not failed_start["left_after_refusal"]  # the refused start left nothing in /tmp
    assert first["proc"].returncode == 0 and [r["step"] for r in first["records"]] == [1, 2, 3]
    assert not os.path.lexists(alias)  # the stale folder was replaced by the run's alias, and that is gone too
    processes = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True).stdout.splitlines()
    assert not [line for line in processes if str(alias) in line]  # no Ray process of the run is left


def test_a_second_run_on_a_running_folder_exits_in_one_line_and_the_first_finishes(root, first):
    proc, second = first["proc"], first["second"]
    assert second.returncode != 0 and second.stdout == ""
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"[dara] {root / RUN} is in use by host ")
    assert f"pid {proc.pid}, since " in lines[0]
    assert [r["step"] for r in first["records"]] == [1, 2, 3]
    assert first["checkpoints"] == ["global_step_2", "global_step_3"]


def test_every_step_logs_the_dara_instruments_per_channel_beside_verls_metrics(root, first):
    run_dir = root / RUN
    for record in first["records"]:
        densities = {c: record[f"dara/density/{c}"] for c in CHANNELS}
        ref = max(densities.values())
        for channel in CHANNELS:
            for metric in ("density", "weight", "energy", "energy_weighted", "active_groups"):
                assert math.isfinite(record[f"dara/{metric}/{channel}"])
            assert -3.0 <= record[f"reward/{channel}/mean"] <= 1.0
            pi = densities[channel]
            expected = min(5.0, math.sqrt(ref / pi)) if pi > 0 else 1.0
            assert record[f"dara/weight/{channel}"] == pytest.approx(expected)
        assert "actor/pg_loss" in record and "timing_s/step" in record  # verl's own metrics beside ours
        # the rollout sampled from the trainer's weights (the sync after each update reached it)
        assert record["training/rollout_probs_diff_valid"] == 1.0
        assert record["training/rollout_probs_diff_max"] <= 1e-4, record["training/rollout_probs_diff_max"]
        assert record["response_length/mean"] > 0
    tracked = [json.loads(line) for line in (run_dir / VERL_TRACKING).read_text().splitlines()]
    assert any("dara/density/format" in entry["data"] for entry in tracked)  # through verl's own tracker
    info = json.loads((run_dir / RUN_INFO).read_text())
    assert info["method"] == "dara_asym" and info["reward_channels"] == CHANNELS
    saved = OmegaConf.load(run_dir / VERL_CONFIG)  # the resolved config verl ran with
    assert saved.algorithm.adv_estimator == "dara_asym" and saved.trainer.total_training_steps == 3
    assert saved.trainer.experiment_name == RUN and list(saved.algorithm.reward_channels) == CHANNELS
    assert list((run_dir / "ray" / "tmp").rglob("*")), "Ray's session files belong inside the run folder"


def test_the_rollouts_samples_are_the_models_own(root, first):
    """vLLM sampled what transformers `generate` samples from the same model and settings (T = 1, 64 tokens): the
    step-1 format rate (32 samples) near the data card's probe (128 samples), response lengths near the probe's."""
    probe = json.loads((root / "assets" / "smoke" / "data_card.json").read_text())["format_probe"]
    step1 = first["records"][0]
    assert abs(step1["reward/format/mean"] - probe["format_rate"]) <= 0.25, (step1["reward/format/mean"], probe)
    lengths = [r["response_length/mean"] for r in first["records"]]
    assert all(abs(n - probe["mean_response_tokens"]) <= 0.2 * probe["mean_response_tokens"] for n in lengths), (
        lengths, probe["mean_response_tokens"])


def test_the_console_is_quiet_and_the_steps_logged_their_unclipped_update(root, first):
    stdout, run_dir = first["stdout"], root / RUN
    lines = (stdout + first["stderr"]).splitlines()
    print(f"\nsmoke console: {len(lines)} lines")
    assert len(lines) <= 40, "\n".join(lines)
    assert re.search(r"^\[dara\] step 3/3 \|.*\| \d+:\d\d elapsed, ~0:00 left$", stdout, re.M)
    assert re.search(r"^\[dara\] step 1/3 \|.*, ~\d+:\d\d left$", stdout, re.M)
    assert "logs/main.log" in stdout and "(TaskRunnerV1" not in stdout + first["stderr"]
    log = (run_dir / MAIN_LOG).read_text()
    assert "(TaskRunnerV1" in log and "[dara] step 3/3" in log  # verl's and the workers' output went here
    for record in first["records"]:
        assert 0 < record["actor/grad_norm"] < 1e6
        assert record["actor/grad_clip_active"] == 0.0 and record["actor/grad_unclipped_updates"] == 1.0
        assert (f"[dara] warning: step {record['step']}: 1 optimizer update(s) not clipped "
                "(run.expect_clipped_updates)") in stdout
    assert "1 of 1 optimizer updates were not clipped" in log


def test_wandb_went_offline_when_its_host_did_not_answer_and_holds_the_same_values(root, first):
    run_dir = root / RUN
    assert f"[dara] wandb: {first['wandb_host']} did not answer from this node (no answer within" in first["stdout"]
    assert re.search(r"^\[dara\] wandb +offline run ", first["stdout"], re.M)
    files = wandb_run_files(run_dir)
    assert len(files) == 1 and wandb_run_id(run_dir) in files[0].name  # the refused start never reached wandb
    run, rows = read_offline_history(files[0])
    assert run["project"] == "dara-smoke" and run["display_name"] == RUN
    assert run["run_group"] == "smoke" and "method:dara_asym" in run["tags"]
    assert run["config"]["update"]["algorithm"]["adv_estimator"] == "dara_asym"  # the resolved config
    records = {r["step"]: r for r in first["records"]}
    assert sorted(r["step"] for r in rows if "dara/density/format" in r) == [1, 2, 3]
    for row in rows:
        for key, value in row.items():
            if key.startswith(("dara/", "reward/")):
                assert value == pytest.approx(records[row["step"]][key]), key


def test_the_gpu_smokes_step_checks_pass_on_the_cpu_run(root, first):
    """`recipes gpu_smoke` reads its own run with these checks; here they read a real CPU run's steps."""
    from recipes.gpu_smoke import measure, rollout_check, weight_sync_check

    records, run_dir = first["records"], root / RUN
    assert rollout_check(records)[0]
    synced, detail = weight_sync_check(records)
    assert synced and "update_weights every step: True" in detail
    measured = measure(records, responses=8 * 4)
    assert measured.rollout_tokens_per_s > 0 and measured.update_tokens_per_s > 0 and measured.mean_response > 0
    placement = json.loads((run_dir / "ray_nodes.json").read_text())
    (rank,) = placement["worker_groups"]["actor_rollout"]
    # one update per step (the smoke's mini-batch is its batch), counted by the rank
    assert rank["work"]["actor"]["optimizer_steps"] == len(records)
    assert rank["work"]["actor"]["forward_passes"] >= len(records)


@pytest.fixture(scope="module")
def variant(root, train, first):
    """A reward module and an estimator of one's own (a copy of examples/my_estimator outside the checkout, with an
    option of its own) on the same folder: refused, then run 3 steps under the name the refusal gives."""
    flaky = reward_module(root, always_fail=False)
    estimator = root / "own_estimator" / EXAMPLE_ESTIMATOR.name
    estimator.parent.mkdir(exist_ok=True)
    shutil.copy(EXAMPLE_ESTIMATOR, estimator)
    own = [f"reward.custom_reward_function.path={flaky}", f"algorithm.dara.estimator_module={estimator}",
           "algorithm.adv_estimator=density_power", "algorithm.dara.options.power=1.0",
           "trainer.total_training_steps=3"]
    refused = train(*own, f"run.name={RUN}")  # the first run's folder, named explicitly
    name = re.search(r"run\.name=(\S+)", refused.stderr)
    ran = train(*own, f"run.name={name.group(1)}") if name else None
    return {"refused": refused, "name": name and name.group(1), "ran": ran, "estimator": estimator}


def test_another_configuration_is_refused_and_runs_beside_it_under_its_own_name(root, first, variant):
    refused, run_dir = variant["refused"], root / RUN
    assert refused.returncode != 0
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "holds a run of another configuration, differing in" in lines[0], refused.stderr
    assert "reward.custom_reward_function.path" in lines[0] and "algorithm.dara.estimator_module" in lines[0]
    ran = variant["ran"]
    assert ran is not None and ran.returncode == 0, ran and (ran.stdout[-3000:] + ran.stderr[-3000:])
    assert (run_dir / METRICS_FILE).read_bytes() == first["metrics_bytes"]  # nothing of the first run was touched
    configs = [json.loads((folder / RUN_INFO).read_text())["config"] for folder in (run_dir, root / variant["name"])]
    assert {"reward.custom_reward_function.path", "algorithm.dara.estimator_module",
            "algorithm.adv_estimator"} <= set(config_differences(*configs))


def test_a_flaky_reward_of_ones_own_never_stops_the_run_and_its_third_channel_is_logged(root, variant):
    records = read_metrics(root / variant["name"] / METRICS_FILE)
    assert sum(r["reward/errors"] for r in records) > 0
    assert all({"dara/density/brevity", "reward/brevity/mean"} <= set(r) for r in records)


def test_an_estimator_of_ones_own_trains_every_step_with_the_librarys_diagnostics(root, variant):
    run_dir = root / variant["name"]
    records = read_metrics(run_dir / METRICS_FILE)
    assert [r["step"] for r in records] == [1, 2, 3]
    channels = [*CHANNELS, "brevity"]
    for record in records:  # density_power with power=1: w_k = pi_ref / pi_k (1 for a dead channel)
        density = [record[f"dara/density/{c}"] for c in channels]
        weight = [record[f"dara/weight/{c}"] for c in channels]
        assert weight == pytest.approx([max(density) / d if d > 0 else 1.0 for d in density])
        assert all(f"dara/{m}/{c}" in record for m in ("energy", "energy_weighted", "active_groups") for c in channels)
    info = json.loads((run_dir / RUN_INFO).read_text())
    module = info["estimator_module"]
    assert info["estimator"] == "density_power" and module["estimators"] == ["density_power"]
    assert module["path"] == str(variant["estimator"].resolve())
    assert module["sha256"] == hashlib.sha256(variant["estimator"].read_bytes()).hexdigest()
    assert "estimator density_power" in variant["ran"].stdout  # the header


def engine_processes(pid: int) -> list:
    """The vLLM engine-core processes among a run's descendants (a local Ray's workers are the driver's)."""
    import psutil

    return [p for p in psutil.Process(pid).children(recursive=True) if p.name().startswith("VLLM::EngineCore")]


@pytest.fixture(scope="module")
def engine_killed(root, train, first, variant):
    """The first run resumed towards 6 steps, its rollout engine killed (SIGKILL) once step 4 is logged."""
    run_dir = root / RUN
    proc = train(*KEEP_TWO, "trainer.total_training_steps=6", wait=False)
    seen = follow(proc, stop=lambda: len(read_metrics(run_dir / METRICS_FILE)) >= 4)
    assert proc.poll() is None, proc.communicate()
    return kill_engine_and_wait(proc, run_dir, seen)


def kill_engine_and_wait(proc, run_dir: Path, seen: list) -> dict:
    engines = engine_processes(proc.pid)
    for engine in engines:
        engine.kill()
    killed = time.monotonic()
    seen += follow(proc, timeout_s=600)
    stdout, stderr = proc.communicate(timeout=600)  # a guard: verl alone waits for ever
    print(f"\nengine killed: the run ended {time.monotonic() - killed:.0f}s later (rc {proc.returncode})")
    metrics = run_dir / METRICS_FILE
    return {"engines": engines, "returncode": proc.returncode, "stderr": stderr, "left": still_alive(seen),
            "steps": [r["step"] for r in read_metrics(metrics)] if metrics.exists() else [],
            "checkpoints": checkpoints(run_dir)}


def test_a_killed_rollout_engine_ends_the_run_in_one_line_that_says_it_resumes(engine_killed):
    assert len(engine_killed["engines"]) == 1  # one replica, one engine
    assert engine_killed["returncode"] not in (0, None)
    last = engine_killed["stderr"].strip().splitlines()[-1]
    assert last.startswith("[dara] training failed: RolloutEngineDied: the rollout engine (vllm, server "), last
    assert "start the same command again to resume" in last
    assert "Traceback" not in engine_killed["stderr"]
    # the step after the kill generated nothing the trainer used: no step 5, no checkpoint of it
    assert engine_killed["steps"] == [1, 2, 3, 4]
    assert engine_killed["checkpoints"] == ["global_step_3", "global_step_4"]
    assert engine_killed["left"] == []  # no Ray, vLLM or forked process of the run outlives it


@pytest.fixture(scope="module")
def engine_killed_before_the_first_step(root, train):
    """A fresh run (another seed) whose rollout engine is killed as soon as it exists, before any step (here
    during the engine's start, before its server answers: the watchdog has nothing to watch yet)."""
    proc = train("run.seed=7", "trainer.total_training_steps=2", wait=False)
    seen = follow(proc, stop=lambda: bool(engine_processes(proc.pid)))
    assert proc.poll() is None, proc.communicate()
    return kill_engine_and_wait(proc, root / RUN.replace("-s0", "-s7"), seen)


def test_an_engine_killed_before_the_first_step_ends_the_run_in_one_line_and_leaves_no_process(
        engine_killed_before_the_first_step):
    found = engine_killed_before_the_first_step
    assert len(found["engines"]) == 1 and found["returncode"] not in (0, None)
    last = found["stderr"].strip().splitlines()[-1]
    # killed while starting, the engine's own error names it; killed once serving, the watchdog's line does
    assert last.startswith("[dara] training failed: ") and ("Engine core" in last or "rollout engine" in last), last
    assert "Traceback" not in found["stderr"]
    assert found["steps"] == [] and found["left"] == []


def test_a_finished_run_leaves_no_process_behind(first):
    assert first["left"] == []


@pytest.fixture(scope="module")
def resumed(root, train, engine_killed):
    return train(*KEEP_TWO, "trainer.total_training_steps=6")


def test_a_resumed_run_logs_every_step_once_and_keeps_exactly_the_newest_two_checkpoints(root, resumed):
    run_dir = root / RUN
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert [r["step"] for r in read_metrics(run_dir / METRICS_FILE)] == [1, 2, 3, 4, 5, 6]
    assert checkpoints(run_dir) == ["global_step_5", "global_step_6"]
    assert all((run_dir / CHECKPOINTS / f"global_step_{s}" / "actor").is_dir() for s in (5, 6))
    assert (run_dir / CHECKPOINTS / CHECKPOINT_TRACKER).read_text().strip() == "6"
    # wandb: one offline run per start; the last start's rows continue above the earlier ones' _step
    files = wandb_run_files(run_dir)
    assert len(files) == 3
    rows = [[(r["history"]["step"]["num"], r["history"]["item"].get("training/global_step"))
             for r in inspect_records(path) if r.get("type") == "history"] for path in files]
    assert [step for _, step in rows[0]] == [1, 2, 3] and [step for _, step in rows[-1]] == [5, 6]
    assert min(s for s, _ in rows[-1]) > max(s for row in rows[:-1] for s, _ in row)


def test_a_reward_failing_on_every_item_stops_at_the_first_step_in_one_line(root, train, resumed):
    always = reward_module(root, always_fail=True)
    out = train(f"reward.custom_reward_function.path={always}", "trainer.total_training_steps=1",
                "run.name=always-failing")
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert "failed on every item of step 1" in last and "KeyError: 'answer'" in last, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
