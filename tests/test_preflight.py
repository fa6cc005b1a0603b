"""dara.preflight: the rejections the issue names, the memory plan against hand calculations, the checkpoint
policy's callback, the HOME rule, and the hook that makes dara.train fail before Ray.

Each composition is the real one (Hydra over verl's trainer config and conf/), cached per override list.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import pytest

from dara.config_checks import ConfigError, check_config
from dara.preflight import compose, preflight
from dara.preflight.allocation import with_allocation
from dara.preflight.environment import check_environment
from dara.preflight.memory import GIB, plan
from dara.preflight.report import Section

MATH = ("task=deepscaler", "cluster=h100_x8")
TOOLRL = ("task=toolrl", "cluster=a100_40g_x4")


@functools.cache
def composed(*overrides: str):
    return compose(overrides)


def problems_of(report, section: str) -> list[str]:
    return [p for s in report.sections if s.title == section for p in s.problems]


def test_math_run_on_3_nodes_of_8_is_rejected_for_divisibility_and_dara_train_fails_before_ray():
    cfg = composed(*MATH, "model=deepseek-r1-distill-qwen-1.5b")
    assert preflight(cfg, skip_env=True).ok  # its own cluster: one 8-GPU node
    report = preflight(cfg, nodes=3, gpus_per_node=8, skip_env=True)
    (problem,) = problems_of(report, "allocation")
    assert "64 x 16 = 1024 is not divisible by the data-parallel size 24" in problem
    assert not report.ok and "would start" not in report.text().splitlines()[-1]
    with pytest.raises(ConfigError, match="data-parallel size 24"):  # the hook dara.train runs before Ray
        check_config(with_allocation(cfg, 3, 8))


def test_qwen3_with_its_full_context_at_utilization_0_4_is_rejected_for_the_kv_cache():
    cfg = composed(*MATH, "model=qwen3-4b-instruct-2507", "actor_rollout_ref.rollout.max_model_len=262144",
                   "actor_rollout_ref.rollout.gpu_memory_utilization=0.4")
    report = preflight(cfg, skip_env=True)
    (problem,) = problems_of(report, "memory")
    assert "KV cache" in problem and "262144" in problem
    # the project's setting: max_model_len = prompt + response = 9,024 tokens
    ok = composed(*MATH, "model=qwen3-4b-instruct-2507")
    assert ok.actor_rollout_ref.rollout.max_model_len == 1024 + 8000 and preflight(ok, skip_env=True).ok


def test_7b_math_run_on_2_a100_40gb_is_rejected_for_memory():
    cfg = composed("task=deepscaler", "cluster=a100_40g_x4", "model=deepseek-r1-distill-qwen-7b")
    report = preflight(cfg, nodes=1, gpus_per_node=2, skip_env=True)
    problems = problems_of(report, "memory")
    assert problems and all("39.4 GiB of a A100-40GB" in p for p in problems)
    assert any(p.startswith("training phase") for p in problems)


def test_gpu_run_without_flash_attn_is_rejected_with_the_fixing_command():
    cfg = composed(*TOOLRL, "model=qwen2.5-1.5b-instruct")
    section = Section("environment")
    real = importlib.util.find_spec
    check_environment(cfg, section, find_spec=lambda name: None if name == "flash_attn" else real(name),
                      driver=lambda: "590.10")
    assert any("flash_attn is not importable" in p and "--no-build-isolation" in p and "flash-attn==2.8.3" in p
               for p in section.problems)
    old = Section("environment")
    check_environment(cfg, old, find_spec=lambda name: object(), driver=lambda: "535.104")
    assert old.problems == [next(p for p in old.problems if "driver 535.104 < 580" in p)]
    if real("flash_attn") is None:  # this machine (no GPU stack): the full preflight says the same
        report = preflight(cfg)
        assert any("flash_attn" in p for p in problems_of(report, "environment"))
        assert preflight(cfg, skip_env=True).ok


def test_job_that_cannot_reach_its_next_checkpoint_is_rejected():
    cfg = composed(*MATH, "model=deepseek-r1-distill-qwen-7b")
    steps_per_job = (240 - cfg.run.hardware.job_startup_minutes) // cfg.run.hardware.step_minutes_estimate[cfg.run.model]
    assert steps_per_job < cfg.trainer.save_freq
    (problem,) = problems_of(preflight(cfg, time_limit_minutes=240, skip_env=True), "time limit")
    assert "requeue from the same checkpoint forever" in problem


# Hand calculations per paper model on its paper cluster (GiB per GPU), written out here independently of
# dara/preflight/memory.py: P parameters, W GPUs, T tokens per micro-batch, V vocabulary, h hidden, L layers.
# training = 16 P / W (fp32 params, grads, Adam) [+ 2 P / W bf16 reference when resident] + 4 x the largest FSDP
# unit + T h 2 (L + 16) + 10 T V + 2 GiB; rollout = resident FSDP state + utilisation x card + 2 GiB;
# KV per token = 2 L kv_heads head_dim 2 B / TP.
G = 2**30
HAND = {
    # qwen2.5-1.5b, 4 x A100-40GB, T 16384: ref resident (KL in reward), nothing offloaded
    "qwen2.5-1.5b-instruct": (TOOLRL, (16 + 2) * 1.5437e9 / 4 + 4 * 151936 * 1536 + 16384 * 1536 * 2 * 44
                              + 10 * 16384 * 151936 + 2 * G,
                              (4 + 8 + 2) * 1.5437e9 / 4 + 0.5 * 39.4 * G + 2 * G, 2 * 28 * 2 * 128 * 2),
    # qwen2.5-3b, medium: optimizer and reference offloaded, T 12288
    "qwen2.5-3b-instruct": (TOOLRL, 16 * 3.0859e9 / 4 + 4 * 151936 * 2048 + 12288 * 2048 * 2 * 52
                            + 10 * 12288 * 151936 + 2 * G,
                            4 * 3.0859e9 / 4 + 0.4 * 39.4 * G + 2 * G, 2 * 36 * 2 * 128 * 2),
    # R1-distill 1.5B, 8 x H100, T 32768, KL loss with a resident reference
    "deepseek-r1-distill-qwen-1.5b": (MATH, (16 + 2) * 1.7771e9 / 8 + 4 * 151936 * 1536 + 32768 * 1536 * 2 * 44
                                      + 10 * 32768 * 151936 + 2 * G,
                                      (4 + 8 + 2) * 1.7771e9 / 8 + 0.6 * 79.2 * G + 2 * G, 2 * 28 * 2 * 128 * 2),
    # R1-distill 7B, large: optimizer and reference offloaded, T 16384
    "deepseek-r1-distill-qwen-7b": (MATH, 16 * 7.6156e9 / 8 + 4 * 152064 * 3584 + 16384 * 3584 * 2 * 44
                                    + 10 * 16384 * 152064 + 2 * G,
                                    4 * 7.6156e9 / 8 + 0.55 * 79.2 * G + 2 * G, 2 * 28 * 4 * 128 * 2),
    # Qwen3-4B, medium on H100: reference offloaded, T 24576; 144 KiB of KV per token
    "qwen3-4b-instruct-2507": (MATH, 16 * 4.0225e9 / 8 + 4 * 151936 * 2560 + 24576 * 2560 * 2 * 52
                               + 10 * 24576 * 151936 + 2 * G,
                               (4 + 8) * 4.0225e9 / 8 + 0.6 * 79.2 * G + 2 * G, 144 * 1024),
}


@pytest.mark.parametrize("model", list(HAND))
def test_memory_plan_matches_a_hand_calculation(model):
    axes, training, rollout, kv_per_token = HAND[model]
    cfg = composed(*axes, f"model={model}")
    result = plan(cfg, __import__("dara.preflight.facts", fromlist=["x"]).model_facts(cfg))
    assert result.total(result.training) == pytest.approx(training, rel=0.05)
    assert result.total(result.rollout) == pytest.approx(rollout, rel=0.05)
    assert result.kv_per_token == kv_per_token
    assert result.total(result.training) < result.card_gib * GIB  # and the paper's setting fits
    report = preflight(cfg, skip_env=True)
    text = report.text()
    assert "logits peak" in text and f"x {cfg.run.model_facts.vocab_size} x 10 B" in text  # arithmetic shown
    assert report.ok, text


def test_checkpoint_policy_caps_checkpoints_and_keeps_the_evaluated_steps(tmp_path):
    from omegaconf import OmegaConf

    from dara.verl.checkpoints import KeepEvaluatedSteps

    cfg = composed(*MATH, "model=deepseek-r1-distill-qwen-7b")
    assert cfg.trainer.max_actor_ckpt_to_keep == cfg.run.checkpoint.keep_last == 2
    assert "hf_model" in cfg.actor_rollout_ref.actor.checkpoint.save_contents
    assert cfg.trainer.checkpoint_callback_class == "dara.verl.checkpoints.KeepEvaluatedSteps"
    text = preflight(cfg, skip_env=True).text()
    assert "per save: 14 B x 7.616e9 = 106.6 GB" in text and "newest 2 kept" in text

    policy = OmegaConf.create({"run": {"checkpoint": {"keep_hf_steps": [50, 100], "kept_dir": str(tmp_path / "kept")}}})
    callback = KeepEvaluatedSteps(config=policy)
    for step in (40, 50):
        hf = tmp_path / f"global_step_{step}" / "actor" / "huggingface"
        hf.mkdir(parents=True)
        (hf / "model.safetensors").write_bytes(b"w" * step)
        (hf / "config.json").write_text("{}")
        callback.on_save(trainer=None, global_step=step, checkpoint_dir=str(tmp_path / f"global_step_{step}"))
    import shutil

    shutil.rmtree(tmp_path / "global_step_50")  # verl's rotation
    kept = tmp_path / "kept"
    assert sorted(p.name for p in kept.iterdir()) == ["global_step_50"]
    assert (kept / "global_step_50" / "model.safetensors").read_bytes() == b"w" * 50


def test_gpu_runs_keep_home_and_cpu_runs_move_it(tmp_path):
    from dara.verl.cpu.ray_local import local_ray_session

    home = os.environ.get("HOME")
    with local_ray_session(tmp_path / "gpu", shutdown=False, move_home=False):
        assert os.environ.get("HOME") == home and os.environ["RAY_AUTH_MODE"] == "disabled"
    with local_ray_session(tmp_path / "cpu", shutdown=False):
        assert os.environ["HOME"] == str((tmp_path / "cpu" / "ray" / "home").resolve())
    assert os.environ.get("HOME") == home
    import inspect

    from dara import train

    assert 'move_home=cfg.trainer.device == "cpu"' in inspect.getsource(train._ray_session)


def test_cli_names_a_bad_override_in_one_line(capsys):
    from dara.preflight.__main__ import main

    assert main(["estimator=nope", "--skip-env"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("[preflight] cannot compose the run: In 'train': Could not find 'estimator/nope'; "
                                   "Available options in 'estimator': dara_asym, dara_sym, ")
    assert captured.err.count("\n") == 1


def test_cli_prints_the_report_and_exits_nonzero_on_a_problem(capsys):
    from dara.preflight.__main__ import main

    code = main(["task=deepscaler", "model=deepseek-r1-distill-qwen-1.5b", "cluster=h100_x8", "--nodes", "3",
                 "--skip-env"])
    out = capsys.readouterr().out
    assert code == 1 and "== allocation: FAIL" in out and "data-parallel size 24" in out
    assert "== memory: ok" in out and "vLLM KV cache" in out
