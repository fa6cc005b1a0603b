"""Every run of every recipe passes `dara.preflight --skip-env` on its cluster, composed once per (task, model,
cluster, further overrides): no estimator file sets a key the preflight reads."""

from __future__ import annotations

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
        if cfg.trainer.device == "cuda":  # the step time was found for every GPU run (verdicts: test_preflight.py)
            assert "min/step ESTIMATE" in report.sections[5].lines[0], report.text()
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
