"""A run folder's life on the CPU smoke, with real verl training: started, started again while it runs,
started with another configuration, resumed to more steps.

The first run saves every step and keeps two checkpoints (`trainer.save_freq=1 run.checkpoint.keep_last=2`),
with a wandb API key in its environment and a wandb host that never answers. While it trains, a second
`dara.train` on the same folder must exit in one line naming the holder. Later, a run that differs only in
`algorithm.dara.w_max` is refused in one line naming that key, and runs beside it under the `run.name` the
line suggests. Resumed to 5 steps, the folder holds exactly the newest two checkpoints.

Every run of the module also expects every optimizer update clipped, with a clip no gradient norm reaches
(`run.expect_clipped_updates=true`, clip 1e6): the first run's steps log actor/grad_clip_active 0 and their
unclipped update, and its console and log say so (dara/verl/grad_clip.py; its unit tests: test_verl_grad_clip.py).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest

import dara
from dara.run_folder import (
    CHECKPOINT_TRACKER,
    CHECKPOINTS,
    MAIN_LOG,
    METRICS_FILE,
    RUN_INFO,
    config_differences,
)
from dara.run_lock import read_holder
from dara.run_log import read_metrics
from dara.tracking import inspect_records, wandb_run_files

pytestmark = pytest.mark.slow  # three CPU training runs (1-4 minutes each) and two refused starts

RUN = "smoke-tiny-dara_asym-s0"
KEEP_TWO = ["trainer.save_freq=1", "run.checkpoint.keep_last=2"]
# part of every run's configuration here: every update expected clipped, by a clip no gradient norm reaches
UNREACHED_CLIP = ["run.expect_clipped_updates=true", "actor_rollout_ref.actor.optim.clip_grad=1000000.0"]


def train(root, *overrides, env=None, wait=True):
    command = [sys.executable, "-m", "dara.train", f"run.output_root={root}", *UNREACHED_CLIP, *overrides]
    environ = {**os.environ, **(env or {})}
    if not wait:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ,
                                cwd=dara.PROJECT_ROOT)
    return subprocess.run(command, capture_output=True, text=True, timeout=900, env=environ, cwd=dara.PROJECT_ROOT)


def checkpoints(run_dir) -> list[str]:
    return sorted(p.name for p in (run_dir / CHECKPOINTS).glob("global_step_*"))


@pytest.fixture(scope="module")
def root(tmp_path_factory, seed_smoke_assets):
    return seed_smoke_assets(tmp_path_factory.mktemp("lifecycle"))  # the session's smoke build, not rebuilt


@pytest.fixture(scope="module")
def first(root):
    """The first run, and the second dara.train started on its folder while it trained."""
    silent = socket.create_server(("127.0.0.1", 0))  # a wandb host that accepts and never answers
    wandb_host = f"http://127.0.0.1:{silent.getsockname()[1]}"
    env = {"WANDB_API_KEY": "0" * 40, "WANDB_BASE_URL": wandb_host}
    proc = train(root, *KEEP_TWO, env=env, wait=False)
    run_dir = root / RUN
    while (read_holder(run_dir) or {}).get("pid") != proc.pid:  # until the first run holds the folder
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.5)
    second = train(root, *KEEP_TWO)
    stdout, stderr = proc.communicate(timeout=900)
    silent.close()
    return {"proc": proc, "stdout": stdout, "stderr": stderr, "second": second, "wandb_host": wandb_host}


def test_a_second_run_on_a_running_folder_exits_in_one_line_and_the_first_finishes(root, first):
    proc, second = first["proc"], first["second"]
    assert second.returncode != 0 and second.stdout == ""
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"[dara] {root / RUN} is in use by host ")
    assert f"pid {proc.pid}, since " in lines[0]

    assert proc.returncode == 0, first["stdout"][-3000:] + first["stderr"][-3000:]
    run_dir = root / RUN
    assert [r["step"] for r in read_metrics(run_dir / METRICS_FILE)] == [1, 2, 3]
    assert checkpoints(run_dir) == ["global_step_2", "global_step_3"]
    assert len(wandb_run_files(run_dir)) == 1  # the second run never reached wandb
    # wandb auto with a key: the host did not answer, so the run logged offline and said so
    assert f"[dara] wandb: {first['wandb_host']} did not answer from this node (no answer within" in first["stdout"]
    assert re.search(r"^\[dara\] wandb +offline run ", first["stdout"], re.M)


def test_every_step_logs_its_unclipped_update_and_the_console_says_so(root, first):
    run_dir = root / RUN
    records = read_metrics(run_dir / METRICS_FILE)
    assert [r["step"] for r in records] == [1, 2, 3]
    for record in records:
        assert 0 < record["actor/grad_norm"] < 1e6
        assert record["actor/grad_clip_active"] == 0.0 and record["actor/grad_unclipped_updates"] == 1.0
        assert (f"[dara] warning: step {record['step']}: 1 optimizer update(s) not clipped "
                "(run.expect_clipped_updates)") in first["stdout"]
    assert "1 of 1 optimizer updates were not clipped" in (run_dir / MAIN_LOG).read_text()


def test_another_configuration_is_refused_and_runs_beside_it_under_its_own_name(root, first):
    run_dir = root / RUN
    metrics = (run_dir / METRICS_FILE).read_bytes()
    refused = train(root, "algorithm.dara.w_max=2")
    assert refused.returncode != 0
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "holds a run of another configuration, differing in algorithm.dara.w_max" in lines[0]
    name = re.search(r"run\.name=(\S+)", lines[0]).group(1)
    assert (run_dir / METRICS_FILE).read_bytes() == metrics  # nothing of the first run was touched

    variant = train(root, "algorithm.dara.w_max=2", f"run.name={name}", "trainer.total_training_steps=1")
    assert variant.returncode == 0, variant.stdout[-3000:] + variant.stderr[-3000:]
    assert [r["step"] for r in read_metrics(root / name / METRICS_FILE)] == [1]
    assert (run_dir / METRICS_FILE).read_bytes() == metrics
    configs = [json.loads((folder / RUN_INFO).read_text())["config"] for folder in (run_dir, root / name)]
    assert config_differences(*configs) == ["algorithm.dara.w_max"]


def test_a_resumed_run_keeps_exactly_the_newest_two_checkpoints(root, first):
    run_dir = root / RUN
    resumed = train(root, *KEEP_TWO, "trainer.total_training_steps=5")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert [r["step"] for r in read_metrics(run_dir / METRICS_FILE)] == [1, 2, 3, 4, 5]
    assert checkpoints(run_dir) == ["global_step_4", "global_step_5"]
    assert all((run_dir / CHECKPOINTS / f"global_step_{s}" / "actor").is_dir() for s in (4, 5))
    assert (run_dir / CHECKPOINTS / CHECKPOINT_TRACKER).read_text().strip() == "5"
    # wandb: the resumed start's rows continue above the first start's _step, by training step 4 and 5
    files = wandb_run_files(run_dir)
    assert len(files) == 2
    rows = [[(r["history"]["step"]["num"], r["history"]["item"].get("training/global_step"))
             for r in inspect_records(path) if r.get("type") == "history"] for path in files]
    assert [step for _, step in rows[0]] == [1, 2, 3] and [step for _, step in rows[1]] == [4, 5]
    assert min(s for s, _ in rows[1]) > max(s for s, _ in rows[0])
