"""dara.preflight: the rejections the issue names, the memory plan against hand calculations, the checkpoint
policy's callback, the HOME rule, and the hook that makes dara.train fail before Ray.

Each composition is the real one (Hydra over verl's trainer config and conf/), cached per override list.
"""

from __future__ import annotations

import functools
import os
from dataclasses import replace

import pytest

from dara.config_checks import ConfigError, check_config
from dara.preflight import compose, preflight
from dara.preflight.allocation import with_allocation
from dara.preflight.environment import Environment, check_environment
from dara.preflight.facts import model_facts
from dara.preflight.memory import GIB, check_memory, logits_bytes, plan
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


# a node of the CUDA 12.9 line (driver 575), everything installed
CU129 = Environment(torch="2.11.0+cu129", torch_cuda="12.9", vllm="0.24.0+cu129", flash_attn=None, driver="575.51.03")


def environment_problems(cfg, env: Environment) -> list[str]:
    section = Section("environment")
    check_environment(cfg, section, probe=lambda: env)
    return section.problems


def test_environment_names_each_broken_install_with_its_fix():
    cfg = composed(*TOOLRL, "model=qwen2.5-1.5b-instruct")
    assert environment_problems(cfg, CU129) == []
    (flash,) = environment_problems(cfg, replace(CU129, flash_attn="not installed"))
    assert flash == ("flash_attn not installed and run.attention=flash_attention_2; fix: make flash-attn (builds it "
                     "against this torch); run.attention=sdpa runs without it only at the smaller token budget per "
                     "GPU that the preflight's memory section names")
    sdpa = composed(*TOOLRL, "model=qwen2.5-1.5b-instruct", "run.attention=sdpa")
    assert environment_problems(sdpa, replace(CU129, flash_attn="not installed")) == []
    (cpu,) = environment_problems(cfg, replace(CU129, torch="2.13.0+cpu", torch_cuda=None))
    assert "torch 2.13.0+cpu is a CPU build" in cpu and "fix: make install GPU=1 on a GPU node" in cpu
    # the default PyPI stack (CUDA 13) on a driver-575 node
    cu130 = replace(CU129, torch="2.11.0", torch_cuda="13.0", vllm="0.24.0")
    (driver,) = environment_problems(cfg, cu130)
    assert driver == ("torch 2.11.0 is a CUDA 13.0 build, newer than NVIDIA driver 575.51.03 runs (CUDA 13 needs "
                      ">= 580); fix: make install GPU=1 CUDA=12.9 (or a driver >= 580)")
    assert environment_problems(cfg, replace(cu130, driver="580.65.06")) == []
    (mixed,) = environment_problems(cfg, replace(CU129, vllm="0.24.0"))
    assert "vllm 0.24.0 (CUDA 13.0) and torch 2.11.0+cu129 (CUDA 12.9) are different CUDA builds" in mixed
    assert "make install GPU=1 CUDA=12.9" in mixed
    (missing,) = environment_problems(cfg, replace(CU129, vllm=None))
    assert missing == "vllm is not installed (rollout.name=vllm); fix: make install GPU=1"


def test_this_cpu_build_is_named_for_a_gpu_cluster():
    """The real environment check (torch imported) on this machine's CPU build of torch."""
    cfg = composed(*TOOLRL, "model=qwen2.5-1.5b-instruct")
    report = preflight(cfg)
    assert any("is a CPU build and this is a GPU run" in p for p in problems_of(report, "environment"))
    assert preflight(cfg, skip_env=True).ok
    assert [s.title for s in report.sections][-2:] == ["environment", "disk"]


def test_sdpa_plans_padded_micro_batches_and_says_so():
    flash = composed(*TOOLRL, "model=qwen2.5-1.5b-instruct")
    sdpa = composed(*TOOLRL, "model=qwen2.5-1.5b-instruct", "run.attention=sdpa")
    assert flash.actor_rollout_ref.model.use_remove_padding is True
    assert sdpa.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    assert sdpa.actor_rollout_ref.model.use_remove_padding is False
    facts = model_facts(flash)
    assert plan(sdpa, facts).micro_batch_tokens == 2 * plan(flash, facts).micro_batch_tokens == 2 * 16384
    text = preflight(sdpa, skip_env=True).text()
    assert "attention: sdpa" in text and "planned at 2.0 x 16384 = 32768 tokens" in text
    # the padded logits no longer fit a 40 GB card: the preflight names the budgets that do, and the override
    (problem,) = problems_of(preflight(sdpa, skip_env=True), "memory")
    assert problem.startswith("training phase (vLLM asleep) needs")
    fits = int(problem.split("log-prob budgets <= ")[1].split()[0])
    override = problem.split(": ")[-1].split()[0]
    assert override == "run.hardware.small.max_token_len_per_gpu=4096" and problem.endswith("keeps 10% free)")
    card = plan(sdpa, facts).card_gib * GIB

    def training(tokens):  # the plan at another PPO token budget (the key the plan reads)
        cfg = sdpa.copy()
        cfg.actor_rollout_ref.actor.ppo_max_token_len_per_gpu = tokens
        result = plan(cfg, facts)
        return result.total(result.training)

    assert training(fits) <= card < training(fits + 16)  # the largest that fits
    assert training(4096) <= 0.9 * card < training(4096 + 1024)  # the largest multiple of 1,024 keeping 10% free
    suggested = composed(*TOOLRL, "model=qwen2.5-1.5b-instruct", "run.attention=sdpa", override)
    assert suggested.actor_rollout_ref.actor.ppo_max_token_len_per_gpu == 4096
    assert suggested.actor_rollout_ref.ref.log_prob_max_token_len_per_gpu == 4096
    assert suggested.actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu == 4096
    assert preflight(suggested, skip_env=True).ok
    sequence_parallel = composed(*TOOLRL, "model=qwen2.5-1.5b-instruct", "run.attention=sdpa",
                                 "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2")
    assert any("needs model.use_remove_padding" in p for p in problems_of(preflight(sequence_parallel, skip_env=True),
                                                                          "memory"))


def test_job_that_cannot_write_a_checkpoint_in_its_time_is_rejected():
    cfg = composed(*MATH, "model=deepseek-r1-distill-qwen-7b")
    steps_per_job = (240 - cfg.run.hardware.job_startup_minutes) // cfg.run.hardware.step_minutes_estimate[cfg.run.model]
    assert steps_per_job < cfg.trainer.save_freq
    (problem,) = problems_of(preflight(cfg, time_limit_minutes=240, skip_env=True), "time limit")
    # 45-min steps outlast the 5-min signal lead: the save at the signal cannot be relied on either
    assert problem == ("a job runs about 4 steps but saves every 10, and a 45-min step + save outlasts the 5-min "
                       "warning: a job could end without a new checkpoint and is then not requeued "
                       "(trainer.save_freq <= 4, or --time >= 7:50:00)")
    assert preflight(cfg, time_limit_minutes=7 * 60 + 50, skip_env=True).ok
    # a job too short for its start-up and one step
    (short,) = problems_of(preflight(cfg, time_limit_minutes=60, skip_env=True), "time limit")
    assert "cannot finish one 45-min step" in short and "--time to >= 1:50:00" in short


def test_time_limit_verdict_says_how_each_job_progresses_and_agrees_with_its_arithmetic():
    """A math step (12 min) + its save outlast the 5-min signal lead: the verdict is the requeue at the limit from
    the newest save_freq checkpoint, never "ok" beside a lead that does not fit; a tool-calling step fits."""
    cfg = composed(*MATH, "model=deepseek-r1-distill-qwen-1.5b")
    report = preflight(cfg, skip_env=True)
    (section,) = [s for s in report.sections if s.title == "time limit"]
    save = 16 * model_facts(cfg).num_parameters / 1e9 / 60  # 16 B/param at 1 GB/s, in minutes
    per_job = (1440 - 20) // 12  # 118 steps; checkpoints every 10 -> the newest at step 110 of the job
    assert 12 + save > 5 and per_job == 118
    assert section.verdict == ("each job requeues itself when Slurm ends it at the limit, from its newest save_freq "
                               "checkpoint")
    assert f"a step + a save = 12 + {save:.1f} min (at 1 GB/s, estimate) = {12 + save:.1f} min > 5 min" in section.lines[1]
    assert section.lines[2] == ("each job: about 118 steps, checkpointed every 10: the newest at its step 110, so "
                                "about 8 step(s) (96 min) and the step in flight are redone by the next job; 200 "
                                "steps = 200 / 110 -> about 2 jobs")
    assert "== time limit: ok: each job requeues itself when Slurm ends it at the limit" in report.text()
    seven = [s for s in preflight(composed(*MATH, "model=deepseek-r1-distill-qwen-7b"), skip_env=True).sections
             if s.title == "time limit"][0]
    assert seven.lines[2].endswith("the newest at its step 30, so about 1 step(s) (45 min) and the step in flight "
                                   "are redone by the next job; 200 steps = 200 / 30 -> about 7 jobs")
    # tool calling on 4 x A100-40GB: 4 min + 0.4 fit in the lead; 100 steps fit in one 24 h job, not in 4 h
    toolrl = composed(*TOOLRL, "model=qwen2.5-1.5b-instruct")
    (one_job,) = [s for s in preflight(toolrl, skip_env=True).sections if s.title == "time limit"]
    assert one_job.verdict == "all 100 steps fit in one job" and "= 4.4 min <= 5 min" in one_job.lines[1]
    (short,) = [s for s in preflight(toolrl, time_limit_minutes=240, skip_env=True).sections if s.title == "time limit"]
    assert short.verdict == "each job stops at the pre-timeout signal with a checkpoint and requeues itself"
    assert short.lines[2] == ("each job: about 55 steps, the last one checkpointed at the signal; 100 steps = "
                              "100 / 55 -> about 2 jobs")


# Hand calculations per paper model on its paper cluster (GiB per GPU), written out here independently of
# dara/preflight/memory.py from verl 0.9.1's facts: fp32 actor AND reference (model_dtype fp32), a 2 GiB weight-sync
# bucket, a sleeping vLLM keeping 1 GiB. P parameters, W GPUs, T tokens per micro-batch, V vocabulary, h hidden,
# L layers, I MLP width, q / kv the query / key-value widths (heads x head_dim), E = V h the embedding (the
# largest FSDP unit of every model here).
# training = (4 params + 4 grads + 8 Adam [+ 4 resident reference]) P / W + 4 E + T h 2 L
#            + T (6 h + 2 (q + 2 kv) + 6 I) 2 + 6 T V + 1 (vLLM asleep) + 0.5 (context) + 1.5 (overhead) GiB;
# 6 B per token x vocabulary entry: the larger of the update (bf16 logits 2, and with entropy_coeff != 0, as in
# tool calling, a not-in-place cross-entropy gradient 2 + the entropy's gradient 2) and the log-prob pass (bf16
# logits 2 + the compiled entropy's fp32 softmax 4, in both tasks);
# rollout = (4 unless params offloaded + 8 unless Adam offloaded + 4 resident reference) P / W + util x card + 2 GiB;
# weight sync = (4 + 8 unless Adam offloaded + 4 resident reference) P / W + 2 P / TP + 2 GiB bucket + 2 E + 2 GiB;
# KV per token = 2 L kv 2 B / TP.
G = 2**30


def width(h, q, kv, intermediate):
    return 6 * h + 2 * (q + 2 * kv) + 6 * intermediate


def hand(P, W, T, V, h, L, q, kv, intermediate, resident, util, card):
    """(training, rollout, weight sync) bytes; `resident` = B/param of FSDP state kept while vLLM is awake."""
    E = V * h
    training = (16 + (4 if resident["ref"] else 0)) * P / W + 4 * E + T * h * 2 * L \
        + T * width(h, q, kv, intermediate) * 2 + 6 * T * V + 3 * G
    rollout = ((0 if resident["params_offloaded"] else 4) + (0 if resident["adam_offloaded"] else 8)
               + (4 if resident["ref"] else 0)) * P / W + util * card * G + 2 * G
    sync = (4 + (0 if resident["adam_offloaded"] else 8) + (4 if resident["ref"] else 0)) * P / W + 2 * P \
        + 2 * G + 2 * E + 2 * G
    return training, rollout, sync


NONE_OFF = {"params_offloaded": False, "adam_offloaded": False, "ref": True}
HAND = {
    # qwen2.5-1.5b, 4 x A100-40GB, T 16384: reference resident (KL in the reward), nothing offloaded
    "qwen2.5-1.5b-instruct": (TOOLRL, hand(1.5437e9, 4, 16384, 151936, 1536, 28, 1536, 256, 8960, NONE_OFF, 0.5, 39.4),
                              2 * 28 * 2 * 128 * 2),
    # qwen2.5-3b, medium: Adam and reference offloaded, T 12288
    "qwen2.5-3b-instruct": (TOOLRL, hand(3.0859e9, 4, 12288, 151936, 2048, 36, 2048, 256, 11008,
                                         {"params_offloaded": False, "adam_offloaded": True, "ref": False}, 0.4, 39.4),
                            2 * 36 * 2 * 128 * 2),
    # R1-distill 1.5B, 8 x H100, T 32768, KL loss with a resident reference
    "deepseek-r1-distill-qwen-1.5b": (MATH, hand(1.7771e9, 8, 32768, 151936, 1536, 28, 1536, 256, 8960, NONE_OFF,
                                                 0.6, 79.2), 2 * 28 * 2 * 128 * 2),
    # R1-distill 7B, large: Adam and reference offloaded, T 16384
    "deepseek-r1-distill-qwen-7b": (MATH, hand(7.6156e9, 8, 16384, 152064, 3584, 28, 3584, 512, 18944,
                                               {"params_offloaded": False, "adam_offloaded": True, "ref": False},
                                               0.55, 79.2), 2 * 28 * 4 * 128 * 2),
    # Qwen3-4B, medium on H100: reference offloaded, T 24576; 144 KiB of KV per token
    "qwen3-4b-instruct-2507": (MATH, hand(4.0225e9, 8, 24576, 151936, 2560, 36, 4096, 1024, 9728,
                                          {"params_offloaded": False, "adam_offloaded": False, "ref": False}, 0.6, 79.2),
                               144 * 1024),
}


@pytest.mark.parametrize("model", list(HAND))
def test_memory_plan_matches_a_hand_calculation(model):
    axes, (training, rollout, sync), kv_per_token = HAND[model]
    cfg = composed(*axes, f"model={model}")
    result = plan(cfg, model_facts(cfg))
    assert result.total(result.training) == pytest.approx(training, rel=0.05)
    assert result.total(result.rollout) == pytest.approx(rollout, rel=0.05)
    assert result.total(result.weight_sync) == pytest.approx(sync, rel=0.05)
    assert result.kv_per_token == kv_per_token
    assert result.total(result.training) < result.card_gib * GIB  # and the paper's setting fits
    report = preflight(cfg, skip_env=True)
    text = report.text()
    assert "logits peak" in text and f"x {cfg.run.model_facts.vocab_size} x 6 B" in text  # arithmetic shown
    assert "logits bytes per token x vocabulary entry (verl 0.9.1's prepare_model_outputs): update " in text
    assert "; log-prob pass 6 B = " in text
    for key in ("actor.fsdp_config.model_dtype fp32", "update_weights_bucket_megabytes", "rollout.free_cache_engine",
                "rollout.gpu_memory_utilization", "model.enable_gradient_checkpointing"):
        assert key in text  # each line names the verl key it comes from
    assert report.ok, text


def with_values(cfg, **values):
    """A copy of a composed run with dotted keys set (the plan reads the resolved values)."""
    from omegaconf import OmegaConf

    copy = cfg.copy()
    for key, value in values.items():
        OmegaConf.update(copy, key.replace("__", "."), value)
    return copy


def test_logits_bytes_follow_verls_code_paths():
    """Bytes per token x vocabulary entry of each pass, by hand from verl 0.9.1's FSDP engine: bf16 logits 2;
    with padding removed the flash-attn cross-entropy gradient is written into them unless the entropy has
    gradients (entropy_coeff != 0: +2, and +2 for the entropy's gradient); the compiled entropy's forward holds one
    fp32 softmax (4) in the log-prob pass; uncompiled it keeps that softmax (4) and its fp32 input copy (4);
    padded (sdpa, no flash-attn): + the unpadded copy 2 + the kept fp32 log-softmax 4 + its gradient 2."""
    toolrl = composed(*TOOLRL, "model=qwen2.5-1.5b-instruct")
    math = composed(*MATH, "model=deepseek-r1-distill-qwen-1.5b")
    assert toolrl.actor_rollout_ref.actor.entropy_coeff == 0.001 and math.actor_rollout_ref.actor.entropy_coeff == 0
    assert toolrl.actor_rollout_ref.actor.fsdp_config.use_torch_compile is True  # verl's default, kept

    def passes(cfg):
        found = logits_bytes(cfg)
        return sum(b for b, _ in found.update), sum(b for b, _ in found.log_prob), found.peak

    assert passes(toolrl) == (2 + 2 + 2, 2 + 4, 6)
    assert passes(math) == (2, 2 + 4, 6)
    assert "not in place: entropy_coeff 0.001" in logits_bytes(toolrl).text()
    assert "written into them" in logits_bytes(math).text()
    eager = with_values(toolrl, actor_rollout_ref__actor__fsdp_config__use_torch_compile=False)
    assert passes(eager) == (2 + 2 + 2 + 4, 2 + 4 + 4, 10)
    assert passes(with_values(math, actor_rollout_ref__rollout__temperature=0.6)) == (2 + 2, 2 + 2 + 4, 8)
    sdpa = composed(*TOOLRL, "model=qwen2.5-1.5b-instruct", "run.attention=sdpa")
    assert passes(sdpa) == (2 + 2 + 4 + 2 + 4 + 2, 2 + 4 + 4, 16)
    assert passes(with_values(sdpa, actor_rollout_ref__actor__entropy_coeff=0.0)) == (2 + 2 + 4 + 2, 2 + 4 + 4, 10)


def test_verl_facts_behind_the_logits_bytes():
    """The lines of verl 0.9.1 that `logits_bytes` reads (source text: importing the FSDP engine imports vLLM)."""
    import importlib.util
    import re
    from pathlib import Path

    verl = Path(importlib.util.find_spec("verl").origin).parent
    engine = (verl / "workers/engine/fsdp/transformer_impl.py").read_text()
    # padding removed: the cross-entropy gradient goes in place unless the entropy is computed
    assert re.search(r"inplace_backward = True\s+if calculate_entropy:\s+inplace_backward = False", engine)
    assert "torch.compile(entropy_from_logits, dynamic=True)" in engine  # fsdp_config.use_torch_compile
    # padded (no remove padding): the entropy is called uncompiled on the padded logits
    assert "entropy = verl_F.entropy_from_logits(logits)" in engine
    assert "logits_rmpad = torch.cat([t for t in logits.unbind()])" in engine
    functional = (verl / "utils/torch_functional.py").read_text()
    assert "logprobs_from_logits_flash_attn(logits, labels, inplace_backward=inplace_backward)" in functional
    assert "output = logprobs_from_logits_v2(logits, labels)" in functional  # without flash-attn
    trainer = (verl / "trainer/ppo/v1/trainer_base.py").read_text()
    assert re.search(r"calculate_entropy = self\.config\.actor_rollout_ref\.actor\.calculate_entropy or \(\s+"
                     r"self\.config\.actor_rollout_ref\.actor\.entropy_coeff != 0\.0", trainer)  # _update_actor
    assert '"calculate_entropy": True,' in trainer  # _compute_old_log_prob: the log-prob pass computes it


@pytest.mark.slow  # torch.compile on a CPU
def test_compiled_entropy_keeps_only_its_input_for_the_backward():
    """verl's entropy_from_logits under torch.compile (as its FSDP engine runs it) saves its input and per-row
    scalars for the backward; eager it also keeps vocabulary-sized tensors (the softmax)."""
    import torch
    from verl.utils.torch_functional import entropy_from_logits

    logits = torch.randn(8, 512, dtype=torch.bfloat16, requires_grad=True)

    def kept(fn):
        shapes = []
        with torch.autograd.graph.saved_tensors_hooks(
                lambda t: shapes.append((t.shape[-1], t.data_ptr() == logits.data_ptr())) or t, lambda t: t):
            fn(logits).sum().backward()
        return shapes

    vocabulary_sized = [same for width, same in kept(torch.compile(entropy_from_logits, dynamic=True)) if width == 512]
    assert vocabulary_sized == [True]  # only the logits themselves
    assert any(width == 512 and not same for width, same in kept(entropy_from_logits))


def test_a100_40gb_tool_calling_keeps_ten_percent_free():
    for model in ("qwen2.5-1.5b-instruct", "qwen2.5-3b-instruct"):
        cfg = composed(*TOOLRL, f"model={model}")
        result = plan(cfg, model_facts(cfg))
        for phase, terms in result.phases():
            assert result.total(terms) <= 0.9 * result.card_gib * GIB, (model, phase)
        section = Section("memory")
        check_memory(cfg, model_facts(cfg), section)
        assert section.problems == section.notes == []
        assert any(line.endswith("28% free" if model.startswith("qwen2.5-1.5b") else "25% free")
                   for line in section.lines if "total" in line)
    # a phase planned within 10% of the card is noted (it fits, with no margin for the estimates)
    tight = with_values(composed(*TOOLRL, "model=qwen2.5-1.5b-instruct"),
                        actor_rollout_ref__rollout__gpu_memory_utilization=0.78)
    section = Section("memory")
    check_memory(tight, model_facts(tight), section)
    (note,) = section.notes
    assert not section.problems and note.startswith("rollout phase (vLLM awake) leaves 2% of the card free")


def test_checkpoint_policy_caps_checkpoints_and_keeps_the_evaluated_steps(tmp_path):
    from omegaconf import OmegaConf

    from dara.verl.checkpoints import KeepEvaluatedSteps

    cfg = composed(*MATH, "model=deepseek-r1-distill-qwen-7b")
    assert cfg.trainer.max_actor_ckpt_to_keep == cfg.run.checkpoint.keep_last == 2
    assert "hf_model" in cfg.actor_rollout_ref.actor.checkpoint.save_contents
    assert cfg.trainer.checkpoint_callback_class == "dara.verl.checkpoints.KeepEvaluatedSteps"
    text = preflight(cfg, skip_env=True).text()
    # fp32 model 4 + Adam 8 + fp32 HF export 4 (verl 0.9.1's export is the fp32 module's state dict)
    assert "per save: 16 B x 7.616e9 = 121.8 GB" in text and "newest 2 kept" in text
    # the newest 2 saves + the HF weights of steps 50, 60, 100 (keep_hf_steps), + one save in flight
    assert "= 335.1 GB (without the cap: 2437.0 GB); with one save in flight 456.9 GB" in text

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
    # dara.train's session moves HOME for a CPU run only (what it does, per trainer.device)
    from omegaconf import OmegaConf

    from dara import train

    for device in ("cuda", "cpu"):
        cfg = OmegaConf.create({"run": {"output_dir": str(tmp_path / f"train-{device}")},
                                "trainer": {"device": device}, "ray_kwargs": {"ray_init": {}}})
        with train._ray_session(cfg):
            moved = str((tmp_path / f"train-{device}" / "ray" / "home").resolve())
            assert (os.environ.get("HOME") == moved) == (device == "cpu"), (device, os.environ.get("HOME"))
            assert cfg.ray_kwargs.ray_init._temp_dir  # the run folder's Ray temp folder reaches ray.init
        assert os.environ.get("HOME") == home


def test_disk_check_counts_the_retained_plan_one_save_in_flight_and_what_is_there(tmp_path):
    from collections import namedtuple

    from dara.preflight.budget import check_disk

    usage = namedtuple("usage", "total used free")
    cfg = composed(*TOOLRL, "model=qwen2.5-1.5b-instruct", f"run.output_root={tmp_path}")
    facts = model_facts(cfg)
    # 1.5B: 16 B x 1.544e9 = 24.7 GB a save; newest 2 + HF weights of steps 50, 60, 100 (3 x 6.2) + one in flight
    section = Section("disk")
    check_disk(cfg, facts, section, usage=lambda path: usage(0, 0, 100e9))
    assert section.problems == [] and "the run needs 92.6 GB" in section.lines[0]
    short = Section("disk")
    check_disk(cfg, facts, short, usage=lambda path: usage(0, 0, 50e9))
    (problem,) = short.problems
    assert problem.startswith("only 50.0 GB free at ") and "the run needs 92.6 GB more" in problem
    # a resumed run: what its checkpoint folder already holds counts against the need
    folder = tmp_path / cfg.run.name / "checkpoints" / "global_step_10"
    folder.mkdir(parents=True)
    with open(folder / "model.pt", "wb") as handle:  # a sparse file: its size, not its blocks, is counted
        handle.truncate(int(45e9))
    resumed = Section("disk")
    check_disk(cfg, facts, resumed, usage=lambda path: usage(0, 0, 50e9))
    assert resumed.problems == [] and "45.0 GB already there = 47.6 GB more" in resumed.lines[0]


@pytest.fixture(scope="module")
def calibration(tmp_path_factory):
    from dara.preflight.calibration import write_calibration

    return write_calibration(tmp_path_factory.mktemp("calibration") / "h100.json", gpu="NVIDIA H100 80GB HBM3",
                             measured_at="2026-12-01", step_minutes={"h100_x8": {"deepseek-r1-distill-qwen-7b": 150.0}},
                             measured={}, derivation="test")


def test_calibration_file_replaces_the_estimate_in_the_time_check(calibration, tmp_path):
    from dara.preflight import load_calibration
    from dara.preflight.calibration import CalibrationError

    cfg = composed(*MATH, "model=deepseek-r1-distill-qwen-7b")
    # 24 h passes at the estimate (45 min/step: 31 steps a job) and fails at the calibrated 150 (9 steps a job)
    assert preflight(cfg, skip_env=True).ok
    report = preflight(cfg, skip_env=True, calibration=load_calibration(calibration))
    (problem,) = problems_of(report, "time limit")
    assert problem.startswith("a job runs about 9 steps but saves every 10, and a 150-min step + save outlasts")
    assert "150 min/step CALIBRATED (gpu_smoke on NVIDIA H100 80GB HBM3, 2026-12-01" in report.text()
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(CalibrationError, match="not a gpu_smoke calibration file"):
        load_calibration(tmp_path / "bad.json")


CLI = [  # `python -m dara.preflight ARGS`: (ARGS, exit status, where it prints, what it prints)
    (["estimator=nope", "--skip-env"], 2, "err", ["[preflight] cannot compose the run: In 'train': Could not find "
                                                  "'estimator/nope'; Available options in 'estimator': dara_asym, "
                                                  "dara_sym, "]),
    (["task=deepscaler", "model=deepseek-r1-distill-qwen-1.5b", "cluster=h100_x8", "--nodes", "3", "--skip-env"], 1,
     "out", ["== allocation: FAIL", "data-parallel size 24", "== memory: ok", "vLLM KV cache"]),
    (["task=deepscaler", "model=deepseek-r1-distill-qwen-7b", "cluster=h100_x8", "--skip-env", "--calibration",
      "{calibration}"], 1, "out", ["CALIBRATED"]),
    (["task=smoke", "--skip-env", "--calibration", "{calibration}.absent"], 2, "err", ["[preflight] calibration file "]),
]


@pytest.mark.parametrize("argv, code, stream, printed", CLI, ids=["override", "report", "calibrated", "no-file"])
def test_the_cli_prints_its_report_or_one_line_and_exits_with_its_status(argv, code, stream, printed, calibration,
                                                                         capsys):
    from dara.preflight.__main__ import main

    assert main([arg.format(calibration=calibration) for arg in argv]) == code
    captured = capsys.readouterr()
    text = getattr(captured, stream)
    assert all(fragment in text for fragment in printed), text
    if code == 2:  # a bad argument: one line on stderr, nothing else
        assert captured.out == "" and text.startswith(printed[0]) and text.count("\n") == 1
