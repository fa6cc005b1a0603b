"""The CPU math smoke run (`python -m dara.train task=smoke_math`): 3 verl steps of the tiny model on the
math path (correctness + length channels, verl's Hendrycks grader, dynamic sampling on, a length limit the
tiny model's responses straddle). Every step logs the pre-filter metrics over all generated responses
(evicted groups included) beside the filter counts."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dara.run_log import read_metrics

ROOT = Path(__file__).resolve().parent.parent
AUTHORS_SUFFIX = "\n\nPlease reason step by step, and put your final answer within \\boxed{}."


@pytest.mark.slow
def test_smoke_math_logs_prefilter_metrics_every_step(tmp_path):
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "dara.train", "task=smoke_math", f"run.output_root={tmp_path}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    seconds = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    print(f"smoke_math: {seconds:.0f}s")

    rows = pq.read_table(tmp_path / "assets" / "smoke_math" / "train.parquet").to_pylist()
    assert rows and all(r["prompt"] == [{"role": "user", "content": r["prompt"][0]["content"]}] for r in rows)
    assert all(r["prompt"][0]["content"].endswith(AUTHORS_SUFFIX) for r in rows)
    card = json.loads((tmp_path / "assets" / "smoke_math" / "data_card.json").read_text())
    assert card["reward"]["correctness_grader"] == "hendrycks"

    run_info = json.loads((tmp_path / "smoke_math-tiny-dara_asym-s0" / "run_info.json").read_text())
    assert run_info["reward_options"]["math_grader"] == "hendrycks"  # the run log says which grader scored
    records = read_metrics(tmp_path / "smoke_math-tiny-dara_asym-s0" / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3]
    group_size = 4
    evicted_somewhere = False
    for record in records:
        for key in ("rollout_prefilter/correctness/mean", "rollout_prefilter/length/mean",
                    "rollout_prefilter/responses", "filter/kept_groups", "filter/drawn_groups"):
            assert key in record, (record["step"], key)
        kept, drawn = record["filter/kept_groups"], record["filter/drawn_groups"]
        assert kept == 4  # data.train_batch_size
        assert record["rollout_prefilter/responses"] == drawn * group_size  # every generated response
        # drawn = kept + evicted (constant summed reward) + surplus (informative, discarded once 4 are kept)
        evicted = record.get("training/filter_groups/evicted_samples", 0.0)
        surplus = record.get("training/filter_groups/discarded_surplus_samples", 0.0)
        assert drawn == kept + evicted + surplus
        evicted_somewhere = evicted_somewhere or evicted > 0
        kept_length = record["reward/length/mean"] * kept * group_size
        dropped_length = record["rollout_prefilter/length/mean"] * drawn * group_size - kept_length
        assert -1e-6 <= dropped_length <= (evicted + surplus) * group_size + 1e-6
        if surplus == 0 and record["rollout_prefilter/correctness/mean"] == 0:
            # every evicted group is constant in length (correctness is 0 throughout): 0 or G per group
            assert dropped_length / group_size == pytest.approx(round(dropped_length / group_size))
        for channel in ("correctness", "length"):
            assert 0.0 <= record[f"rollout_prefilter/{channel}/mean"] <= 1.0
    assert evicted_somewhere  # the length limit makes the filter evict groups: the seam is exercised
