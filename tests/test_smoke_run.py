"""The project's integration test: the README's `make smoke` job, real verl training on this CPU.

Runs `python -m dara.train` exactly as a user does (a subprocess, its own local Ray), then checks the
run folder: 3 steps, each with the DARA instruments per channel, in our JSONL, in verl's tracker and in the
wandb offline run (read back with wandb's own reader); and the quiet console: a header, one line per step
with elapsed and remaining time, the summary, verl's output in logs/main.log.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time

import pytest
from omegaconf import OmegaConf

import dara
from dara.run_folder import MAIN_LOG, METRICS_FILE, RUN_INFO, VERL_CONFIG, VERL_TRACKING
from dara.run_log import read_metrics

CHANNELS = ["format", "correctness"]


@pytest.fixture(scope="module")
def output_root(tmp_path_factory):
    return tmp_path_factory.mktemp("smoke")


def run_train(output_root, *overrides, timeout=900):
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "dara.train", f"run.output_root={output_root}", *overrides],
                          capture_output=True, text=True, timeout=timeout, cwd=dara.PROJECT_ROOT)
    return proc, time.monotonic() - start


@pytest.fixture(scope="module")
def smoke(output_root):
    proc, seconds = run_train(output_root)
    print(f"\nsmoke run: {seconds:.0f}s wall (rc {proc.returncode})")
    return proc


@pytest.mark.slow
def test_smoke_run_trains_three_verl_steps(output_root, smoke):
    proc = smoke
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = output_root / "smoke-tiny-dara_asym-s0"
    records = read_metrics(run_dir / METRICS_FILE)
    assert [r["step"] for r in records] == [1, 2, 3]
    for record in records:
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
    assert "[dara] step 3/3" in proc.stdout + proc.stderr
    tracked = [json.loads(line) for line in (run_dir / VERL_TRACKING).read_text().splitlines()]
    assert any("dara/density/format" in entry["data"] for entry in tracked)  # through verl's own tracker
    info = json.loads((run_dir / RUN_INFO).read_text())
    assert info["method"] == "dara_asym" and info["reward_channels"] == CHANNELS


@pytest.mark.slow
def test_smoke_run_is_quiet_and_writes_a_wandb_offline_run(output_root, smoke):
    from dara.tracking import read_offline_history, wandb_run_files, wandb_run_id

    proc = smoke
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = output_root / "smoke-tiny-dara_asym-s0"
    lines = (proc.stdout + proc.stderr).splitlines()
    print(f"\nsmoke console: {len(lines)} lines")
    assert len(lines) <= 40, "\n".join(lines)
    assert re.search(r"^\[dara\] step 3/3 \|.*\| \d+:\d\d elapsed, ~0:00 left$", proc.stdout, re.M)
    assert re.search(r"^\[dara\] step 1/3 \|.*, ~\d+:\d\d left$", proc.stdout, re.M)
    assert "logs/main.log" in proc.stdout and "(DaraTaskRunner" not in proc.stdout + proc.stderr
    log = (run_dir / MAIN_LOG).read_text()
    assert "(DaraTaskRunner" in log and "[dara] step 3/3" in log  # verl's and the workers' output went here
    saved = OmegaConf.load(run_dir / VERL_CONFIG)  # the resolved config verl ran with
    assert saved.algorithm.adv_estimator == "dara_asym" and saved.trainer.total_training_steps == 3
    assert saved.trainer.experiment_name == "smoke-tiny-dara_asym-s0"
    assert list(saved.algorithm.reward_channels) == CHANNELS

    files = wandb_run_files(run_dir)
    assert len(files) == 1 and wandb_run_id(run_dir) in files[0].name
    run, rows = read_offline_history(files[0])
    assert run["project"] == "dara-smoke" and run["display_name"] == "smoke-tiny-dara_asym-s0"
    assert run["run_group"] == "smoke" and "method:dara_asym" in run["tags"]
    assert run["config"]["update"]["algorithm"]["adv_estimator"] == "dara_asym"  # the resolved config
    records = {r["step"]: r for r in read_metrics(run_dir / METRICS_FILE)}
    assert sorted(r["step"] for r in rows if "dara/density/format" in r) == [1, 2, 3]
    for row in rows:
        for key, value in row.items():
            if key.startswith(("dara/", "reward/")):
                assert value == pytest.approx(records[row["step"]][key]), key
