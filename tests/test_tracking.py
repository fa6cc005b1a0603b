"""wandb wiring (dara/tracking.py) and reading a run's wandb files back with wandb's own reader."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

import dara
from dara.config import compose
from dara.tracking import (
    apply_wandb_env,
    read_offline_history,
    wandb_env,
    wandb_mode,
    wandb_run_files,
    wandb_run_id,
)
from results.loaders import load_runs


def composed(*overrides: str):
    return compose(overrides)


def test_mode_is_offline_unless_a_key_is_present_or_online_is_asked():
    assert wandb_mode("auto", {}) == "offline"
    assert wandb_mode(None, {}) == "offline"
    assert wandb_mode("auto", {"WANDB_API_KEY": "x"}) == "online"
    assert wandb_mode("offline", {"WANDB_API_KEY": "x"}) == "offline"
    assert wandb_mode("online", {}) == "online"
    with pytest.raises(ValueError, match="run.wandb_mode='cloud'"):
        wandb_mode("cloud", {})


def test_run_id_follows_the_run_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert wandb_run_id("outputs/a") == wandb_run_id(tmp_path / "outputs" / "a")  # a resume finds the same run
    assert wandb_run_id("outputs/a") != wandb_run_id("outputs/b")
    assert len(wandb_run_id("outputs/a")) <= 64


@pytest.mark.parametrize("task", ["smoke", "toolrl", "toolrl_three_rewards", "deepscaler"])
def test_every_task_logs_to_wandb_with_project_per_task(task, tmp_path):
    cfg = composed(f"task={task}", f"run.output_root={tmp_path}")
    assert list(cfg.trainer.logger) == ["console", "file", "wandb"]
    assert cfg.trainer.project_name == f"dara-{cfg.run.task}"
    assert cfg.trainer.experiment_name == cfg.run.name


def test_env_names_group_tags_and_folder(tmp_path):
    cfg = composed("estimator=gdpo", "run.seed=4", f"run.output_root={tmp_path}")
    env = wandb_env(cfg, {})
    assert env["WANDB_MODE"] == "offline" and env["WANDB_DIR"] == str(tmp_path / "smoke-tiny-gdpo-s4")
    assert env["WANDB_RUN_GROUP"] == "smoke" and env["WANDB_RESUME"] == "allow"
    assert env["WANDB_RUN_ID"] == wandb_run_id(tmp_path / "smoke-tiny-gdpo-s4")
    assert set(env["WANDB_TAGS"].split(",")) == {"task:smoke", "model:tiny", "method:gdpo", "estimator:gdpo",
                                                 "seed:4"}
    cfg = composed("run.recipe=toolrl_main", "run.wandb_mode=online", f"run.output_root={tmp_path}")
    applied = apply_wandb_env(cfg, {})
    assert applied["WANDB_RUN_GROUP"] == "toolrl_main" and applied["WANDB_MODE"] == "online"
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.WANDB_RUN_ID == applied["WANDB_RUN_ID"]
    cfg = composed("trainer.logger=[console,file]", f"run.output_root={tmp_path}")
    assert apply_wandb_env(cfg, {}) == {} and "WANDB_MODE" not in cfg.ray_kwargs.ray_init.runtime_env.env_vars


WRITE_STEPS = """
import sys, wandb
run = wandb.init(project="dara-smoke", name="smoke-tiny-gdpo-s4", config={"algorithm": {"adv_estimator": "gdpo"}})
first, last, value = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
for step in range(first, last + 1):
    run.log({"dara/density/format": value * step, "reward/format/mean": value, "timing_s/step": 1.5}, step=step)
run.finish()
"""


def _write_wandb_session(run_dir, env, first, last, value):
    environ = {**os.environ, **env, "HOME": str(run_dir.parent)}
    environ.pop("WANDB_API_KEY", None)
    result = subprocess.run([sys.executable, "-c", WRITE_STEPS, str(first), str(last), str(value)], env=environ,
                            capture_output=True, text=True, timeout=180, cwd=dara.PROJECT_ROOT)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.slow  # two wandb offline runs in processes (~9 s)
def test_a_resumed_offline_run_reads_back_through_wandbs_reader(tmp_path):
    """Two sessions of one run (the second resumes at step 3 and relogs it): wandb's reader gives every step
    once, the resumed value winning, with method and seed from the tags, exactly like the metrics.jsonl."""
    cfg = composed("estimator=gdpo", "run.seed=4", f"run.output_root={tmp_path}")
    run_dir = tmp_path / "smoke-tiny-gdpo-s4"
    run_dir.mkdir()
    env = wandb_env(cfg, {})
    _write_wandb_session(run_dir, env, 1, 3, 0.25)
    _write_wandb_session(run_dir, env, 3, 4, 0.5)
    files = wandb_run_files(run_dir)
    assert len(files) == 2 and all(env["WANDB_RUN_ID"] in str(f) for f in files)
    run, rows = read_offline_history(files[0])
    assert run["run_id"] == env["WANDB_RUN_ID"] and run["run_group"] == "smoke"
    assert run["config"]["update"]["algorithm"]["adv_estimator"] == "gdpo"  # the config travels along
    assert [r["step"] for r in rows] == [1, 2, 3]

    from_wandb = load_runs(tmp_path)
    assert from_wandb["step"].tolist() == [1, 2, 3, 4]
    assert from_wandb["reward/format/mean"].tolist() == [0.25, 0.25, 0.5, 0.5]
    assert from_wandb["dara/density/format"].tolist() == pytest.approx([0.25, 0.5, 1.5, 2.0])
    assert set(from_wandb["method"]) == {"gdpo"} and set(from_wandb["seed"]) == {4}
    assert set(from_wandb["run"]) == {"smoke-tiny-gdpo-s4"}

    records = [{"step": s, "dara/density/format": (0.25 if s < 3 else 0.5) * s,
                "reward/format/mean": 0.25 if s < 3 else 0.5, "timing_s/step": 1.5} for s in (1, 2, 3, 4)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run_dir / "run_info.json").write_text(json.dumps({"run_name": "smoke-tiny-gdpo-s4", "method": "gdpo",
                                                       "seed": 4, "task": "smoke", "model": "tiny"}))
    from_jsonl = load_runs(tmp_path)  # auto: metrics.jsonl where the folder has one
    columns = ["run", "method", "seed", "step", "reward/format/mean", "dara/density/format", "timing_s/step"]
    pd.testing.assert_frame_equal(from_jsonl[columns], from_wandb[columns], check_dtype=False)
    assert load_runs(tmp_path, source="wandb")["step"].tolist() == [1, 2, 3, 4]
