"""The recipe runner without composing or training: listings, deterministic names, skip-finished, sbatch commands."""

from __future__ import annotations

import json
import shlex

import pytest

from recipes import RECIPES, load
from recipes.__main__ import main
from recipes.group_size import settings
from recipes.runner import (
    PROJECT_ROOT,
    SBATCH_SCRIPT,
    RecipeError,
    Run,
    SlurmOptions,
    expected_steps,
    is_finished,
    launch_local,
    launch_slurm,
    parse_squeue,
    sbatch_command,
    seed_groups,
    train_command,
    with_options,
)


def finish(run: Run, steps: int | None = None) -> None:
    """Write the metrics.jsonl a completed run leaves (one line per step up to its last)."""
    run.output_dir.mkdir(parents=True, exist_ok=True)
    last = steps or expected_steps(run)
    lines = [json.dumps({"step": step, "reward/format/mean": 0.5}) for step in range(1, last + 1)]
    (run.output_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_list_names_every_recipe_with_its_run_count(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in RECIPES:
        module = load(name)
        assert f"{len(module.runs(module.DEFAULT_SEEDS)):4d} runs" in out.split(name, 1)[1].splitlines()[0]


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_dry_run_lists_each_run_with_overrides_and_folder(recipe, capsys, tmp_path):
    module = load(recipe)
    runs = with_options(module.runs(module.DEFAULT_SEEDS), output_root=str(tmp_path), extra=[f"run.recipe={recipe}"])
    assert main([recipe, "--dry-run", "--output-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("(to run)") == len(runs) and "(finished)" not in out
    for run in runs:
        assert f"output: {tmp_path / run.name}" in out
        assert f"python -m dara.train {shlex.join(run.overrides())}" in out
    assert not any(tmp_path.iterdir()), "a dry run writes nothing"


def test_names_are_deterministic_and_unique_across_the_paper():
    names = [run.name for recipe in RECIPES for run in load(recipe).runs(load(recipe).DEFAULT_SEEDS)]
    again = [run.name for recipe in RECIPES for run in load(recipe).runs(load(recipe).DEFAULT_SEEDS)]
    assert names == again
    # the group-size study's G=4 runs are the main table's (shared on purpose); every other name is unique
    main_names = {r.name for r in load("toolrl_main").runs((0, 1, 2, 4, 5))}
    shared = [n for n in names if n in main_names]
    assert len(set(names)) == len(names) - (len(shared) - len(main_names))


def test_seeds_option_and_only_filter(capsys, tmp_path):
    assert main(["three_rewards", "--dry-run", "--seeds", "7", "9", "--only", "dara_sym",
                 "--output-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("(to run)") == 2
    assert "toolrl_three_rewards-qwen2.5-1.5b-instruct-dara_sym-s7" in out and "-s9" in out
    assert "-grpo-" not in out


def test_finished_runs_are_skipped_by_every_launcher(capsys, tmp_path):
    runs = with_options(load("smoke").runs((0, 1)), output_root=str(tmp_path))
    finish(runs[0])
    finish(runs[1], steps=2)  # stopped before its last step (3): not finished
    assert is_finished(runs[0]) and not is_finished(runs[1])
    assert main(["smoke", "--dry-run", "--seeds", "0", "1", "--output-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "smoke-tiny-dara_asym-s0  (finished)" in out and "smoke-tiny-dara_asym-s1  (to run)" in out
    launch_slurm(runs, dry_run=True)
    out = capsys.readouterr().out
    assert "--array=1 " in out and "1 runs to submit, 1 already finished" in out
    assert launch_local(runs[:1]) == 0  # nothing to start
    assert "finished, skipped" in capsys.readouterr().out


SQUEUE = """toolrl-qwen2.5-1.5b-instruct-grpo|0|8812_0|RUNNING
toolrl-qwen2.5-1.5b-instruct-grpo|2|8812_2|PENDING
toolrl-qwen2.5-1.5b-instruct-gdpo|[1-2,4%2]|8813_[1-2,4%2]|PENDING
toolrl-qwen2.5-1.5b-instruct-dvao|N/A|8814|RUNNING
"""


def test_slurm_launcher_skips_runs_whose_job_is_queued_and_says_so(capsys, tmp_path):
    assert parse_squeue(SQUEUE)[("toolrl-qwen2.5-1.5b-instruct-gdpo", 4)] == ("8813_[1-2,4%2]", "PENDING")
    runs = [r for r in with_options(load("toolrl_main").runs((0, 1, 2)), output_root=str(tmp_path))
            if r.model == "qwen2.5-1.5b-instruct" and r.method in ("grpo", "gdpo", "dvao")]
    launch_slurm(runs, dry_run=True, squeue=lambda: SQUEUE)
    out = capsys.readouterr().out
    assert "toolrl-qwen2.5-1.5b-instruct-grpo-s0: job 8812_0 is running; skipped" in out
    assert "toolrl-qwen2.5-1.5b-instruct-grpo-s2: job 8812_2 is pending; skipped" in out
    arrays = [line.split("--array=")[1].split()[0] for line in out.splitlines() if "--array=" in line]
    assert arrays == ["1", "0", "0,1,2"]  # grpo: seed 1; gdpo: seed 0; dvao: a plain job names no seed
    assert "3 job arrays, 5 runs to submit, 0 already finished, 4 queued or running" in out
    launch_slurm(runs, dry_run=True, squeue=lambda: None)  # no squeue here: nothing is skipped, and it says so
    out = capsys.readouterr().out
    assert "squeue did not answer" in out and "9 runs to submit" in out


def test_steps_override_moves_the_finish_line(tmp_path):
    run = with_options(load("smoke").runs((0,)), output_root=str(tmp_path), total_steps=2)[0]
    assert expected_steps(run) == 2 and "trainer.total_training_steps=2" in run.overrides()
    finish(run, steps=2)
    assert is_finished(run)


def test_sbatch_array_per_seed_group_with_resources_from_the_cluster(tmp_path):
    runs = with_options(load("toolrl_main").runs((0, 1, 2, 4, 5)), output_root=str(tmp_path))
    groups = seed_groups(runs)
    assert len(groups) == 12 and all(len(g) == 5 for g in groups)
    command = sbatch_command(groups[0], SlurmOptions(partition="gpu", time="24:00:00",
                                                     extra_args=("--qos=high",)))
    first = groups[0][0]
    assert command[:2] == ["sbatch", "--parsable"]
    assert "--array=0,1,2,4,5" in command and "--nodes=1" in command and "--gpus-per-node=4" in command
    assert {"--requeue", "--open-mode=append", "--partition=gpu", "--time=24:00:00", "--qos=high"} <= set(command)
    assert f"--output={tmp_path}/{first.name_for('%a')}/logs/slurm-%A_%a.out" in command
    assert f"--chdir={PROJECT_ROOT}" in command
    script = command.index(str(SBATCH_SCRIPT))
    assert command[script + 1:] == ["--seed-from-array", *first.group_overrides()]
    assert not any(item.startswith("run.seed=") for item in command)


def test_cpu_cluster_asks_for_no_gpus_and_math_for_eight(tmp_path):
    smoke = sbatch_command(load("smoke").runs((0,)))
    assert not any(item.startswith("--gpus") for item in smoke) and "--exclusive" not in smoke
    math = sbatch_command(seed_groups(load("math_main").runs((0,)))[0])
    assert "--gpus-per-node=8" in math and "--nodes=1" in math


def test_local_command_is_the_training_entry_with_skip_if_finished():
    run = load("fixed_weight").runs((3,))[1]
    command = train_command(run, python="PY")
    assert command[:3] == ["PY", "-m", "dara.train"]
    assert command[3:] == [*run.overrides(), "run.skip_if_finished=true"]
    assert "estimator=static" in command and "algorithm.dara.form=asym" in command
    assert run.name == "deepscaler-deepseek-r1-distill-qwen-1.5b-static_asym-s3"


def test_bad_requests_fail_with_a_clear_message():
    with pytest.raises(ValueError, match="G=3"):
        settings(3)
    with pytest.raises(RecipeError, match=">= 0"):
        sbatch_command([Run(task="smoke", model="tiny", estimator="grpo", cluster="cpu", seed=-1)])


def test_every_run_carries_its_recipe_as_the_wandb_group(capsys, tmp_path):
    """run.recipe (the wandb group) is the recipe's name in every run's overrides, local or Slurm."""
    from dara.tracking import wandb_env
    from recipes.slurm import compose_run

    assert main(["three_rewards", "--dry-run", "--seeds", "0", "--output-root", str(tmp_path)]) == 0
    commands = [line for line in capsys.readouterr().out.splitlines() if "python -m dara.train" in line]
    assert commands and all("run.recipe=three_rewards" in line for line in commands)
    run = with_options(load("three_rewards").runs((0,)), extra=["run.recipe=three_rewards"])[0]
    assert "run.recipe=three_rewards" in sbatch_command([run], SlurmOptions())
    cfg = compose_run(run.overrides())
    assert cfg.run.recipe == "three_rewards"
    assert wandb_env(cfg, {})["WANDB_RUN_GROUP"] == "three_rewards"


def test_every_job_gets_an_explicit_time_and_the_pre_timeout_signal(tmp_path):
    """--time: the launcher's, else the cluster file's job_time_limit_minutes; the signal lead from the cluster."""
    from recipes.runner import job_time

    group = seed_groups(with_options(load("toolrl_main").runs((0, 1)), output_root=str(tmp_path)))[0]
    default = sbatch_command(group)
    assert "--time=1-00:00:00" in default and "--signal=B:USR1@300" in default  # a100_40g_x4: 1440 min, 5 min
    assert "--time=1-00:00:00" not in sbatch_command(group, SlurmOptions(time="12:00:00"))
    smoke = sbatch_command(load("smoke").runs((0,)))
    assert "--time=1:00:00" in smoke  # the CPU cluster file's 60 minutes
    calibrated = sbatch_command(group, SlurmOptions(calibration="calib.json"))
    script = calibrated.index(str(SBATCH_SCRIPT))
    assert calibrated[script + 1:script + 3] == ["--calibration", str(PROJECT_ROOT / "calib.json")]
    assert job_time(group[0], "2-00:00:00") == "2-00:00:00"
    with pytest.raises(RecipeError, match="sets no limit"):
        job_time(group[0], "UNLIMITED")


def test_dry_run_shows_the_time_each_job_gets(capsys, tmp_path):
    assert main(["smoke", "--dry-run", "--launcher", "slurm", "--output-root", str(tmp_path)]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[recipes] sbatch")]
    assert "--time=1:00:00" in line and "--signal=B:USR1@300" in line
