"""The CPU weight sync into vLLM (dara.verl.cpu.vllm_weights): after each of two syncs, vLLM's log-probs of fixed
sequences are the transformers model's (fp32) within 1e-4, for a tied output head (the smoke model, Qwen2.5
0.5B-3B) and an untied one; before the first sync the engine holds dummy weights."""

from __future__ import annotations

import json
import logging

import pytest

pytest.importorskip("vllm", reason="vLLM's CPU build (make install, Linux only)")
TOLERANCE = 1e-4


@pytest.mark.slow  # a vLLM engine per model (~15 s each)
@pytest.mark.starts
@pytest.mark.parametrize("kind", ["tied", "untied"])
def test_two_syncs_give_the_trainers_log_probs(tmp_path, python_module, kind):
    out = python_module("tests.vllm_sync_probe", tmp_path / "model", kind, timeout=300)
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
