"""Variants apart in every table: runs that differ in more than the seed are rows and curves of their own,
labelled by what differs; seeds are counted within a variant; older run folders keep today's behaviour."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from dara.run_folder import experiment_config
from results import thresholds
from results.cli import main as results_main
from results.loaders import load_runs
from results.report import build_report
from results.tables import build_table
from results.variants import short_names, variant_labels
from tests.test_results_thresholds import write_run as run_folder

METRIC = "reward/format/mean"


def config(seed: int, model: str = "tiny", **changes) -> dict:
    cfg = OmegaConf.create({"run": {"seed": seed, "task": "smoke", "model": model, "output_dir": f"/o/{seed}"},
                            "data": {"seed": seed, "train_batch_size": 8},
                            "algorithm": {"adv_estimator": "dara_asym", "dara": {"w_max": 5.0}}})
    for key, value in changes.items():
        OmegaConf.update(cfg, key, value, force_add=True)
    return experiment_config(cfg)


def write_run(root, name, seed, values, *, model="tiny", recorded=True, **changes):
    info = {"config": config(seed, model, **changes)} if recorded else {}
    run_folder(root / name, [{"step": s, METRIC: v} for s, v in enumerate(values, start=1)], method="dara_asym",
               seed=seed, task="smoke", model=model, **info)


def test_a_variant_is_its_own_row_curve_and_threshold_labelled_by_what_differs(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    for name, seed, values, changes in (("plain-s0", 0, [0.2, 0.5, 0.9], {}), ("plain-s1", 1, [0.1, 0.7, 0.8], {}),
                                        ("capped-s0", 0, [0.3, 0.9, 1.0], {"algorithm.dara.w_max": 2.0})):
        write_run(sweep, name, seed, values, **changes)
    rows = {r["method"]: r for r in build_table([sweep], [METRIC], step="last").to_dict("records")}
    plain, capped = rows.pop("dara_asym w_max=5.0"), rows.pop("dara_asym w_max=2.0")
    assert not rows and (plain["n"], plain["seeds"], capped["n"], capped["seeds"]) == (2, "0,1", 1, "0")
    assert plain[f"{METRIC}_mean"] == pytest.approx((0.9 + 0.8) / 2) and capped[f"{METRIC}_mean"] == 1.0
    frame = load_runs(sweep)
    assert set(frame["base_method"]) == {"dara_asym"} and frame["config_id"].nunique() == 2
    steps = thresholds.threshold_steps(frame, METRIC, 0.85)
    assert dict(zip(steps["method"], steps["step"], strict=True)) == {"dara_asym w_max=2.0": 2, "dara_asym w_max=5.0": 3}
    assert results_main(["table", str(sweep), "--metrics", METRIC, "--step", "last"]) == 0
    assert "| dara_asym w_max=2.0 | 1 |" in capsys.readouterr().out
    assert results_main(["plot", "curves", str(sweep), "--metrics", METRIC, "--out", str(tmp_path / "c")]) == 0
    page = build_report([sweep], tmp_path / "report", reference=tmp_path).read_text()
    assert "dara_asym w_max=2.0" in page and "dara_asym w_max=5.0" in page


def test_what_is_pooled_and_what_is_refused(tmp_path):
    """Seeds of one configuration are one row; folders recording no configuration pool as before; a key only newer
    runs recorded (the code added it later) tells nothing apart, one recorded with two values does; runs of two
    models under one method are refused."""
    for name, seed, kwargs in (("one/a", 0, {}), ("one/b", 1, {}), ("old/a", 0, {"recorded": False}),
                               ("old/b", 0, {"recorded": False, "algorithm.dara.w_max": 2.0})):
        write_run(tmp_path, name, seed, [0.5 + seed / 10], **kwargs)
    for folder in ("one", "old"):
        assert build_table([tmp_path / folder], [METRIC], step="last")[["method", "n"]].values.tolist() == [
            ["dara_asym", 2]]
    write_run(tmp_path, "added/new-s1", 1, [0.7], **{"run.seeded_rollout": True})
    assert set(load_runs([tmp_path / "one" / "a", tmp_path / "added" / "new-s1"])["method"]) == {"dara_asym"}
    write_run(tmp_path, "added/other-s2", 2, [0.9], **{"run.seeded_rollout": False})
    assert sorted(set(load_runs([tmp_path / "one" / "a", tmp_path / "added"])["method"])) == [
        "dara_asym seeded_rollout=false", "dara_asym seeded_rollout=null", "dara_asym seeded_rollout=true"]
    write_run(tmp_path, "models/small", 0, [0.7], model="small", **{"run.model": "small"})
    write_run(tmp_path, "models/tiny", 0, [0.5])
    with pytest.raises(ValueError, match="differ in model"):
        build_table([tmp_path / "models"], [METRIC], step="last")
    table = build_table([tmp_path / "models"], [METRIC], group_by=["model", "method"], step="last")
    assert table[["model", "method", "n"]].values.tolist() == [["small", "dara_asym", 1], ["tiny", "dara_asym", 1]]


def test_labels_name_the_differing_keys_briefly():
    assert short_names(["a.x.lr", "b.y.lr", "c.w_max"]) == {"a.x.lr": "x.lr", "b.y.lr": "y.lr", "c.w_max": "w_max"}
    labels = variant_labels("grpo", [{"k": 1, "a.b": [1, 2]}, {"k": 2, "a.b": [1, 2]}, {"k": 1}])
    assert labels == ["grpo b=[1, 2] k=1", "grpo b=[1, 2] k=2", "grpo b=null k=1"]
    assert variant_labels("grpo", [{"k": 1}]) == ["grpo"]
    paths = variant_labels("m", [{"a.path": "/x/model", "w_max": 1}, {"a.path": "/y/model", "w_max": 2}])
    assert paths == ["m w_max=1 path=/x/model", "m w_max=2 path=/y/model"]  # what a user changed comes first
    many = variant_labels("m", [{f"k{i}": i for i in range(6)}, {}])
    assert many[0] == "m k0=0 k1=1 k2=2 k3=3 (+2 keys)" and many[1].endswith("(+2 keys)") and many[0] != many[1]
