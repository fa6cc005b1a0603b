"""Every run of every recipe passes `dara.preflight --skip-env` on its cluster, composed once per (task, model,
cluster, further overrides): no estimator file sets a key the preflight reads."""

from __future__ import annotations

import re

import pytest
from omegaconf import OmegaConf

from dara.config import CONF_DIR, compose
from dara.preflight import preflight
from recipes import RECIPES, load

# the config the preflight reads: anything else cannot change its answer
PREFLIGHT_KEYS = ("trainer", "data", "actor_rollout_ref", "run.hardware", "run.model_facts", "run.checkpoint",
                  "run.max_model_len", "critic")


def test_estimator_files_set_nothing_the_preflight_reads():
    for path in sorted((CONF_DIR / "estimator").glob("*.yaml")):
        node = OmegaConf.load(path)
        touched = [key for key in PREFLIGHT_KEYS if OmegaConf.select(node, key) is not None]
        assert not touched, f"{path.name} sets {touched}"


def assert_verdict_agrees_with_arithmetic(section) -> None:
    """The time-limit verdict names the way its own arithmetic leaves: a clean stop at the signal only when a step
    + a save fit in the lead, else the requeue at the limit from a save_freq checkpoint (or one job for all)."""
    total, fits, lead = re.search(r"a step \+ a save = [\d.]+ \+ [\d.]+ min .*? = ([\d.]+) min (<=|>) ([\d.]+) min",
                                  section.lines[1]).groups()
    assert (fits == "<=") == (float(total) <= float(lead)), section.lines[1]
    per_job, steps = re.search(r"-> (\d+) steps per job; save_freq -?\d+; (\d+) steps", section.lines[0]).groups()
    if int(per_job) >= int(steps):
        assert section.verdict == f"all {steps} steps fit in one job"
    elif fits == "<=":
        assert section.verdict.startswith("each job stops at the pre-timeout signal"), section.verdict
    else:
        assert section.verdict.startswith("each job requeues itself when Slurm ends it at the limit"), section.verdict


@pytest.mark.slow
def test_every_run_of_every_recipe_passes_preflight_on_its_cluster():
    groups = {}
    for name in RECIPES:
        module = load(name)
        for run in module.runs(module.DEFAULT_SEEDS):
            groups.setdefault((run.task, run.model, run.cluster, run.extra, run.total_steps), []).append(run)
    failures = []
    for runs in groups.values():
        cfg = compose(runs[0].overrides())
        report = preflight(cfg, skip_env=True)
        assert [s.title for s in report.sections] == ["configuration", "rollout", "allocation", "memory",
                                                     "checkpoints", "time limit", "ray ports"]
        (time_section,) = [s for s in report.sections if s.title == "time limit"]
        if cfg.trainer.device == "cuda":  # the step time was found for every GPU run
            assert "min/step ESTIMATE" in time_section.lines[0], report.text()
            assert_verdict_agrees_with_arithmetic(time_section)
        if not report.ok:
            failures.append(report.text())
    assert sum(len(r) for r in groups.values()) == sum(len(load(n).runs(load(n).DEFAULT_SEEDS)) for n in RECIPES)
    assert not failures, "\n\n".join(failures)


def test_slurm_launcher_refuses_a_failing_run_and_submits_nothing(tmp_path, monkeypatch):
    import subprocess

    from recipes.runner import RecipeError, SlurmOptions, launch_slurm, with_options

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("a command was run (sbatch)"))
    runs = [r for r in load("math_main").runs((0,)) if r.model == "deepseek-r1-distill-qwen-7b" and r.method == "grpo"]
    runs = with_options(runs, output_root=str(tmp_path))
    # 4 h jobs at an estimated 45 min per 7B math step: no job reaches the next save
    with pytest.raises(RecipeError, match="preflight failed for 1 job array"):
        launch_slurm(runs, SlurmOptions(time="4:00:00"), skip_env=True)


def test_recipes_preflight_flag_checks_every_seed_group(capsys, tmp_path):
    from recipes.__main__ import main

    assert main(["smoke", "--preflight", "--seeds", "0", "1", "--output-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "preflight [1/1] smoke-tiny-dara_asym-s{0,1}: ok" in out and "2 of 2 runs pass" in out
