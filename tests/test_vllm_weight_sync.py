"""The CPU weight sync into vLLM (dara.verl.cpu.vllm_weights): after each of two syncs, vLLM's log-probs of fixed
sequences are the transformers model's (fp32) within 1e-4, for a tied output head (the smoke model, Qwen2.5
0.5B-3B) and an untied one; before the first sync the engine holds dummy weights. `python -m
tests.test_vllm_weight_sync DIR tied|untied` is the probe: it prints {"max_abs_diff": [after each sync],
"dummy_diff": before any sync}."""

from __future__ import annotations

import json
import logging
import sys

import pytest
import torch

from data_prep.tiny_model import SMOKE_SHAPE, tiny_qwen2

pytest.importorskip("vllm", reason="vLLM's CPU build (make install, Linux only)")
TOLERANCE = 1e-4
SEQUENCES = [list(range(5, 40)), list(range(100, 130)), [7, 300, 12, 299, 4, 4, 4, 150, 8]]
# the engine in the probe's process (collective_rpc takes tensors), a small KV cache, no thread pinning
PROBE_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
             "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


@pytest.mark.slow  # a vLLM engine per model (~15 s each)
@pytest.mark.starts
@pytest.mark.parametrize("kind", ["tied", "untied"])
def test_two_syncs_give_the_trainers_log_probs(tmp_path, python_module, kind):
    out = python_module("tests.test_vllm_weight_sync", tmp_path / "model", kind, env=PROBE_ENV, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["dummy_diff"] > 0.1  # the probe can tell the weights apart
    assert len(report["max_abs_diff"]) == 2 and max(report["max_abs_diff"]) <= TOLERANCE, report
    # no layer reported "Failed to load weights": the expected ones are silenced, any other would be a bug
    assert "Failed to load weights" not in out.stdout + out.stderr


def test_only_the_expected_reload_warnings_are_silenced():
    from types import SimpleNamespace

    from dara.verl.cpu.vllm_weights import _expected_reload_warnings_silenced

    tied = SimpleNamespace(config=SimpleNamespace(tie_word_embeddings=True), lm_head=None)
    log = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    messages = ["RotaryEmbedding: Failed to load weights", "ParallelLMHead: Failed to load weights",
                "QKVParallelLinear: Failed to load weights", "RotaryEmbedding: Delayed processing"]
    with _expected_reload_warnings_silenced(tied):
        shown = [m for m in messages if log.filter(log.makeRecord(log.name, logging.WARNING, "", 0, m, (), None))]
    assert shown == messages[2:] and not log.filters


def max_abs_diff(llm, model) -> float:
    """Over vLLM's prompt log-probs, log p(token_i | tokens_<i), and the transformers model's."""
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False)
    outputs = llm.generate([{"prompt_token_ids": s} for s in SEQUENCES], params, use_tqdm=False)
    diffs = []
    for out, seq in zip(outputs, SEQUENCES, strict=True):
        ours = torch.tensor([out.prompt_logprobs[i][seq[i]].logprob for i in range(1, len(seq))])
        with torch.no_grad():
            theirs = model(torch.tensor([seq])).logits[0, :-1].float().log_softmax(-1)
        diffs.append((ours - theirs.gather(1, torch.tensor(seq[1:])[:, None])[:, 0]).abs().max().item())
    return max(diffs)


def probe(out_dir: str, kind: str) -> None:
    """vLLM's CPU engine on dummy weights, then the trainer's weights, perturbed, synced twice."""
    from vllm import LLM

    tied = kind == "tied"
    model = tiny_qwen2(320, shape=SMOKE_SHAPE, seed=0, tie_word_embeddings=tied, bos_token_id=0, eos_token_id=1,
                       pad_token_id=0).eval()
    model.save_pretrained(out_dir)
    llm = LLM(model=out_dir, skip_tokenizer_init=True, load_format="dummy", dtype="float32", enforce_eager=True,
              max_model_len=128, seed=0, worker_extension_cls="dara.verl.cpu.vllm_weights.CPUWeightSyncExtension")
    report = {"dummy_diff": max_abs_diff(llm, model), "max_abs_diff": []}
    for sync in range(2):
        torch.manual_seed(sync + 1)
        with torch.no_grad():  # the trainer's update: new values in every tensor
            for param in model.parameters():
                param.add_(torch.randn_like(param) * 0.05)
        # what verl's trainer sends: the state dict, without the tied head (the checkpoint layout)
        weights = [(name, t.clone()) for name, t in model.state_dict().items()
                   if not (tied and name == "lm_head.weight")]
        llm.collective_rpc("load_weights_in_place", args=(weights,))
        report["max_abs_diff"].append(max_abs_diff(llm, model))
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    probe(sys.argv[1], sys.argv[2])
