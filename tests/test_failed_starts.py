"""A failed start leaves nothing behind that blocks the next one: Ray options, the /tmp alias, every way out of the
local Ray session, reward ranges, a second run on the host."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

import dara
from dara.config import compose
from dara.config_checks import (
    ConfigError,
    check_config,
    check_ray_options,
    narrow_range_warnings,
    ray_option_problem,
)
from dara.verl.cpu import ray_local
from dara.verl.cpu.ray_local import alias_path, local_ray_session, ray_folders, stop_local_ray
from dara.verl.estimators import RewardRangeError, check_reward_ranges

LONG = ["a_rather_long_folder_name"] * 4  # deep enough that Ray is given the short alias in /tmp


# ----------------------------------------------------------------------------- Ray options, before Ray starts
@pytest.mark.parametrize("ray_init, named", [
    ({"runtime_env": {"env_vars": {"FOO": 1}}}, ["env_vars.FOO is 1 (int)", "strings only", 'FOO="1"']),
    ({"runtime_env": {"env_vars": {"FOO": True}}}, ["env_vars.FOO is True (bool)", 'FOO="true"']),
    ({"runtime_env": {"env_vars": {"FOO": None}}}, ["env_vars.FOO is None", "give it a string"]),
    ({"runtime_env": {"env_vars": {"OK": "1"}, "pip": 5}}, ["runtime_env: Ray refuses it", "pip"]),
    ({"num_cpu": 4}, ["ray_kwargs.ray_init has num_cpu, not an option of ray.init", "num_cpus"]),
    ({"_tmp_dir": "/x"}, ["_tmp_dir, not an option of ray.init"]),
    ({"num_cpus": 4, "_temp_dir": "/tmp/x", "include_dashboard": False,
      "runtime_env": {"env_vars": {"A": "1"}, "working_dir": None}}, None),  # what Ray takes passes
])
def test_ray_options_ray_would_refuse_are_one_line(ray_init, named):
    problem = ray_option_problem(ray_init)
    assert problem is None if named is None else "\n" not in problem and all(text in problem for text in named)


def test_the_ray_options_check_runs_in_check_config():
    with pytest.raises(ConfigError, match=r"env_vars\.FOO is 1 \(int\)"):
        check_config(compose(["+ray_kwargs.ray_init.runtime_env.env_vars.FOO=1"], resolve=False))
    # the quoted form the message suggests is a string, and passes
    check_ray_options(compose(['+ray_kwargs.ray_init.runtime_env.env_vars.FOO="1"'], resolve=False))


# ----------------------------------------------------------------------------- the alias in /tmp
@pytest.mark.parametrize("stale", ["folder", "file", "link elsewhere", "dangling link"])
def test_a_stale_entry_at_the_alias_path_is_replaced(tmp_path, stale):
    deep = tmp_path.joinpath(*LONG)
    target = (deep / "ray" / "tmp").resolve()
    alias = alias_path(target)
    assert not os.path.lexists(alias)
    if stale == "folder":  # what an older crash left: Ray's session folder recreated at the alias path
        (alias / "session_2026-01-01_00-00-00_000000_1" / "logs").mkdir(parents=True)
        (alias / "session_2026-01-01_00-00-00_000000_1" / "logs" / "raylet.out").write_text("old")
    elif stale == "file":
        alias.write_text("x")
    elif stale == "link elsewhere":
        alias.symlink_to(tmp_path, target_is_directory=True)
    else:
        alias.symlink_to(tmp_path / "gone", target_is_directory=True)
    try:
        folders = ray_folders(deep)
        assert folders["tmp_for_ray"] == alias and alias.is_symlink() and alias.resolve() == target
        with local_ray_session(deep, shutdown=False) as ray_init:
            assert ray_init == {"_temp_dir": str(alias)}
        assert not os.path.lexists(alias) and target.is_dir()
    finally:
        ray_local._clear(alias)


def test_an_alias_path_that_cannot_be_cleared_gives_way_to_another_name(tmp_path, monkeypatch):
    deep = tmp_path.joinpath(*LONG)
    target = (deep / "ray" / "tmp").resolve()
    base = alias_path(target)
    base.mkdir()  # someone else's folder, say, that this user may not remove
    real_clear = ray_local._clear

    def refuse(path):
        if path == base:
            raise PermissionError(13, "Permission denied", str(path))
        real_clear(path)

    monkeypatch.setattr(ray_local, "_clear", refuse)
    try:
        alias = ray_folders(deep)["tmp_for_ray"]
        assert alias != base and alias.name.startswith(base.name + "-") and alias.resolve() == target
        assert len(str(alias)) + ray_local._RAY_SOCKET_SUFFIX <= ray_local._SOCKET_PATH_LIMIT
        real_clear(alias)
    finally:
        real_clear(base)


# ----------------------------------------------------------------------------- stopping Ray on every way out
def test_stop_local_ray_stops_the_processes_of_a_ray_init_that_failed_halfway(monkeypatch):
    import ray
    from ray._private import worker

    assert not ray.is_initialized()
    killed = []  # the node `ray._private.worker._global_node` holds after a ray.init that started, then failed
    node = SimpleNamespace(is_head=lambda: True, destroy_external_storage=lambda: None,
                           kill_all_processes=lambda **options: killed.append(options))
    monkeypatch.setattr(worker, "_global_node", node)
    stop_local_ray()
    assert killed == [{"check_alive": False, "allow_graceful": True, "wait": True}]  # waited for, before the alias goes
    assert worker._global_node is None
    stop_local_ray()  # nothing started: nothing to do


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_the_session_stops_ray_before_removing_the_alias_on_ctrl_c_and_errors(tmp_path, monkeypatch, error):
    deep = tmp_path.joinpath(*LONG)
    alias = alias_path((deep / "ray" / "tmp").resolve())
    seen = []  # Ray stopped while its temp folder was still reachable, a second Ctrl-C ignored meanwhile
    monkeypatch.setattr(ray_local, "stop_local_ray", lambda: seen.append((alias.is_symlink(),
                                                                          signal.getsignal(signal.SIGINT))))
    env = {key: os.environ.get(key) for key in ("RAY_TMPDIR", "HOME", "RAY_AUTH_MODE")}
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(error), local_ray_session(deep) as ray_init:
        assert ray_init == {"_temp_dir": str(alias)}
        raise error()
    assert seen == [(True, signal.SIG_IGN)] and signal.getsignal(signal.SIGINT) == before
    assert not os.path.lexists(alias)
    assert {key: os.environ.get(key) for key in env} == env


def test_the_drivers_failures_are_one_line():
    import ray

    from dara.train import failure_line

    cause = ValueError("reward channel 'format' scored 1, outside its range [0, 0.5]\nmore detail")
    wrapped = ray.exceptions.RayTaskError("TaskRunner.run", "Traceback (most recent call last):\n  ...", cause)
    assert failure_line(wrapped) == "ValueError: reward channel 'format' scored 1, outside its range [0, 0.5]"
    line = failure_line(ray.exceptions.ActorDiedError())
    assert line.startswith("ActorDiedError: ") and "\n" not in line
    assert failure_line(TypeError("runtime_env['env_vars'] must be of type Dict[str, str]")) == (
        "TypeError: runtime_env['env_vars'] must be of type Dict[str, str]")


def test_ctrl_c_in_dara_train_is_one_line_and_exit_130(monkeypatch, capsys):
    import dara.train as train

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "_hydra_main", interrupted)
    monkeypatch.setattr(sys, "argv", ["dara.train"])
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    with pytest.raises(SystemExit) as stop:
        train.main()
    assert stop.value.code == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("[dara] interrupted (Ctrl-C): what Ray started is stopped")
    # main() set HYDRA_FULL_ERROR for the composition only: gone again, so later commands shorten their errors
    assert "HYDRA_FULL_ERROR" not in os.environ


@pytest.mark.slow  # a real Ray head node (~10-20 s on a busy machine)
@pytest.mark.starts
def test_a_ray_init_that_ray_refuses_leaves_no_process_and_nothing_in_tmp(tmp_path):
    """The path of the issue without dara's check: Ray starts its processes, then refuses the runtime_env."""
    deep = tmp_path.joinpath(*LONG)
    script = (
        "import sys, ray\n"
        "from dara.verl.cpu.ray_local import local_ray_session\n"
        "try:\n"
        "    with local_ray_session(sys.argv[1]) as extra:\n"
        "        ray.init(num_cpus=1, include_dashboard=False, object_store_memory=78643200,\n"
        "                 runtime_env={'env_vars': {'FOO': 1}}, **extra)\n"
        "except TypeError as error:\n"
        "    print('refused', error)\n"
        "from ray._private import worker\n"
        "print('node', worker._global_node)\n")
    alias = alias_path((deep / "ray" / "tmp").resolve())
    out = subprocess.run([sys.executable, "-c", script, str(deep)], capture_output=True, text=True, timeout=300,
                         cwd=dara.PROJECT_ROOT)
    assert "refused" in out.stdout and "node None" in out.stdout, out.stdout + out.stderr[-3000:]
    assert not os.path.lexists(alias)  # neither the link nor a folder Ray's exit hook recreated there
    ps = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(deep) not in ps and alias.name not in ps  # no Ray process of that session runs on


# ----------------------------------------------------------------------------- reward ranges
def test_a_reward_range_narrower_than_the_declared_one_warns_before_ray(capsys):
    assert narrow_range_warnings({"format": [0, 1]}, {"format": [0, 1]}) == []
    assert narrow_range_warnings({"format": [0, 1]}, {"format": [-1, 2]}) == []  # wider: the reward's scores fit
    assert narrow_range_warnings({"format": [0, 1]}, {"format": "bad"}) == []  # left to the options' own check
    cfg = compose(["algorithm.dara.reward_ranges.format=[0,0.5]"], resolve=False)
    check_config(cfg)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0] == ("[dara] warning: algorithm.dara.reward_ranges.format=[0, 0.5] is narrower than the range the "
                      "reward declares for 'format', [0, 1]: a format score outside [0, 0.5] stops the run")
    assert list(cfg.algorithm.dara.reward_ranges.format) == [0, 0.5]


def test_a_score_outside_its_range_stops_the_run_naming_channel_score_and_range():
    names = ["format", "correctness"]
    ranges = {"format": [0.0, 0.5], "correctness": [-3.0, 3.0]}
    check_reward_ranges(torch.tensor([[0.5, -3.0], [0.0, 3.0]], dtype=torch.float64), names, ranges, step=1)
    check_reward_ranges(torch.tensor([[9.0, 9.0]]), names, {})  # no ranges: nothing to hold them to
    scores = torch.tensor([[0.25, 1.0], [1.0, 0.0], [0.75, 2.0]], dtype=torch.float64)
    with pytest.raises(RewardRangeError) as error:
        check_reward_ranges(scores, names, ranges, step=3)
    assert str(error.value) == ("reward channel 'format' scored 1, outside its range [0, 0.5] "
                                "(algorithm.dara.reward_ranges.format); 2 of 3 samples of step 3 lie outside it")
    with pytest.raises(RewardRangeError, match=r"'correctness' scored -4, outside its range \[-3, 3\]"):
        check_reward_ranges(torch.tensor([[0.0, -4.0], [0.0, 3.5]]), names, ranges)
    assert issubclass(RewardRangeError, ValueError)


@pytest.mark.parametrize("estimator", ["grpo", "dara_asym"])
def test_the_trainer_stops_on_a_score_outside_its_range_before_any_estimator(monkeypatch, estimator):
    """The project trainer's pre-advantage step holds the real rows (not verl's padding) to the ranges."""
    import transfer_queue as tq
    from omegaconf import OmegaConf

    from dara.verl.trainer import DaraTrainer

    rows = [(1.0, 0.5), (0.0, 0.0), (-1.0, 1.0)]  # (correctness, format); the last row is padding
    fields = [{"reward_extra_info": {"correctness": c, "format": f, "score": c + f}} for c, f in rows]
    monkeypatch.setattr(tq, "kv_batch_get", lambda keys, partition_id, select_fields: {"extra_fields": fields})
    batch = SimpleNamespace(keys=["a", "b", "c"], partition_id="train",
                            tags=[{"is_padding": False}, {"is_padding": False}, {"is_padding": True}])
    trainer = object.__new__(DaraTrainer)
    trainer.global_steps = 4
    trainer.config = OmegaConf.create({"algorithm": {
        "adv_estimator": estimator, "reward_channels": ["correctness", "format"],
        "dara": {"reward_ranges": {"correctness": [-3.0, 3.0], "format": [0.0, 0.5]}}}})
    channels = trainer._channel_batch(batch, {})  # the padding row's format 1.0 is not a sample's score
    assert channels.scores.shape == (3, 2) and channels.real.tolist() == [True, True, False]
    fields[1]["reward_extra_info"]["format"] = 1.0
    with pytest.raises(RewardRangeError, match=r"^reward channel 'format' scored 1, outside its range \[0, 0\.5\] "
                       r"\(algorithm\.dara\.reward_ranges\.format\); 1 of 2 samples of step 4 lie outside it$"):
        trainer._channel_batch(batch, {})


@pytest.mark.slow  # a dara.train process (~10 s of imports and checks)
@pytest.mark.starts
def test_a_second_training_run_on_the_host_stops_in_one_line_before_its_assets(tmp_path, python_module):
    """One run holds dara.run_lock's weight-sync lock: `dara.train` on another folder names it."""
    from dara.run_lock import WEIGHT_SYNC_LOCK

    hold = ("import sys, time\nfrom dara.run_lock import weight_sync_lock\n"
            "with weight_sync_lock(sys.argv[1]):\n    print('locked', flush=True)\n    time.sleep(600)\n")
    holder = subprocess.Popen([sys.executable, "-c", hold, "/runs/first-s0"], stdout=subprocess.PIPE, text=True,
                              cwd=dara.PROJECT_ROOT)
    try:
        assert holder.stdout.readline().strip() == "locked", f"{WEIGHT_SYNC_LOCK} is held by a run on this machine"
        out = python_module("dara.train", f"run.output_root={tmp_path}", timeout=180)
    finally:
        holder.kill()
        holder.wait()
    lines = out.stderr.strip().splitlines()
    assert out.returncode != 0 and len(lines) == 1, out.stderr[-2000:]
    assert lines[0].startswith("[dara] another training run on this host is using verl's weight-sync sockets")
    assert f"pid {holder.pid}" in lines[0] and "run folder /runs/first-s0" in lines[0]
    assert not list(tmp_path.rglob("assets")) and not list(tmp_path.rglob("ray"))
