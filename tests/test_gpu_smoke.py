"""`python -m recipes gpu_smoke` where no GPU is: its dry run, checklist, calibration from measured throughput,
cluster matching, checkpoint + resume check and forced stop (its step checks read a CPU run: test_training.py)."""

from __future__ import annotations

import json
import sys

import pytest

from dara.preflight.calibration import Throughput, scaled_step_minutes
from recipes import gpu_smoke as gs
from recipes.__main__ import main


def test_checklist_says_ok_or_fail_for_each_part():
    checks = {"install": (True, "torch 2.11.0+cu129 (CUDA 12.9 build)"), "rollout": (False, "no steps")}
    ok, text = gs.checklist(checks)
    lines = text.splitlines()
    assert [line.split()[1] for line in lines] == ["install", "attention", "rollout", "weight", "checkpoint",
                                                   "evaluation"]
    assert lines[0].startswith("[gpu_smoke] install ....") and " ok    torch 2.11.0+cu129" in lines[0]
    assert "FAIL  no steps" in lines[2] and "FAIL  not reached" in lines[1] and not ok
    assert gs.checklist(dict.fromkeys(gs.CHECKS, (True, "fine")))[0]


def test_the_sdpa_fallback_fails_the_attention_check():  # the smoke trains on sdpa, no paper run fits under it
    steps = [{"step": 1}, {"step": 2}]
    assert gs.attention_check("flash_attention_2", steps) == (True, "flash_attention_2 (flash_attn imports), 2 steps "
                                                                 "trained with it")
    ok, detail = gs.attention_check("sdpa", steps)
    assert not ok and detail.startswith("sdpa (no flash_attn), 2 steps trained with it; no paper run can start")
    assert "make flash-attn (40-90 min at MAX_JOBS=32" in detail and "--set run.attention=sdpa" in detail
    assert gs.attention_check("flash_attention_2", []) == (False, "flash_attention_2 (flash_attn imports), 0 steps "
                                                               "trained with it")


def test_clusters_are_matched_to_the_gpu_by_name_and_memory():
    assert [gs.matching_clusters(*gpu) for gpu in (("NVIDIA H100 80GB HBM3", 79.6), ("NVIDIA A100-SXM4-40GB", 39.4),
                                                ("NVIDIA A100-SXM4-80GB", 79.2), ("NVIDIA H200", 139.8))] == [
        ["h100_x8"], ["a100_40g_x4"], ["a100_80g_x8"], []]


def test_calibration_scales_the_measured_throughput_to_every_paper_run():  # read back: test_preflight.py
    measured = gs.Measured(rollout_tokens_per_s=4000.0, update_tokens_per_s=20000.0, logprob_tokens_per_s=60000.0,
                           other_seconds_per_response=0.05, mean_prompt=1024.0, mean_response=256.0)
    table = gs.calibrate(measured, gs.runs()[0], ["a100_40g_x4", "h100_x8"])
    models = {run.model for run in gs.paper_runs()}
    assert set(table) == {"a100_40g_x4", "h100_x8"} and all(set(m) == models for m in table.values())
    # one figure by hand: qwen2.5-1.5b on 4 A100s, tool calling (measured fills: prompt 1024/2048, response 256/1024)
    shape = gs.run_shape(next(r for r in gs.paper_runs() if r.model == "qwen2.5-1.5b-instruct" and r.task == "toolrl"
                           and not r.variant), "a100_40g_x4")
    assert (shape.responses, shape.gpus, shape.max_prompt, shape.max_response) == (2048, 4, 2048, 1024)
    assert shape.uses_reference and shape.measured_task and not shape.dynamic_sampling
    scale = 494032768 / 1543714304
    by_hand = (2048 * 256 / (4000 * scale * 4) + 2048 * 1280 / (20000 * scale * 4)
               + 2 * 2048 * 1280 / (60000 * scale * 4) + 2048 * 0.05) / 60
    assert table["a100_40g_x4"]["qwen2.5-1.5b-instruct"] >= round(by_hand, 2) - 0.01
    assert scaled_step_minutes(Throughput(494032768, 4000, 20000, 60000, 0.05, 0.5, 0.25), shape) == \
        pytest.approx(by_hand)
    # math: dynamic sampling doubles the generation; every sequence at its budget (no measured fill)
    assert table["h100_x8"]["deepseek-r1-distill-qwen-7b"] > table["h100_x8"]["deepseek-r1-distill-qwen-1.5b"]


def test_dry_run_shows_the_smokes_plan(capsys, tmp_path):
    assert main(["gpu_smoke", "--dry-run", "--output-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "a stop request once step 2 is logged: checkpoint at step 3" in out and "cluster=one_gpu" in out
    assert "results.evaluation bfcl all" in out and "--limit 20" in out and "--device cuda" in out


def test_the_checkpoint_resume_check_reads_a_run_folder(tmp_path):  # each missing piece is named
    from dara.run_folder import CHECKPOINT_TRACKER, CHECKPOINTS, METRICS_FILE

    def folder(steps, checkpoints, marker):
        run = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        (run / CHECKPOINTS).mkdir(parents=True)
        for step in checkpoints:
            (run / CHECKPOINTS / f"global_step_{step}").mkdir()
        (run / CHECKPOINTS / CHECKPOINT_TRACKER).write_text(f"{marker}\n")
        (run / METRICS_FILE).write_text("".join(json.dumps({"step": s}) + "\n" for s in steps))
        return run

    ok, detail = gs.checkpoint_resume_check(folder([1, 2, 3, 4], [2, 4], 4), 4, 2, (0, 0))
    assert ok and detail == "stopped at step 2 (checkpoint), resumed to 4; steps logged once: [1, 2, 3, 4]"
    ok, detail = gs.checkpoint_resume_check(folder([1, 2, 2, 3], [4], 3), 4, 2, (0, 1))
    assert not ok
    for problem in ("exit codes (0, 1)", "no checkpoint of the stop's step 2", "steps logged [1, 2, 2, 3]",
                    "the resume marker is not the last step"):
        assert problem in detail
    assert "not before step 4" in gs.checkpoint_resume_check(folder([1, 2, 3, 4], [4], 4), 4, 4, (0, 0))[1]


# A stand-in for `python -m dara.train` keeping the stop-request protocol (dara.verl.stop_request; the real one:
# tests/test_slurm.py): resume from the marker, log a step at a time, checkpoint and exit at a request or the end.
STAND_IN = """
import json, sys, time
from pathlib import Path
options = dict(arg.split("=", 1) for arg in sys.argv[3:])
run, steps = Path(options["run_dir"]), int(options["steps"])
marker, request = run / "checkpoints" / "latest_checkpointed_iteration.txt", run / "stop_request"
for step in range(int(marker.read_text()) + 1 if marker.exists() else 1, steps + 1):
    time.sleep(0.6)
    (run / "metrics.jsonl").open("a").write(json.dumps({"step": step}) + "\\n")
    if request.exists() or step == steps:
        (run / "checkpoints" / f"global_step_{step}").mkdir(parents=True)
        marker.write_text(str(step)); request.unlink(missing_ok=True); break
"""


def test_train_with_forced_stop_stops_after_the_step_asked_and_resumes_the_rest(tmp_path):
    stand_in = tmp_path / "python"
    stand_in.write_text(f"#!{sys.executable}\n{STAND_IN}")
    stand_in.chmod(0o755)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    first, stopped_at, second = gs.train_with_forced_stop([f"run_dir={run_dir}", "steps=6"], run_dir, stop_after=2,
                                                       python=str(stand_in), timeout_s=120)
    assert (first, second) == (0, 0) and 2 <= stopped_at < 6  # stopped at a step boundary after step 2, early
    assert gs.checkpoint_resume_check(run_dir, 6, stopped_at, (first, second))[0]
    assert not (run_dir / "stop_request").exists()
