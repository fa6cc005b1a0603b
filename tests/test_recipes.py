"""The recipe runner without composing or training: listings, deterministic names, skip-finished, sbatch commands."""

from __future__ import annotations

import shlex

import pytest

from dara.io import atomic_write_jsonl
from recipes import RECIPES, load
from recipes import runner as rn
from recipes.__main__ import main


def test_list_names_every_recipe_with_its_run_count(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in RECIPES:
        module = load(name)
        assert f"{len(module.runs(module.DEFAULT_SEEDS)):4d} runs" in out.split(name, 1)[1].splitlines()[0]


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_dry_run_lists_each_run_with_overrides_folder_and_wandb_group(recipe, capsys, tmp_path):
    module = load(recipe)
    runs = rn.with_options(module.runs(module.DEFAULT_SEEDS), output_root=str(tmp_path), extra=[f"run.recipe={recipe}"])
    assert main([recipe, "--dry-run", "--output-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("(to run)") == len(runs) and "(finished)" not in out
    for run in runs:
        assert f"output: {tmp_path / run.name}" in out
        assert f"python -m dara.train {shlex.join(run.overrides())}" in out  # run.recipe= is the wandb group
    assert not any(tmp_path.iterdir()), "a dry run writes nothing"


def test_names_are_unique_across_the_paper_but_group_size_4_is_the_main_tables_run():
    names = [run.name for recipe in RECIPES for run in load(recipe).runs(load(recipe).DEFAULT_SEEDS)]
    main_runs = {r.name: r for r in load("toolrl_main").runs()}
    assert len([n for n in names if n in main_runs]) == len(main_runs) + 12 and len(set(names)) == len(names) - 12
    # G=4: the main table's runs and folders (a rerun skips them), restating only toolrl's own defaults
    g4 = [r for r in load("group_size").runs((0, 1, 2)) if not r.variant]
    defaults = {"data.train_batch_size=512", "actor_rollout_ref.rollout.n=4",
                "actor_rollout_ref.actor.ppo_mini_batch_size=128"}
    assert len(g4) == 12 and all(set(r.overrides()) == set(main_runs[r.name].overrides()) | defaults for r in g4)
    g8 = next(r for r in load("group_size").runs((0,)) if r.variant == "g8")  # its name: test_configs.py
    assert {"data.train_batch_size=256", "actor_rollout_ref.actor.ppo_mini_batch_size=64"} <= set(g8.overrides())


def test_seeds_option_and_only_filter(capsys, tmp_path):
    assert main(["three_rewards", "--dry-run", "--seeds", "7", "9", "--only", "dara_sym",
                 "--output-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("(to run)") == 2 and "-grpo-" not in out
    assert "toolrl_three_rewards-qwen2.5-1.5b-instruct-dara_sym-s7" in out and "-s9" in out


def test_finished_runs_are_skipped_by_every_launcher(capsys, tmp_path):
    runs = rn.with_options(load("smoke").runs((0, 1)), output_root=str(tmp_path))
    for run, steps in ((runs[0], rn.expected_steps(runs[0])), (runs[1], 2)):  # the second stopped before step 3
        atomic_write_jsonl(run.output_dir / "metrics.jsonl", [{"step": step} for step in range(1, steps + 1)])
    assert rn.is_finished(runs[0]) and not rn.is_finished(runs[1])
    assert main(["smoke", "--dry-run", "--seeds", "0", "1", "--output-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "smoke-tiny-dara_asym-s0  (finished)" in out and "smoke-tiny-dara_asym-s1  (to run)" in out
    rn.launch_slurm(runs, dry_run=True)
    out = capsys.readouterr().out
    assert "--array=1 " in out and "1 runs to submit, 1 already finished" in out
    # --steps moves the finish line
    short = rn.with_options(runs, total_steps=2)[1]
    assert rn.expected_steps(short) == 2 and rn.is_finished(short)
    assert "trainer.total_training_steps=2" in short.overrides()
    assert main(["smoke", "--seeds", "0", "--output-root", str(tmp_path)]) == 0  # nothing to start
    assert "1 runs: 1 finished (skipped), 0 to run" in capsys.readouterr().out
    # the local launcher runs the rest in turn, one line each with the time left (`false`: each start fails)
    assert rn.run_in_turn([*runs, *rn.with_options(runs[1:], total_steps=4)], "race", python="false") == 2
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "[race] 3 runs: 1 finished (skipped), 2 to run"
    assert [line.split(":")[0] for line in lines[1:3]] == [f"[race] {i}/2 smoke-tiny-dara_asym-s1" for i in (1, 2)]
    assert all("FAILED (exit 1)" in line and "min left" in line for line in lines[1:3])
    assert lines[3] == "[race] 0 ran, 1 skipped, 2 failed: smoke-tiny-dara_asym-s1, smoke-tiny-dara_asym-s1"


def test_sbatch_array_per_seed_group_with_resources_time_and_signal_from_the_cluster(tmp_path):
    runs = rn.with_options(load("toolrl_main").runs(), output_root=str(tmp_path))
    groups = rn.seed_groups(runs)
    assert len(groups) == 12 and all(len(g) == 5 for g in groups)
    options = rn.SlurmOptions(partition="gpu", time="12:00:00", extra_args=("--qos=high",), calibration="calib.json")
    command = rn.sbatch_command(groups[0], options)
    first = groups[0][0]
    assert command[:2] == ["sbatch", "--parsable"] and "--job-name=toolrl-qwen2.5-1.5b-instruct-grpo" in command
    assert "--array=0,1,2,4,5" in command and "--nodes=1" in command and "--gpus-per-node=4" in command
    assert {"--requeue", "--open-mode=append", "--partition=gpu", "--time=12:00:00", "--qos=high"} <= set(command)
    assert f"--output={tmp_path}/{first.name_for('%a')}/logs/slurm-%A_%a.out" in command
    assert f"--chdir={rn.PROJECT_ROOT}" in command and "--signal=B:USR1@300" in command  # a100_40g_x4: 5 min lead
    script = command.index(str(rn.SBATCH_SCRIPT))
    assert command[script + 1:] == ["--calibration", str(rn.PROJECT_ROOT / "calib.json"), "--seed-from-array",
                                    *first.group_overrides()]
    assert "--time=1-00:00:00" in rn.sbatch_command(groups[0])  # the cluster file's 1440 minutes
    smoke = rn.sbatch_command(load("smoke").runs())
    assert "--time=1:00:00" in smoke and not any(item.startswith("--gpus") for item in smoke)
    assert "--exclusive" not in smoke
    assert "--gpus-per-node=8" in rn.sbatch_command(rn.seed_groups(load("math_main").runs())[0])


def test_local_command_is_the_training_entry_with_skip_if_finished():
    run = load("fixed_weight").runs((3,))[1]
    command = rn.train_command(run, python="PY")
    assert command == ["PY", "-m", "dara.train", *run.overrides(), "run.skip_if_finished=true"]
    assert "estimator=static" in command and "algorithm.dara.form=asym" in command
    assert run.name == "deepscaler-deepseek-r1-distill-qwen-1.5b-static_asym-s3"


def test_bad_requests_fail_with_a_clear_message(capsys):
    with pytest.raises(rn.RecipeError, match=">= 0"):
        rn.sbatch_command([rn.Run(task="smoke", model="tiny", estimator="grpo", cluster="cpu", seed=-1)])
    with pytest.raises(rn.RecipeError, match="sets no limit"):
        rn.job_time(load("smoke").runs()[0], "UNLIMITED")
    assert main(["gpu_smoke", "--launcher", "slurm", "--dry-run"]) == 2
    assert capsys.readouterr().err == ("[recipes] error: gpu_smoke runs on the GPU node itself: srun "
                                       "--gpus-per-node=1 python -m recipes gpu_smoke\n")


@pytest.mark.parametrize("name, first, order", [
    ("cpu_headline", "smoke_sparse-tiny_sparse-grpo-s0",
     lambda p: [(m, s) for m in ("grpo", "gdpo", "dara_sym", "dara_asym") for s in range(5)]),
    ("race_format", "smoke_rare-tiny_rare-gdpo-s0", lambda p: [(m, s) for s in p["seeds"] for m in p["methods"]]),
    ("race_length", "smoke_length-tiny_length-gdpo-s0",
     lambda p: [(m, s) for ms in (p["methods"], p["extra_methods"]) for s in p["seeds"] for m in ms]),
])
def test_each_race_runs_its_committed_protocol_in_order(name, first, order, capsys, tmp_path):
    from recipes.race import load_protocol

    race = load(name)
    protocol = load_protocol(race.protocol_file)
    runs = race.runs()
    assert runs[0].name == first and [(run.method, run.seed) for run in runs] == order(protocol)
    for run in runs:
        assert {f"trainer.total_training_steps={protocol['steps']}", f"actor_rollout_ref.rollout.n={protocol['group_size']}",
                f"data.train_batch_size={protocol['prompts_per_step']}"} <= set(run.overrides())
        assert ("algorithm.dara.weights=[1.0,5.0]" in run.overrides()) == run.method.startswith("static_")
    assert main([name, "--dry-run", "--output-root", str(tmp_path)]) == 0
    plan = [line.split() for line in capsys.readouterr().out.splitlines() if " method " in line and " seed " in line]
    assert [(words[2], int(words[4])) for words in plan] == order(protocol)
