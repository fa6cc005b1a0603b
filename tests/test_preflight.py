"""dara.preflight on the real compositions: rejections, model facts, the memory plan against hand calculations and
verl's code, the time verdicts against their arithmetic, calibration files, the CLI, dara.train's hook before Ray."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from dara.config import CONF_DIR
from dara.config_checks import ConfigError, check_config
from dara.preflight import compose, load_calibration, parse_time_limit, preflight
from dara.preflight import facts as facts_module
from dara.preflight.allocation import with_allocation
from dara.preflight.budget import check_disk
from dara.preflight.calibration import CalibrationError, write_calibration
from dara.preflight.environment import Environment, check_environment
from dara.preflight.facts import model_facts
from dara.preflight.memory import GIB, check_memory, logits_bytes, plan
from dara.preflight.report import Section

MATH = ("task=deepscaler", "cluster=h100_x8")
TOOLRL = ("task=toolrl", "cluster=a100_40g_x4", "model=qwen2.5-1.5b-instruct")


@functools.cache
def composed(*overrides: str):
    return compose(overrides)


def section_of(report, title: str):
    return next(s for s in report.sections if s.title == title)


def with_values(cfg, **values):
    copy = cfg.copy()
    for key, value in values.items():
        OmegaConf.update(copy, key.replace("__", "."), value)
    return copy


def test_rejections_name_the_problem_and_dara_train_fails_before_ray():
    cfg = composed(*MATH, "model=deepseek-r1-distill-qwen-1.5b")
    assert preflight(cfg, skip_env=True).ok  # its own cluster: one 8-GPU node
    report = preflight(cfg, nodes=3, gpus_per_node=8, skip_env=True)
    (problem,) = section_of(report, "allocation").problems
    assert "64 x 16 = 1024 is not divisible by the data-parallel size 24" in problem
    assert not report.ok and "would start" not in report.text().splitlines()[-1]
    with pytest.raises(ConfigError, match="data-parallel size 24"):  # the hook dara.train runs before Ray
        check_config(with_allocation(cfg, 3, 8))
    # Qwen3 at its full context and utilization 0.4: the KV cache cannot hold one request
    qwen3 = composed(*MATH, "model=qwen3-4b-instruct-2507", "actor_rollout_ref.rollout.max_model_len=262144",
                     "actor_rollout_ref.rollout.gpu_memory_utilization=0.4")
    (problem,) = section_of(preflight(qwen3, skip_env=True), "memory").problems
    assert "KV cache" in problem and "262144" in problem
    ok = composed(*MATH, "model=qwen3-4b-instruct-2507")  # the project's: max_model_len = prompt + response
    assert ok.actor_rollout_ref.rollout.max_model_len == 1024 + 8000 and preflight(ok, skip_env=True).ok
    # 7B math on 2 x A100-40GB
    seven = composed("task=deepscaler", "cluster=a100_40g_x4", "model=deepseek-r1-distill-qwen-7b")
    problems = section_of(preflight(seven, nodes=1, gpus_per_node=2, skip_env=True), "memory").problems
    assert problems and all("39.4 GiB of a A100-40GB" in p for p in problems)
    assert any(p.startswith("training phase") for p in problems)


CU129 = Environment(torch="2.11.0+cu129", torch_cuda="12.9", vllm="0.24.0+cu129", flash_attn=None, driver="575.51.03")
CU130 = replace(CU129, torch="2.11.0", torch_cuda="13.0", vllm="0.24.0")


@pytest.mark.parametrize("env, attention, problem", [
    (CU129, "flash_attention_2", None),
    (replace(CU130, driver="580.65.06"), "flash_attention_2", None),
    (replace(CU129, flash_attn="not installed"), "sdpa", None),
    (replace(CU129, flash_attn="not installed"), "flash_attention_2", "flash_attn not installed and "
     "run.attention=flash_attention_2; fix: make flash-attn (builds it against this torch); run.attention=sdpa runs "
     "without it only at the smaller token budget per GPU that the preflight's memory section names"),
    (replace(CU129, torch="2.13.0+cpu", torch_cuda=None), "flash_attention_2", "torch 2.13.0+cpu is a CPU build and "
     "this is a GPU run (trainer.device=cuda); fix: make install GPU=1 on a GPU node (it picks the CUDA line from the "
     "driver; CUDA=12.9|13.0 to choose)"),
    (CU130, "flash_attention_2", "torch 2.11.0 is a CUDA 13.0 build, newer than NVIDIA driver 575.51.03 runs (CUDA 13 "
     "needs >= 580); fix: make install GPU=1 CUDA=12.9 (or a driver >= 580)"),
    (replace(CU129, vllm="0.24.0"), "flash_attention_2", "vllm 0.24.0 (CUDA 13.0) and torch 2.11.0+cu129 (CUDA 12.9) "
     "are different CUDA builds; fix: make install GPU=1 CUDA=12.9"),
    (replace(CU129, vllm=None), "flash_attention_2", "vllm is not installed (rollout.name=vllm); fix: make install GPU=1"),
    (replace(CU130, vllm="0.28.0+cpu", driver="580.65.06"), "flash_attention_2", "vllm 0.28.0+cpu is vLLM's CPU "
     "build and this is a GPU run (trainer.device=cuda); fix: make install GPU=1 on a GPU node"),
])
def test_environment_names_each_broken_install_with_its_fix(env, attention, problem):
    section = Section("environment")
    check_environment(composed(*TOOLRL, f"run.attention={attention}"), section, probe=lambda: env)
    assert section.problems == ([] if problem is None else [problem])


def test_this_cpu_build_is_named_for_a_gpu_cluster():
    report = preflight(composed(*TOOLRL))  # the real environment check: torch imported
    assert any("is a CPU build and this is a GPU run" in p for p in section_of(report, "environment").problems)
    assert [s.title for s in report.sections][-2:] == ["environment", "disk"]


def test_sdpa_plans_padded_micro_batches_and_names_the_token_budget_that_fits():
    flash, sdpa = composed(*TOOLRL), composed(*TOOLRL, "run.attention=sdpa")
    assert flash.actor_rollout_ref.model.use_remove_padding and not sdpa.actor_rollout_ref.model.use_remove_padding
    assert sdpa.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    facts = model_facts(flash)
    assert plan(sdpa, facts).micro_batch_tokens == 2 * plan(flash, facts).micro_batch_tokens == 2 * 16384
    report = preflight(sdpa, skip_env=True)
    assert "attention: sdpa" in report.text() and "planned at 2.0 x 16384 = 32768 tokens" in report.text()
    (problem,) = section_of(report, "memory").problems  # the padded logits no longer fit a 40 GB card
    assert problem.startswith("training phase (vLLM asleep) needs") and problem.endswith("keeps 10% free)")
    fits, override = int(problem.split("budgets <= ")[1].split()[0]), problem.split(": ")[-1].split()[0]
    assert override == "run.hardware.small.max_token_len_per_gpu=4096"

    def training(tokens):  # the plan at another PPO token budget
        result = plan(with_values(sdpa, actor_rollout_ref__actor__ppo_max_token_len_per_gpu=tokens), facts)
        return result.total(result.training)

    card = plan(sdpa, facts).card_gib * GIB
    assert training(fits) <= card < training(fits + 16)  # the largest that fits
    assert training(4096) <= 0.9 * card < training(4096 + 1024)  # the largest multiple of 1,024 keeping 10% free
    suggested = composed(*TOOLRL, "run.attention=sdpa", override)
    arr = suggested.actor_rollout_ref
    assert (arr.actor.ppo_max_token_len_per_gpu, arr.ref.log_prob_max_token_len_per_gpu,
            arr.rollout.log_prob_max_token_len_per_gpu) == (4096, 4096, 4096)
    assert preflight(suggested, skip_env=True).ok
    sp = composed(*TOOLRL, "run.attention=sdpa", "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2")
    assert any("needs model.use_remove_padding" in p for p in section_of(preflight(sp, skip_env=True), "memory").problems)


@pytest.fixture(scope="module")
def calibration(tmp_path_factory):
    return write_calibration(tmp_path_factory.mktemp("calibration") / "h100.json", gpu="NVIDIA H100 80GB HBM3",
                             measured_at="2026-12-01", step_minutes={"h100_x8": {"deepseek-r1-distill-qwen-7b": 150.0}},
                             measured={}, derivation="test")


def test_time_limit_verdicts_and_rejections_follow_their_arithmetic(calibration, tmp_path):
    cfg = composed(*MATH, "model=deepseek-r1-distill-qwen-1.5b")
    section = section_of(preflight(cfg, skip_env=True), "time limit")
    save = 16 * model_facts(cfg).num_parameters / 1e9 / 60  # 16 B/param at 1 GB/s, in minutes
    assert section.verdict == "each job requeues itself when Slurm ends it at the limit, from its newest save_freq " \
                              "checkpoint"
    assert f"a step + a save = 12 + {save:.1f} min (at 1 GB/s, estimate) = {12 + save:.1f} min > 5 min" in section.lines[1]
    assert section.lines[2] == ("each job: about 118 steps, checkpointed every 10: the newest at its step 110, so "  # (1440 - 20) // 12
                                "about 8 step(s) (96 min) and the step in flight are redone by the next job; 200 "
                                "steps = 200 / 110 -> about 2 jobs")
    toolrl = section_of(preflight(composed(*TOOLRL), skip_env=True), "time limit")
    assert toolrl.verdict == "all 100 steps fit in one job" and "= 4.4 min <= 5 min" in toolrl.lines[1]
    short = section_of(preflight(composed(*TOOLRL), time_limit_minutes=240, skip_env=True), "time limit")
    assert short.verdict == "each job stops at the pre-timeout signal with a checkpoint and requeues itself"
    assert short.lines[2] == "each job: about 55 steps, the last one checkpointed at the signal; 100 steps = 100 / 55 " \
                             "-> about 2 jobs"
    seven = composed(*MATH, "model=deepseek-r1-distill-qwen-7b")  # 45-min steps
    assert preflight(seven, skip_env=True).ok and preflight(seven, time_limit_minutes=7 * 60 + 50, skip_env=True).ok
    (problem,) = section_of(preflight(seven, time_limit_minutes=240, skip_env=True), "time limit").problems
    assert problem == ("a job runs about 4 steps but saves every 10, and a 45-min step + save outlasts the 5-min "
                       "warning: a job could end without a new checkpoint and is then not requeued "
                       "(trainer.save_freq <= 4, or --time >= 7:50:00)")
    (short,) = section_of(preflight(seven, time_limit_minutes=60, skip_env=True), "time limit").problems
    assert "cannot finish one 45-min step" in short and "--time to >= 1:50:00" in short
    report = preflight(seven, skip_env=True, calibration=load_calibration(calibration))  # 150 min: 9 steps a job
    (problem,) = section_of(report, "time limit").problems
    assert problem.startswith("a job runs about 9 steps but saves every 10, and a 150-min step + save outlasts")
    assert "150 min/step CALIBRATED (gpu_smoke on NVIDIA H100 80GB HBM3, 2026-12-01" in report.text()
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(CalibrationError, match="not a gpu_smoke calibration file"):
        load_calibration(tmp_path / "bad.json")
    assert [parse_time_limit(t) for t in ("90", "1:30", "1:00:30", "2-0", "1-02:03", "UNLIMITED")] == [
        90, 1.5, 60.5, 2880, 1563, None]


def facts_of(model: str):  # conf/model/*.yaml's run.model_facts
    node = OmegaConf.load(CONF_DIR / "model" / f"{model}.yaml").run.model_facts
    assert set(node.keys()) == set(facts_module.FACT_KEYS)
    return facts_module.facts_from_mapping(OmegaConf.to_container(node))


def test_tiny_facts_match_the_generated_models_config_json(tmp_path):
    from data_prep import smoke

    model = smoke.new_model(smoke.train_tokenizer(smoke.chat_texts(smoke.synthetic_records(0, smoke.N_TRAIN))), seed=0)
    model.config.save_pretrained(tmp_path)  # the config.json data_prep writes next to the weights
    config = json.loads((tmp_path / "config.json").read_text())
    assert facts_of("tiny") == facts_module.facts_from_config_json(config, sum(p.numel() for p in model.parameters()))


@pytest.mark.parametrize("model, intermediate, bias, qk_norm", [  # from each model's config.json on the hub
    ("qwen2.5-0.5b-instruct", 4864, True, False), ("qwen2.5-1.5b-instruct", 8960, True, False),
    ("qwen2.5-3b-instruct", 11008, True, False), ("deepseek-r1-distill-qwen-1.5b", 8960, True, False),
    ("deepseek-r1-distill-qwen-7b", 18944, True, False), ("qwen3-4b-instruct-2507", 9728, False, True)])
def test_paper_models_parameter_counts_follow_from_their_shape(model, intermediate, bias, qk_norm):
    facts = facts_of(model)
    assert facts.intermediate_size == intermediate
    assert facts_module.parameters_of_qwen(facts, qkv_bias=bias, qk_norm=qk_norm) == facts.num_parameters
    assert facts.num_attention_heads * facts.head_dim in (facts.hidden_size, 4096)  # Qwen3-4B: 32 x 128 > 2560
    if model.startswith("qwen3"):  # its full context needs 36 GiB of KV cache
        assert facts.kv_bytes_per_token() == 144 * 1024
        assert facts.max_position_embeddings * facts.kv_bytes_per_token() == 36 * 2**30


# By hand from verl 0.9.1's facts (fp32 actor and reference, a 2 GiB weight-sync bucket, a sleeping vLLM 1 GiB):
# P parameters, W GPUs, T tokens per micro-batch, V vocabulary, h hidden, L layers, q / kv query / key-value widths,
# E = V h (the largest FSDP unit here); 6 B per token x vocabulary entry (bf16 logits + the entropy's fp32 softmax).
def hand(P, W, T, V, h, L, q, kv, intermediate, adam_offloaded, ref, util, card):
    G, E = 2**30, V * h
    state = (0 if adam_offloaded else 8) + (4 if ref else 0)
    training = (16 + (4 if ref else 0)) * P / W + 4 * E + T * h * 2 * L \
        + T * (6 * h + 2 * (q + 2 * kv) + 6 * intermediate) * 2 + 6 * T * V + 3 * G
    return training, (4 + state) * P / W + util * card * G + 2 * G, (4 + state) * P / W + 2 * P + 2 * E + 4 * G


HAND = {  # model: (axes, hand, KV bytes per token, free share of the tightest phase at least)
    "qwen2.5-1.5b-instruct": (TOOLRL[:2], hand(1.5437e9, 4, 16384, 151936, 1536, 28, 1536, 256, 8960, False, True, 0.5,
                                               39.4), 2 * 28 * 2 * 128 * 2),
    "qwen2.5-3b-instruct": (TOOLRL[:2], hand(3.0859e9, 4, 12288, 151936, 2048, 36, 2048, 256, 11008, True, False, 0.4,
                                             39.4), 2 * 36 * 2 * 128 * 2),
    "deepseek-r1-distill-qwen-1.5b": (MATH, hand(1.7771e9, 8, 32768, 151936, 1536, 28, 1536, 256, 8960, False, True,
                                                 0.6, 79.2), 2 * 28 * 2 * 128 * 2),
    "deepseek-r1-distill-qwen-7b": (MATH, hand(7.6156e9, 8, 16384, 152064, 3584, 28, 3584, 512, 18944, True, False,
                                               0.55, 79.2), 2 * 28 * 4 * 128 * 2),
    "qwen3-4b-instruct-2507": (MATH, hand(4.0225e9, 8, 24576, 151936, 2560, 36, 4096, 1024, 9728, False, False, 0.6,
                                          79.2), 144 * 1024),
}


@pytest.mark.parametrize("model", list(HAND))
def test_memory_plan_matches_a_hand_calculation_and_shows_its_arithmetic(model):
    axes, (training, rollout, sync), kv_per_token = HAND[model]
    cfg = composed(*axes, f"model={model}")
    result = plan(cfg, model_facts(cfg))
    for terms, expected in ((result.training, training), (result.rollout, rollout), (result.weight_sync, sync)):
        assert result.total(terms) == pytest.approx(expected, rel=0.05)
    assert result.kv_per_token == kv_per_token
    text = (report := preflight(cfg, skip_env=True)).text()
    assert f"x {cfg.run.model_facts.vocab_size} x 6 B" in text and "; log-prob pass 6 B = " in text
    for key in ("actor.fsdp_config.model_dtype fp32", "update_weights_bucket_megabytes", "rollout.free_cache_engine",
                "rollout.gpu_memory_utilization", "model.enable_gradient_checkpointing"):
        assert key in text  # each line names the verl key it comes from
    assert report.ok and section_of(report, "memory").notes == [], text
    if axes == TOOLRL[:2]:  # tool calling on A100-40GB keeps 10% of the card free in every phase
        assert all(result.total(t) <= 0.9 * result.card_gib * GIB for _, t in result.phases())


def test_a_phase_within_ten_percent_of_the_card_is_noted():
    tight = with_values(composed(*TOOLRL), actor_rollout_ref__rollout__gpu_memory_utilization=0.78)
    section = Section("memory")
    check_memory(tight, model_facts(tight), section)
    (note,) = section.notes
    assert not section.problems and note.startswith("rollout phase (vLLM awake) leaves 2% of the card free")


def test_logits_bytes_follow_verls_code_paths():
    """By hand from verl 0.9.1's FSDP engine (dara/preflight/memory.py's docstring): bf16 logits 2; with padding
    removed the cross-entropy gradient goes into them unless the entropy has gradients (+2 +2); the compiled
    entropy's forward holds an fp32 softmax (4), uncompiled also its fp32 input (4); padded: + the unpadded copy 2 +
    the kept fp32 log-softmax 4 + its gradient 2. Then the lines of verl that say so (its source text: importing the
    FSDP engine imports vLLM)."""
    toolrl, math = composed(*TOOLRL), composed(*MATH, "model=deepseek-r1-distill-qwen-1.5b")
    assert toolrl.actor_rollout_ref.actor.entropy_coeff == 0.001 and math.actor_rollout_ref.actor.entropy_coeff == 0
    sdpa = composed(*TOOLRL, "run.attention=sdpa")

    def passes(cfg, **values):
        found = logits_bytes(with_values(cfg, **values))
        return sum(b for b, _ in found.update), sum(b for b, _ in found.log_prob), found.peak

    assert passes(toolrl) == (2 + 2 + 2, 2 + 4, 6) and passes(math) == (2, 2 + 4, 6)
    assert "not in place: entropy_coeff 0.001" in logits_bytes(toolrl).text()
    assert "written into them" in logits_bytes(math).text()
    assert passes(toolrl, actor_rollout_ref__actor__fsdp_config__use_torch_compile=False) == (10, 2 + 4 + 4, 10)
    assert passes(math, actor_rollout_ref__rollout__temperature=0.6) == (2 + 2, 2 + 2 + 4, 8)
    assert passes(sdpa) == (2 + 2 + 4 + 2 + 4 + 2, 2 + 4 + 4, 16)
    assert passes(sdpa, actor_rollout_ref__actor__entropy_coeff=0.0) == (2 + 2 + 4 + 2, 2 + 4 + 4, 10)
    verl = Path(importlib.util.find_spec("verl").origin).parent
    engine = (verl / "workers/engine/fsdp/transformer_impl.py").read_text()
    assert re.search(r"inplace_backward = True\s+if calculate_entropy:\s+inplace_backward = False", engine)
    assert "torch.compile(entropy_from_logits, dynamic=True)" in engine  # fsdp_config.use_torch_compile
    assert "entropy = verl_F.entropy_from_logits(logits)" in engine  # padded: uncompiled on the padded logits
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
    import torch
    from verl.utils.torch_functional import entropy_from_logits

    logits = torch.randn(8, 512, dtype=torch.bfloat16, requires_grad=True)

    def kept(fn):
        shapes = []
        with torch.autograd.graph.saved_tensors_hooks(
                lambda t: shapes.append((t.shape[-1], t.data_ptr() == logits.data_ptr())) or t, lambda t: t):
            fn(logits).sum().backward()
        return [same for width, same in shapes if width == 512]

    assert kept(torch.compile(entropy_from_logits, dynamic=True)) == [True]  # only the logits themselves
    assert False in kept(entropy_from_logits)  # eager keeps the softmax too


def test_checkpoints_and_disk_count_the_retained_plan_one_save_in_flight_and_what_is_there(tmp_path):
    text = preflight(composed(*MATH, "model=deepseek-r1-distill-qwen-7b"), skip_env=True).text()
    # fp32 model 4 + Adam 8 + fp32 HF export 4; the newest 2 saves + the HF weights of steps 50, 60, 100 + one in flight
    assert "per save: 16 B x 7.616e9 = 121.8 GB" in text
    assert "= 335.1 GB (without the cap: 2437.0 GB); with one save in flight 456.9 GB" in text
    cfg = composed(*TOOLRL, f"run.output_root={tmp_path}")

    def disk(free_gb):
        section = Section("disk")
        check_disk(cfg, model_facts(cfg), section, usage=lambda path: SimpleNamespace(free=free_gb * 1e9))
        return section

    # 1.5B: 24.7 GB a save; newest 2 + HF weights of steps 50, 60, 100 (3 x 6.2) + one in flight
    assert disk(100).problems == [] and "the run needs 92.6 GB" in disk(100).lines[0]
    (problem,) = disk(50).problems
    assert problem.startswith("only 50.0 GB free at ") and "the run needs 92.6 GB more" in problem
    folder = tmp_path / cfg.run.name / "checkpoints" / "global_step_10"  # a resumed run's checkpoint counts
    folder.mkdir(parents=True)
    with open(folder / "model.pt", "wb") as handle:  # a sparse file: its size, not its blocks, is counted
        handle.truncate(int(45e9))
    assert disk(50).problems == [] and "45.0 GB already there = 47.6 GB more" in disk(50).lines[0]


def test_gpu_runs_keep_home_and_cpu_runs_move_it(tmp_path):
    from dara import train

    home = os.environ.get("HOME")
    for device in ("cuda", "cpu"):
        cfg = OmegaConf.create({"run": {"output_dir": str(tmp_path)}, "trainer": {"device": device},
                                "ray_kwargs": {"ray_init": {}}})
        with train._ray_session(cfg):
            assert (os.environ["HOME"] == str((tmp_path / "ray" / "home").resolve())) == (device == "cpu")
            assert cfg.ray_kwargs.ray_init._temp_dir  # the run folder's Ray temp folder reaches ray.init
        assert os.environ.get("HOME") == home


CLI = [  # `python -m dara.preflight ARGS`: (ARGS, exit status, where it prints, what it prints)
    (["estimator=nope", "--skip-env"], 2, "err", ["[preflight] cannot compose the run: In 'train': Could not find "
                                                  "'estimator/nope'; Available options in 'estimator': dara_asym, "
                                                  "dara_sym, "]),
    (["task=deepscaler", "model=deepseek-r1-distill-qwen-1.5b", "cluster=h100_x8", "--nodes", "3", "--skip-env"], 1,
     "out", ["== allocation: FAIL", "data-parallel size 24", "== memory: ok", "vLLM KV cache"]),
    (["task=smoke", "--skip-env", "--calibration", "{calibration}.absent"], 2, "err", ["[preflight] calibration file "]),
    (["--skip-env", "task=smoke", "--nodes", "1", "estimator=grpo"], 0, "out", ["smoke-tiny-grpo-s0"]),  # overrides
    (["task=smoke", "estimator=grpo", "--skip-env", "--nodes", "1"], 0, "out", ["smoke-tiny-grpo-s0"]),  # around flags
]


@pytest.mark.parametrize("argv, code, stream, printed", CLI,
                         ids=["override", "report", "no-file", "flags-first", "flags-last"])
def test_the_cli_prints_its_report_or_one_line_and_exits_with_its_status(argv, code, stream, printed, calibration,
                                                                         capsys):
    from dara.preflight.__main__ import main

    assert main([arg.format(calibration=calibration) for arg in argv]) == code
    captured = capsys.readouterr()
    text = getattr(captured, stream)
    assert all(fragment in text for fragment in printed), text
    if code == 2:  # a bad argument: one line on stderr, nothing else
        assert captured.out == "" and text.startswith(printed[0]) and text.count("\n") == 1
