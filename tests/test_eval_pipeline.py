"""The whole evaluation pipeline (generate -> score -> aggregate) on the tiny CPU smoke model, through vLLM's CPU
engine with training's CPU rollout settings: ToolRL held-out, math, BFCL; resumption and seeded samples with the real
engine, and a failed engine start as one line. The module starts one engine and shares it (a start takes 30-60 s)."""

from __future__ import annotations

import json
import os

import pytest

from results.evaluation import toolrl_eval
from results.evaluation.backends import SamplingConfig, VLLMBackend
from results.evaluation.benches import TOOLRL
from results.evaluation.cli import main
from results.evaluation.runner import run_cases
from results.evaluation.store import CaseStore

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def engine(smoke_assets):
    """The module's one vLLM engine on the tiny model (CPU settings of conf/cluster/cpu.yaml), its window longer
    than the model's own 512 positions for the BFCL prompts."""
    backend = VLLMBackend(smoke_assets["model_dir"], device="cpu", max_model_len=32768)
    yield backend
    del backend.llm  # the engine runs in this process: its KV cache goes with it


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_toolrl_pipeline_and_resume(smoke_assets, engine, tmp_path):
    out = tmp_path / "toolrl"
    common = ["toolrl", "all", "--out", str(out), "--model", smoke_assets["model_dir"], "--data", smoke_assets["test"],
              "--samples", "2", "--temperature", "1.0", "--max-new-tokens", "32", "--boot", "200"]
    assert main([*common, "--limit", "3"], engine) == 0
    first = read_jsonl(out / "generations.jsonl")
    assert len(first) == 3 and all(len(r["samples"]) == 2 for r in first)
    assert all(0 < s["n_tokens"] <= 32 for r in first for s in r["samples"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cases"] == 3 and summary["missing_cases"] == 0
    assert 0.0 <= summary["format"] <= 1.0 and -3.0 <= summary["correctness"] <= 3.0
    # A rerun over more cases generates only the new ones; finished records are untouched.
    assert main([*common, "--limit", "5"], engine) == 0
    second = read_jsonl(out / "generations.jsonl")
    assert second[:3] == first and len(second) == 5
    assert len(read_jsonl(out / "scores.jsonl")) == 5


def test_seeded_generation_with_the_real_engine(smoke_assets, engine, tmp_path):
    cases = toolrl_eval.load_toolrl_cases([smoke_assets["test"]], limit=2)
    sampling = SamplingConfig(n=2, temperature=1.0, top_p=1.0, max_new_tokens=24, seed=5)
    stores = [CaseStore(tmp_path / "a.jsonl"), CaseStore(tmp_path / "b.jsonl")]
    for order, store in zip((cases, cases[::-1]), stores, strict=True):
        run_cases(order, store, TOOLRL.producer(engine, sampling))
    assert stores[0].records == stores[1].records  # per-case seeds: same samples whatever the order
    # a case's samples are seeded apart (vLLM: seed + sample index), not one sample repeated
    assert any(r["samples"][0]["text"] != r["samples"][1]["text"] for r in stores[0].records.values())


def test_math_pipeline(smoke_assets, engine, tmp_path):
    data = tmp_path / "amc.json"
    data.write_text(json.dumps([{"problem": "What is 2+3?", "answer": 5.0},
                                {"problem": "What is 10/4?", "answer": "\\frac{5}{2}"}]))
    out = tmp_path / "math"
    assert main(["math", "all", "--out", str(out), "--model", smoke_assets["model_dir"], "--data", str(data),
                 "--samples", "3", "--max-new-tokens", "12", "--length-limit", "8", "--boot", "200",
                 "--score-workers", "1", "--run-method", "smoke", "--run-seed", "0", "--run-step", "0"], engine) == 0
    summary = json.loads((out / "summary.json").read_text())
    rows = {r["benchmark"]: r for r in summary["benchmarks"]}
    assert set(rows) == {"amc23", "macro"} and rows["amc23"]["questions"] == 2
    tokens = [n for r in read_jsonl(out / "scores.jsonl") for n in r["n_tokens"]]
    assert rows["amc23"]["exceed"] == pytest.approx(sum(n > 8 for n in tokens) / len(tokens))
    assert "| amc23 | 2 |" in (out / "summary.md").read_text()
    from results.collect import collect

    row = collect([out]).iloc[0]
    assert (row["method"], row["seed"], row["step"]) == ("smoke", 0, 0)
    assert row["amc23_exceed"] == pytest.approx(100 * rows["amc23"]["exceed"])


def test_bfcl_pipeline_and_prompts_over_the_window(smoke_assets, engine, tmp_path):
    """The window clamps new tokens to min(max, window - prompt - 2); a prompt leaving none, at the first step
    or later in a dialogue, fails its case (counted) and the evaluation finishes."""
    pytest.importorskip("bfcl_eval")
    from results.evaluation.bfcl_eval import load_bfcl_cases

    # the default window is the model config's (512 for the tiny model): every BFCL prompt is over it
    args = ["bfcl", "all", "--model", smoke_assets["model_dir"], "--limit", "1", "--max-new-tokens", "12"]
    assert main([*args, "--out", str(tmp_path / "default"), "--categories", "simple_python"], engine) == 0
    summary = json.loads((tmp_path / "default" / "summary.json").read_text())
    assert summary["over_window_cases"] == 1 and summary["missing_cases"] == 0
    assert summary["categories"]["simple_python"]["accuracy"] == summary["categories"]["simple_python"]["format"] == 0
    assert json.loads((tmp_path / "default" / "generations.jsonl.meta.json").read_text())["sampling"]["context_window"] == 512
    # a window the single-turn prompts and the multi-turn case's first fit (12 new tokens) but its second does not
    # (the prompt's tokens counted as the backend counts them: its chat template, no special tokens added)
    text = engine.tokenizer.apply_chat_template(load_bfcl_cases(["multi_turn_base"], limit=1)[0]["messages"],
                                                add_generation_prompt=True, tokenize=False)
    window = len(engine.tokenizer(text, add_special_tokens=False)["input_ids"]) + 14
    out = tmp_path / "bfcl"
    assert main([*args, "--out", str(out), "--categories", "simple_python", "live_simple", "multi_turn_base",
                 "--context-window", str(window)], engine) == 0
    records = {r["case_id"]: r for r in read_jsonl(out / "generations.jsonl")}
    assert set(records) == {"simple_python_0", "live_simple_0-0-0", "multi_turn_base_0"}
    multi = records.pop("multi_turn_base_0")
    assert multi["over_window"] and [len(turn) for turn in multi["turns"]] == [1, 0]  # failed in turn 2
    assert 0 < multi["n_tokens"][0][0] <= 12 and not any(r["over_window"] for r in records.values())
    score = next(r for r in read_jsonl(out / "scores.jsonl") if r["case_id"] == "multi_turn_base_0")
    assert score["over_window"] and not score["valid"] and score["format"] == 0.0
    summary = json.loads((out / "summary.json").read_text())
    assert [v["cases"] for v in summary["categories"].values()] == [1, 1, 1] and summary["over_window_cases"] == 1
    # the three-reward length diagnostics are scored and shown (their arithmetic: test_eval_metrics.py)
    assert summary["kinds"][2:] == ["length", "length_le_16", "think_words"]
    assert "length_le_16" in (out / "summary.md").read_text()


def test_a_failed_engine_start_is_one_line_naming_the_setting(smoke_assets, tmp_path, python_module):
    """A model whose window needs more KV cache than conf/cluster/cpu.yaml gives (128 MiB: 262,144 tokens of the
    tiny model): vLLM refuses to start, and the command says so in one line naming the setting, no traceback."""
    import shutil

    model = tmp_path / "long_window"
    shutil.copytree(smoke_assets["model_dir"], model)
    config = json.loads((model / "config.json").read_text())
    config["max_position_embeddings"] = 300_000
    (model / "config.json").write_text(json.dumps(config))
    done = python_module("results.evaluation", "toolrl", "generate", "--out", tmp_path / "out", "--model", model,
                         "--data", smoke_assets["test"], "--limit", "1", "--device", "cpu", timeout=600)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("vLLM could not start on cpu") and "KV cache" in last, last
    assert "kv_cache_memory_bytes" in last and "conf/cluster/cpu.yaml" in last, last
