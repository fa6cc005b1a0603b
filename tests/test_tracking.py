"""wandb wiring (dara/tracking.py) and reading a run's wandb files back with wandb's own reader."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pandas as pd
import pytest

import dara
from dara import tracking
from dara.config import compose
from results.loaders import load_runs

ANSWERS = lambda url, timeout: None  # noqa: E731 -- a wandb host that answers


@pytest.mark.parametrize("requested, environ, mode", [
    ("auto", {}, "offline"), (None, {}, "offline"), ("auto", {"WANDB_API_KEY": "x"}, "online"),
    ("offline", {"WANDB_API_KEY": "x"}, "offline"), ("online", {}, "online"), ("cloud", {}, "run.wandb_mode='cloud'"),
])
def test_mode_is_offline_unless_a_key_is_present_and_the_host_answers_or_online_is_asked(requested, environ, mode):
    if mode.startswith("run."):
        with pytest.raises(ValueError, match=mode):
            tracking.choose_wandb_mode(requested, environ, ANSWERS)
    else:
        assert tracking.choose_wandb_mode(requested, environ, ANSWERS) == (mode, "")


def test_auto_with_a_key_goes_offline_when_the_host_does_not_answer_and_online_when_it_does(health_server):
    silent = socket.create_server(("127.0.0.1", 0))  # accepts and never answers (a dropping firewall, a hung proxy)
    host = f"http://127.0.0.1:{silent.getsockname()[1]}"
    with silent:
        mode, note = tracking.choose_wandb_mode("auto", {"WANDB_API_KEY": "x", "WANDB_BASE_URL": host}, timeout=0.5)
    assert mode == "offline" and "\n" not in note
    assert note.startswith(f"[dara] wandb: {host} did not answer from this node (no answer within 0.5 s")
    assert note.endswith("; logging offline (run.wandb_mode=online forces online)")
    with socket.socket() as closed:  # a port nobody listens on: refused at once
        closed.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{closed.getsockname()[1]}"
    assert "ConnectionRefusedError" in tracking.probe_wandb_host(refused, 5.0)
    url = f"http://{health_server.address}"  # answers 404 but on /health: an answer
    assert tracking.choose_wandb_mode("auto", {"WANDB_API_KEY": "x", "WANDB_BASE_URL": url}) == ("online", "")
    assert health_server.requests == 1


def test_run_id_and_env_follow_the_run_folder_and_every_task_logs_with_project_per_task(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_id = tracking.wandb_run_id("outputs/a")
    assert run_id == tracking.wandb_run_id(tmp_path / "outputs" / "a")  # a resume finds the same run
    assert run_id != tracking.wandb_run_id("outputs/b") and len(run_id) <= 64
    for task in ["smoke", "toolrl", "toolrl_three_rewards", "deepscaler"]:
        cfg = compose([f"task={task}", f"run.output_root={tmp_path}"])
        assert list(cfg.trainer.logger) == ["console", "file", "wandb"]
        assert (cfg.trainer.project_name, cfg.trainer.experiment_name) == (f"dara-{cfg.run.task}", cfg.run.name)
    # the environment: names, group, tags and folder
    cfg = compose(["estimator=gdpo", "run.seed=4", f"run.output_root={tmp_path}"])
    env = tracking.wandb_env(cfg, {})
    assert env["WANDB_MODE"] == "offline" and env["WANDB_DIR"] == str(tmp_path / "smoke-tiny-gdpo-s4")
    assert env["WANDB_RUN_GROUP"] == "smoke" and env["WANDB_RESUME"] == "allow"
    assert env["WANDB_RUN_ID"] == tracking.wandb_run_id(tmp_path / "smoke-tiny-gdpo-s4")
    assert set(env["WANDB_TAGS"].split(",")) == {"task:smoke", "model:tiny", "method:gdpo", "estimator:gdpo",
                                                 "seed:4"}
    cfg = compose(["run.recipe=toolrl_main", "run.wandb_mode=online", f"run.output_root={tmp_path}"])
    applied = tracking.apply_wandb_env(cfg, {})
    assert applied["WANDB_RUN_GROUP"] == "toolrl_main" and applied["WANDB_MODE"] == "online"
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.WANDB_RUN_ID == applied["WANDB_RUN_ID"]
    cfg = compose(["trainer.logger=[console,file]", f"run.output_root={tmp_path}"])
    assert tracking.apply_wandb_env(cfg, {}) == {} and "WANDB_MODE" not in cfg.ray_kwargs.ray_init.runtime_env.env_vars


WRITE_STEPS = """
import sys
from verl.utils.tracking import Tracking
from dara.tracking import log_by_step_metric
run_dir, first, last, value = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
tracking = Tracking(project_name="dara-smoke", experiment_name="smoke-tiny-gdpo-s4", default_backend=["wandb"],
                    config={"algorithm": {"adv_estimator": "gdpo"}, "trainer": {}})
log_by_step_metric(tracking, run_dir)  # what the project's trainer does when verl assigns its Tracking
for step in range(first, last + 1):
    tracking.log({"dara/density/format": value * step, "reward/format/mean": value, "timing_s/step": 1.5,
                  "training/global_step": step}, step=step)
tracking.finish()
"""


def _wandb_steps(path) -> list[tuple[int, int]]:
    """(wandb's _step, training step) of every history row of a .wandb file, in order."""
    return [(int(r["history"]["step"]["num"]), int(r["history"]["item"][tracking.STEP_METRIC]))
            for r in tracking.inspect_records(path) if r.get("type") == "history"]


@pytest.mark.slow  # two offline sessions of verl's Tracking in processes (~20 s)
def test_a_resumed_run_relogs_its_redone_steps_above_wandbs_step_and_reads_back_with_them(tmp_path):
    """Two sessions of one run through verl's own Tracking, the second redoing step 4: wandb's `_step` keeps
    increasing (what wandb online or `wandb sync` requires), the training step is the charts' step metric, and
    wandb's reader gives every step once with the redone value, as the metrics.jsonl does."""
    run_dir = tmp_path / "smoke-tiny-gdpo-s4"
    run_dir.mkdir()
    env = tracking.wandb_env(compose(["estimator=gdpo", "run.seed=4", f"run.output_root={tmp_path}"]), {})
    environ = {k: v for k, v in {**os.environ, **env, "HOME": str(tmp_path)}.items() if k != "WANDB_API_KEY"}
    for session in ("1 4 0.25", "4 5 0.5"):
        done = subprocess.run([sys.executable, "-c", WRITE_STEPS, str(run_dir), *session.split()], env=environ,
                              capture_output=True, text=True, timeout=180, cwd=dara.PROJECT_ROOT)
        assert done.returncode == 0, done.stderr[-3000:]
    files = tracking.wandb_run_files(run_dir)
    assert len(files) == 2 and all(env["WANDB_RUN_ID"] in str(f) for f in files)
    assert _wandb_steps(files[0]) == [(1, 1), (2, 2), (3, 3), (4, 4)]
    assert _wandb_steps(files[1]) == [(5, 4), (6, 5)]  # the redone step 4 is a new row, above _step 4
    metrics = [r["metric"] for r in tracking.inspect_records(files[1]) if r.get("type") == "metric"]
    assert {"glob_name": "*", "step_metric": tracking.STEP_METRIC}.items() <= next(m for m in metrics
                                                                           if m.get("glob_name")).items()
    run, rows = tracking.read_offline_history(files[0])
    assert run["run_id"] == env["WANDB_RUN_ID"] and run["run_group"] == "smoke"
    assert run["config"]["update"]["algorithm"]["adv_estimator"] == "gdpo"  # the config travels along
    assert [r["step"] for r in rows] == [1, 2, 3, 4]

    from_wandb = load_runs(tmp_path)
    assert from_wandb["step"].tolist() == [1, 2, 3, 4, 5]
    assert from_wandb["reward/format/mean"].tolist() == [0.25, 0.25, 0.25, 0.5, 0.5]
    assert from_wandb["dara/density/format"].tolist() == pytest.approx([0.25, 0.5, 0.75, 2.0, 2.5])
    assert set(from_wandb["method"]) == {"gdpo"} and set(from_wandb["seed"]) == {4}
    assert set(from_wandb["run"]) == {"smoke-tiny-gdpo-s4"}
    # the same steps in metrics.jsonl: `auto` reads it, and both sources give the same frame
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps({k: r[k] for k in r if "/" in k or k == "step"}) + "\n"
                                                   for r in from_wandb.to_dict("records")))
    (run_dir / "run_info.json").write_text(json.dumps({"run_name": run_dir.name, "method": "gdpo", "seed": 4}))
    from_jsonl = load_runs(tmp_path)
    columns = ["run", "method", "seed", "step", "reward/format/mean", "dara/density/format", "timing_s/step"]
    pd.testing.assert_frame_equal(from_jsonl[columns], from_wandb[columns], check_dtype=False)
    assert load_runs(tmp_path, source="wandb")["step"].tolist() == [1, 2, 3, 4, 5]
