"""The whole evaluation pipeline (generate -> score -> aggregate) on the tiny CPU smoke model, through vLLM's CPU
engine with training's CPU rollout settings: ToolRL held-out, math, BFCL; resumption and retries with the real
engine, and a failed engine start as one line. The module starts one engine and shares it (a start takes 30-60 s)."""

from __future__ import annotations

import json
import os

import pytest

from results.evaluation import toolrl_eval
from results.evaluation.backends import SamplingConfig, VLLMBackend
from results.evaluation.cli import main
from results.evaluation.runner import run_cases
from results.evaluation.store import CaseStore

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def assets(smoke_assets):
    return smoke_assets  # the session's one smoke build (tests/conftest.py)


# the engine's window: longer than the tiny model's own 512 positions, for the BFCL prompts at the paper's window
ENGINE_WINDOW = 32768


@pytest.fixture(scope="module")
def engine(assets):
    """The module's one vLLM engine on the tiny model (CPU settings of conf/cluster/cpu.yaml)."""
    backend = VLLMBackend(assets["model_dir"], device="cpu", max_model_len=ENGINE_WINDOW)
    yield backend
    del backend.llm  # the engine runs in this process: its KV cache goes with it


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_toolrl_pipeline_and_resume(assets, engine, tmp_path):
    out = tmp_path / "toolrl"
    common = ["toolrl", "all", "--out", str(out), "--model", assets["model_dir"], "--data", assets["test"],
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
    # Other sampling settings into the same folder are refused: one case file never mixes two settings.
    other = [*common, "--limit", "5", "--samples", "4"]  # the last --samples wins
    with pytest.raises(ValueError, match="other settings"):
        main(other, engine)


class FlakyBackend:
    """The real vLLM backend behind an engine that crashes on its first call (as a GPU engine may)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def chat(self, conversations, sampling, seeds):
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("engine died")
        return self.inner.chat(conversations, sampling, seeds)


def test_retry_with_real_backend_and_seeded_generation(assets, engine, tmp_path):
    cases = toolrl_eval.load_toolrl_cases([assets["test"]], limit=2)
    sampling = SamplingConfig(n=2, temperature=1.0, top_p=1.0, max_new_tokens=24, seed=5)
    flaky, store = FlakyBackend(engine), CaseStore(tmp_path / "a.jsonl")
    summary = run_cases(cases, store, toolrl_eval.make_producer(flaky, sampling), retries=2, backoff_s=0)
    assert summary.retries == 1 and summary.generated == 2 and not summary.missing
    again = CaseStore(tmp_path / "b.jsonl")
    run_cases(list(reversed(cases)), again, toolrl_eval.make_producer(engine, sampling))
    assert again.records == store.records  # per-case seeds: same samples whatever the order
    # a case's samples are seeded apart (vLLM: seed + sample index), not one sample repeated
    assert any(r["samples"][0]["text"] != r["samples"][1]["text"] for r in store.records.values())


def test_math_pipeline(assets, engine, tmp_path):
    data = tmp_path / "amc.json"
    data.write_text(json.dumps([{"problem": "What is 2+3?", "answer": 5.0},
                                {"problem": "What is 10/4?", "answer": "\\frac{5}{2}"}]))
    out = tmp_path / "math"
    assert main(["math", "all", "--out", str(out), "--model", assets["model_dir"], "--data", str(data),
                 "--samples", "3", "--max-new-tokens", "12", "--length-limit", "8", "--boot", "200",
                 "--score-workers", "1", "--run-method", "smoke", "--run-seed", "0", "--run-step", "0"], engine) == 0
    summary = json.loads((out / "summary.json").read_text())
    rows = {r["benchmark"]: r for r in summary["benchmarks"]}
    assert set(rows) == {"amc23", "macro"} and rows["amc23"]["questions"] == 2
    scores = read_jsonl(out / "scores.jsonl")
    tokens = [n for r in scores for n in r["n_tokens"]]
    assert rows["amc23"]["exceed"] == pytest.approx(sum(n > 8 for n in tokens) / len(tokens))
    for metric in ("acc", "exceed", "joint"):
        assert rows["amc23"][f"{metric}_lo"] <= rows["amc23"][metric] <= rows["amc23"][f"{metric}_hi"]
    assert "| amc23 | 2 |" in (out / "summary.md").read_text()
    from results.collect import collect

    row = collect([out]).iloc[0]
    assert (row["method"], row["seed"], row["step"]) == ("smoke", 0, 0)
    assert row["amc23_exceed"] == pytest.approx(100 * rows["amc23"]["exceed"])


def test_bfcl_pipeline(assets, engine, tmp_path):
    pytest.importorskip("bfcl_eval")
    out = tmp_path / "bfcl"
    # the paper models' window: the tiny model's own (512) is shorter than every BFCL prompt
    status = main(["bfcl", "all", "--out", str(out), "--model", assets["model_dir"], "--categories",
                   "simple_python", "live_simple", "multi_turn_base", "--limit", "1", "--max-new-tokens", "12",
                   "--context-window", str(ENGINE_WINDOW)], engine)
    assert status == 0
    generations = {r["case_id"]: r for r in read_jsonl(out / "generations.jsonl")}
    assert set(generations) == {"simple_python_0", "live_simple_0-0-0", "multi_turn_base_0"}
    multi = generations["multi_turn_base_0"]
    # the tiny model never emits a parseable call: one emission per user turn, and every turn reached
    from results.evaluation.bfcl_eval import load_bfcl_cases

    case = load_bfcl_cases(["multi_turn_base"], limit=1)[0]
    assert len(multi["turns"]) == len(case["entry"]["question"]) and all(len(t) == 1 for t in multi["turns"])
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["categories"]) == {"simple_python", "live_simple", "multi_turn_base"}
    assert all(v["cases"] == 1 for v in summary["categories"].values())
    # the three-reward length diagnostics are scored and shown (their arithmetic: test_eval_metrics.py)
    assert summary["over_window_cases"] == 0 and summary["kinds"][2:] == ["length", "length_le_16", "think_words"]
    assert "length_le_16" in (out / "summary.md").read_text()


def prompt_tokens(model_dir: str, messages: list[dict]) -> int:
    """The prompt's token count as the backend measures it (the chat template, no special tokens added)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_bfcl_prompts_over_the_window_fail_their_case_and_are_counted(assets, engine, tmp_path):
    """The window clamps new tokens to min(max, window - prompt - 2); a prompt leaving none, at the first step
    or later in a dialogue, fails its case (counted) and the evaluation finishes."""
    pytest.importorskip("bfcl_eval")
    from results.evaluation.bfcl_eval import load_bfcl_cases

    # the default window is the model config's (512 for the tiny model): every BFCL prompt is over it
    out = tmp_path / "default"
    args = ["bfcl", "all", "--model", assets["model_dir"], "--limit", "1", "--max-new-tokens", "12"]
    assert main([*args, "--out", str(out), "--categories", "simple_python", "live_simple"], engine) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["over_window_cases"] == 2 and summary["missing_cases"] == 0
    assert all(v["accuracy"] == v["format"] == v["think_words"] == 0 for v in summary["categories"].values())
    assert json.loads((out / "generations.jsonl.meta.json").read_text())["sampling"]["context_window"] == 512
    # a window the multi-turn case's first prompt fits (12 new tokens) but its second does not
    case = load_bfcl_cases(["multi_turn_base"], limit=1)[0]
    first = prompt_tokens(assets["model_dir"], case["messages"])
    out = tmp_path / "later"
    assert main([*args, "--out", str(out), "--categories", "multi_turn_base",
                 "--context-window", str(first + 2 + 12)], engine) == 0
    record = read_jsonl(out / "generations.jsonl")[0]
    assert record["over_window"] and [len(turn) for turn in record["turns"]] == [1, 0]  # failed in turn 2
    assert 0 < record["n_tokens"][0][0] <= 12
    score = read_jsonl(out / "scores.jsonl")[0]
    assert score["over_window"] and not score["valid"] and score["format"] == 0.0
    assert json.loads((out / "summary.json").read_text())["over_window_cases"] == 1


def test_a_failed_engine_start_is_one_line_naming_the_setting(assets, tmp_path, python_module):
    """A model whose window needs more KV cache than conf/cluster/cpu.yaml gives (128 MiB: 262,144 tokens of the
    tiny model): vLLM refuses to start, and the command says so in one line naming the setting, no traceback."""
    import shutil

    model = tmp_path / "long_window"
    shutil.copytree(assets["model_dir"], model)
    config = json.loads((model / "config.json").read_text())
    config["max_position_embeddings"] = 300_000
    (model / "config.json").write_text(json.dumps(config))
    done = python_module("results.evaluation", "toolrl", "generate", "--out", tmp_path / "out", "--model", model,
                         "--data", assets["test"], "--limit", "1", "--device", "cpu", timeout=600)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("vLLM could not start on cpu") and "KV cache" in last, last
    assert "kv_cache_memory_bytes" in last and "conf/cluster/cpu.yaml" in last, last
