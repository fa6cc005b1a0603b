"""The CPU math smoke run (`python -m dara.train task=smoke_math`), the suite's one real run with dynamic
sampling: 3 verl steps on the math path (correctness + length channels, verl's Hendrycks grader) with the authors'
rounds (dara/verl/rounds.py). Every step logs its rounds and the pre-filter metrics over all generated responses
and trains only on full groups whose summed reward varies. verl's own filter (mode=replay) is checked on verl's
objects in tests/test_verl_prefilter.py (its sample)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dara.run_log import read_metrics

ROOT = Path(__file__).resolve().parent.parent
AUTHORS_SUFFIX = "\n\nPlease reason step by step, and put your final answer within \\boxed{}."
RUN = "smoke_math-tiny-dara_asym-s0"

pytestmark = [pytest.mark.slow, pytest.mark.starts]  # real CPU training (1-4 minutes a run)


@pytest.fixture(scope="module")
def root(tmp_path_factory, seed_smoke_assets):
    """The run's output root: the tiny model comes from the session's build, the math assets are built by the run."""
    return seed_smoke_assets(tmp_path_factory.mktemp("smoke_math"))


def test_smoke_math_logs_prefilter_metrics_and_trains_only_on_varying_groups(root, python_module):
    rollouts = root / "rollouts"  # verl's dump of each step's trained batch (a logging key)
    proc = python_module("dara.train", "task=smoke_math", f"run.output_root={root}",
                         f"trainer.rollout_data_dir={rollouts}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    rows = pq.read_table(root / "assets" / "smoke_math" / "train.parquet").to_pylist()
    assert rows and all(r["prompt"] == [{"role": "user", "content": r["prompt"][0]["content"]}] for r in rows)
    assert all(r["prompt"][0]["content"].endswith(AUTHORS_SUFFIX) for r in rows)
    card = json.loads((root / "assets" / "smoke_math" / "data_card.json").read_text())
    assert card["reward"]["correctness_grader"] == "hendrycks"

    run_info = json.loads((root / RUN / "run_info.json").read_text())
    assert run_info["reward_options"]["math_grader"] == "hendrycks"  # the run log says which grader scored
    records = read_metrics(root / RUN / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3]
    group_size, round_prompts, batch = 4, 8, 4
    dropped_somewhere = False
    for record in records:
        for key in ("filter/rounds", "filter/drawn_groups", "filter/kept_groups", "filter/informative_groups",
                    "rollout_prefilter/correctness/mean", "rollout_prefilter/length/mean",
                    "rollout_prefilter/responses", "actor/grad_clip_active"):
            assert key in record, (record["step"], key)
        rounds, drawn, kept = record["filter/rounds"], record["filter/drawn_groups"], record["filter/kept_groups"]
        informative = record["filter/informative_groups"]
        assert 1 <= rounds <= 20 and drawn == rounds * round_prompts  # whole rounds, never sized to the shortfall
        assert kept == batch and kept <= informative <= drawn
        assert informative - kept < round_prompts  # the last round was needed
        assert record["filter/acceptance_rate"] == pytest.approx(informative / drawn)
        assert record["rollout_prefilter/responses"] == drawn * group_size  # every response of every round
        dropped_somewhere = dropped_somewhere or drawn > kept
        kept_length = record["reward/length/mean"] * kept * group_size
        dropped_length = record["rollout_prefilter/length/mean"] * drawn * group_size - kept_length
        assert -1e-6 <= dropped_length <= (drawn - kept) * group_size + 1e-6
        if informative == kept and record["rollout_prefilter/correctness/mean"] == 0:
            # every dropped group is constant in length (correctness is 0 throughout): 0 or G per group
            assert dropped_length / group_size == pytest.approx(round(dropped_length / group_size))
        for channel in ("correctness", "length"):
            assert 0.0 <= record[f"rollout_prefilter/{channel}/mean"] <= 1.0
        # the trained batch itself: `batch` full groups of G responses, none with a constant summed reward
        groups = defaultdict(list)
        for line in (rollouts / f"{record['step']}.jsonl").read_text().splitlines():
            sample = json.loads(line)
            groups[sample["uid"].rsplit("_", 2)[0]].append(sample["score"])
        assert len(groups) == batch and all(len(scores) == group_size for scores in groups.values())
        constant = [uid for uid, scores in groups.items() if max(scores) == min(scores)]
        assert not constant, f"step {record['step']}: groups with a constant summed reward were trained on"
    assert dropped_somewhere  # the length limit makes the filter drop groups: the seam is exercised

