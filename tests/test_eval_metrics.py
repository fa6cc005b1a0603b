"""Evaluation metrics without a model: math Acc/Exceed/Joint and bootstrap CIs on outputs with known
answers, ToolRL held-out summaries, BFCL scoring through bfcl-eval's checkers, resumable case files."""

from __future__ import annotations

import ast
import importlib.util
import json

import numpy as np
import pandas as pd
import pytest

from results.evaluation import bfcl_eval, math_eval, toolrl_eval
from results.evaluation.runner import case_seed, run_cases
from results.evaluation.store import CaseStore, CaseStoreError


def sample(text: str, n_tokens: int, finish: str = "stop") -> dict:
    return {"text": text, "n_tokens": n_tokens, "finish_reason": finish}


def test_math_sample_rules_on_known_answers():
    """strict = verl's Hendrycks grader on the text, numeq = strict or the numeric fallback (Acc); Exceed
    counts generated ids with EOS; a truncated sample is graded like any other."""
    record = {"case_id": "q", "data_source": "math500", "answer": "\\frac{1}{2}", "samples": [
        sample("so the answer is \\boxed{\\frac{1}{2}}", 120),
        sample("... \\boxed{0.5}", 4500),  # Hendrycks maps 0.5 to \\frac{1}{2}
        sample("<think> ... \\boxed{\\frac12} and then I ran", 32768, "length"),  # truncated, right box
        sample("... \\boxed{3}", 50),
        sample("I do not know", 3999),  # 3,999 + EOS = 4,000: within the limit
        sample("\\boxed{\\dfrac{2}{4}}", 4000),  # 4,001 ids with EOS: over; not a plain number either
    ]}
    scored = math_eval.score_record(record)
    assert [scored[k] for k in ("strict", "correct", "exceed", "joint", "n_tokens")] == [
        [1, 1, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0], [0, 1, 1, 0, 0, 1], [1, 0, 0, 0, 0, 0], [121, 4501, 32768, 51, 4000, 4001]]


@pytest.mark.parametrize("text, value", [("025", 25.0), ("1,000", 1000.0), ("4.5\\times10^{33}", 4.5e33),
                                         ("10^{11}", 1e11), ("45^\\circ", 45.0), ("3\\text{ cm}", 3.0),
                                         ("\\frac{1}{2}", None), ("1, 2", 12.0), ("\\sqrt{2}", None), ("x", None)])
def test_plain_number(text, value):
    assert math_eval.plain_number(text) == value


def loop_summary(scored, n_boot, seed):
    """Plain-loop Acc/Exceed/Joint, macro and percentile CIs, drawing the same indices as the code."""
    rng = np.random.default_rng(seed)
    benches = [b for b in math_eval.BENCHMARK_ORDER if any(r["data_source"] == b for r in scored)]
    out, boots = {}, {m: [] for m in math_eval.METRICS}
    keys = dict(zip(math_eval.METRICS, ("correct", "strict", "exceed", "joint"), strict=True))
    for bench in benches:
        rows = [r for r in scored if r["data_source"] == bench]
        per_q = {m: [sum(r[key]) / len(r[key]) for r in rows] for m, key in keys.items()}
        idx = rng.integers(0, len(rows), size=(n_boot, len(rows)))
        for m in math_eval.METRICS:
            boot = [sum(per_q[m][i] for i in idx[b]) / len(rows) for b in range(n_boot)]
            boots[m].append(boot)
            out[(bench, m)] = (sum(per_q[m]) / len(rows), *np.percentile(boot, [2.5, 97.5]))
    for m in math_eval.METRICS:
        macro_boot = [sum(b[k] for b in boots[m]) / len(benches) for k in range(n_boot)]
        out[("macro", m)] = (sum(out[(b, m)][0] for b in benches) / len(benches), *np.percentile(macro_boot, [2.5, 97.5]))
    return out


def test_math_summary_equals_plain_loop_with_bootstrap():
    rng, scored = np.random.default_rng(3), []
    for bench, n_q in (("aime24", 30), ("math500", 50)):
        for q in range(n_q):
            correct = (rng.uniform(size=16) < rng.uniform(0, 1)).astype(int).tolist()
            exceed = (rng.uniform(size=16) < 0.3).astype(int).tolist()
            scored.append({"case_id": f"{bench}_{q}", "data_source": bench, "correct": correct, "exceed": exceed,
                           "strict": [c * int(rng.uniform() < 0.9) for c in correct], "n_tokens": [100] * 16,
                           "joint": [int(c and not e) for c, e in zip(correct, exceed, strict=True)]})
    table = math_eval.summarise_math(scored, n_boot=300, seed=7).set_index("benchmark")
    expected = loop_summary(scored, 300, 7)
    assert list(table.index) == ["aime24", "math500", "macro"]
    for (bench, metric), interval in expected.items():
        assert table.loc[bench, [metric, f"{metric}_lo", f"{metric}_hi"]].tolist() == pytest.approx(interval, abs=1e-12)
        assert interval[1] <= interval[0] <= interval[2]
    assert table.loc["macro", "questions"] == 80


def test_math_loader_reads_raw_and_verl_files(tmp_path):
    (tmp_path / "amc.json").write_text(json.dumps([{"problem": "1+1?", "answer": 2.0}, {"problem": "x", "answer": ["7\n"]}]))
    pd.DataFrame([{"data_source": "minerva", "prompt": [{"role": "user", "content": "q"}],
                   "reward_model": {"ground_truth": "9.6"}, "extra_info": {"index": 4}}]).to_parquet(tmp_path / "t.parquet")
    cases = math_eval.load_math_cases([tmp_path / "amc.json", tmp_path / "t.parquet"])
    # one answer string per question; the raw files get the training prompt
    assert [(c["case_id"], c["answer"]) for c in cases] == [("amc23_0", "2"), ("amc23_1", "7"), ("minerva_4", "9.6")]
    assert cases[0]["messages"] == [{"role": "user", "content": "1+1?\n\nPlease reason step by step, and put your "
                                                                "final answer within \\boxed{}."}]
    with pytest.raises(ValueError, match="samples"):
        math_eval.check_complete([{"case_id": "a", "correct": [1] * 3, "n_tokens": [1] * 3}], 16)


def test_toolrl_scores_and_summary():
    gt = '<think> x </think>\n<tool_call>\n{"name": "f", "parameters": {"a": 1}}\n</tool_call>'
    record = {"case_id": "r0", "data_source": "rlla", "ground_truth": gt, "samples": [
        sample(gt, 20), sample('<think> x </think>\n<tool_call>\n{"name": "f", "parameters": {"a": 2}}\n</tool_call>', 20),
        sample("no tags", 3)]}
    scored = toolrl_eval.score_record(record)
    assert scored["format"] == [1.0, 1.0, 0.0] and scored["exact"] == [1.0, 0.0, 0.0]
    assert scored["correctness"][0] == 3.0 > scored["correctness"][1] > -3.0 == scored["correctness"][2]
    other = {**scored, "case_id": "r1", "format": [1.0] * 3, "exact": [1.0] * 3, "correctness": [3.0] * 3}
    summary = toolrl_eval.summarise_toolrl([scored, other], n_boot=200)
    assert summary["format"] == pytest.approx((2 / 3 + 1) / 2)
    assert summary["exact"] == pytest.approx((1 / 3 + 1) / 2)
    assert summary["format_lo"] <= summary["format"] <= summary["format_hi"]


needs_bfcl = pytest.mark.skipif(importlib.util.find_spec("bfcl_eval") is None,
                                reason="bfcl-eval is not installed (pip install --no-deps bfcl-eval)")


def toolrl_text(calls: list[dict]) -> str:
    body = "\n".join(json.dumps({"name": c["name"], "parameters": c["parameters"]}) for c in calls)
    return f"<think> calling </think>\n<tool_call>\n{body}\n</tool_call>"


def bfcl_record(case: dict, *turns: str) -> dict:
    return {"case_id": case["case_id"], "category": case["category"], "turns": [[t] for t in turns], "force_quit": False}


def possible_answer(ground_truth: list[dict], source_text: bool = False) -> list[dict] | None:
    """A possible answer as ToolRL calls: the first allowed value per parameter, as Java/JavaScript source text
    with `source_text`; None when a value is itself a structure of options."""
    calls = []
    for call in ground_truth:
        ((name, params),) = call.items()
        chosen = {}
        for key, options in params.items():
            value = next((o for o in options if o != ""), None)
            if isinstance(value, dict) or (source_text and isinstance(value, list)):
                return None
            if value is not None:
                chosen[key] = value if isinstance(value, str) or not source_text else json.dumps(value)
        calls.append({"name": name, "parameters": chosen})
    return calls


@pytest.mark.parametrize("category", ["simple_python", "parallel", "live_simple", "live_parallel"])
@needs_bfcl
def test_bfcl_checker_accepts_possible_answers_and_rejects_wrong_ones(category):
    checked = 0
    for case in bfcl_eval.load_bfcl_cases([category], limit=12):
        if (calls := possible_answer(case["ground_truth"])) is None:
            continue
        result = bfcl_eval.score_record(bfcl_record(case, toolrl_text(calls)), case)
        assert result["valid"] and result["format"] == 1.0, (case["case_id"], result["error"])
        renamed = [{**c, "name": c["name"] + "_x"} for c in calls]
        assert not bfcl_eval.score_record(bfcl_record(case, toolrl_text(renamed)), case)["valid"]
        result = bfcl_eval.score_record(bfcl_record(case, "<think> hm </think>\n<response> no call </response>"), case)
        assert not result["valid"] and result["format"] == 1.0  # format is not accuracy
        checked += 1
    assert checked >= 8


def keyword_calls(turn: list[str]) -> list[dict] | None:
    """A ground-truth turn as ToolRL calls; None when a call passes an argument by position."""
    nodes = [ast.parse(text, mode="eval").body for text in turn]
    return None if any(node.args for node in nodes) else [
        {"name": n.func.id, "parameters": {k.arg: ast.literal_eval(k.value) for k in n.keywords}} for n in nodes]


@needs_bfcl
def test_bfcl_multi_turn_checker_on_ground_truth_execution():
    """Multi-turn cases whose ground truth uses keyword arguments: replaying it as ToolRL emissions passes
    bfcl-eval's state/response checker; dropping one turn's calls fails it."""
    cases = bfcl_eval.load_bfcl_cases(["multi_turn_base"], limit=15)
    replayable = [(case, turns) for case in cases if all(turns := [keyword_calls(t) for t in case["ground_truth"]])]
    assert len(replayable) >= 3
    for case, turns in replayable[:3]:
        emissions = [toolrl_text(t) for t in turns]
        assert bfcl_eval.score_record(bfcl_record(case, *emissions), case)["valid"], case["case_id"]
        skipped = bfcl_record(case, "<think> skip </think>\n<response> done </response>", *emissions[1:])
        assert not bfcl_eval.score_record(skipped, case)["valid"]
        assert not bfcl_eval.score_record(bfcl_record(case, *emissions[:-1]), case)["valid"]


def test_bfcl_length_diagnostics_aggregate_like_format():
    """Per emission -> per case -> per category -> the BFCL groups, against a plain loop."""
    from results import bfcl

    emissions = ["<think> a b c </think>\n<response> r </response>", "<think> " + "w " * 20 + "</think>",
                 "no think", "<think> x </think>\n<tool_call>\n{}\n</tool_call>"]
    scored, expected = [], {}
    for c, category in enumerate(bfcl.CATEGORIES):
        cases = [emissions[(c + i) % 4: (c + i) % 4 + 1 + i % 3] for i in range(3)] + [[]]  # one case without
        for i, texts in enumerate(cases):
            diagnostics = bfcl_eval.case_diagnostics(texts, 16)
            scored.append({"case_id": f"{category}_{i}", "category": category, "valid": True, **diagnostics})
        per_case = [(sum(bfcl_eval.emission_length(t, 16) for t in texts) / len(texts) if texts else 0.0,
                     sum(bfcl_eval.think_words(t) for t in texts) / len(texts) if texts else 0.0) for texts in cases]
        expected[category] = (100 * sum(p[0] for p in per_case) / len(cases), sum(p[1] for p in per_case) / len(cases))
    summary = bfcl_eval.summarise_bfcl(scored)
    assert summary["kinds"] == ["accuracy", "format", "length", "length_le_16", "think_words"]
    for index, name in ((0, "length"), (0, "length_le_16"), (1, "think_words")):
        values = {c: expected[c][index] for c in bfcl.CATEGORIES}
        non_live = (sum(values[c] for c in bfcl.SIMPLE_LANGUAGES) / 3 + values["multiple"] + values["parallel"]
                    + values["parallel_multiple"]) / 4
        multi = sum(values[c] for c in bfcl.MULTI_TURN_CATEGORIES) / 4
        # Live is the micro mean over the cases scored (4 per category here), as for format
        live = sum(values[c] for c in bfcl.LIVE_CATEGORIES) / 4
        assert summary[f"groups_{name}"]["live"] == pytest.approx(live)
        assert summary[f"average_{name}"] == pytest.approx((live + non_live + multi) / 3)
        assert all(summary["categories"][c][name] == pytest.approx(values[c]) for c in bfcl.CATEGORIES)
    from results.collect import flatten_summary

    row = flatten_summary({**summary, "bench": "bfcl"})
    assert row["average_length_le_16"] == summary["average_length_le_16"] and row["over_window_cases"] == 0
    assert summary["average_accuracy"] == 100.0 and bfcl_eval.summarise_bfcl(scored[:8])["groups_accuracy"] is None


def test_case_store_resumes_repairs_and_refuses_other_settings(tmp_path):
    path = tmp_path / "gen.jsonl"
    store = CaseStore(path, {"sampling": {"n": 2}})
    cases = [{"case_id": f"c{i}"} for i in range(5)]
    calls = []

    def produce(batch):
        calls.append([c["case_id"] for c in batch])
        return [{"case_id": c["case_id"], "value": case_seed(0, c["case_id"])} for c in batch]

    run_cases(cases[:3], store, produce, batch_size=2)
    with open(path, "a") as handle:  # a run killed mid-write
        handle.write('{"case_id": "c3", "val')
    store = CaseStore(path, {"sampling": {"n": 2}})
    assert sorted(store.records) == ["c0", "c1", "c2"]
    summary = run_cases(cases, store, produce, batch_size=2)
    assert summary.already_done == 3 and summary.generated == 2
    assert calls[-1] == ["c3", "c4"]
    assert len(path.read_text().splitlines()) == 5
    with pytest.raises(CaseStoreError, match="sampling"):
        CaseStore(path, {"sampling": {"n": 4}})


def test_infrastructure_errors_are_retried_then_left_missing(tmp_path):
    store, failures = CaseStore(tmp_path / "gen.jsonl"), [RuntimeError("CUDA error: an illegal memory access")]

    def produce(batch):
        if failures:
            raise failures.pop(0)
        return [{"case_id": c["case_id"]} for c in batch]

    summary = run_cases([{"case_id": "a"}, {"case_id": "b"}], store, produce, retries=2, backoff_s=0)
    assert summary.retries == 1 and summary.generated == 2 and not summary.missing
    failures[:] = [ConnectionError("engine gone")] * 2
    summary = run_cases([{"case_id": "c"}], store, produce, retries=1, backoff_s=0)
    assert summary.missing == ["c"] and "c" not in store  # missing, never recorded as an answer
    failures[:] = [ValueError("prompt too long")]  # not an infrastructure error: stops the run
    with pytest.raises(ValueError, match="prompt too long"):
        run_cases([{"case_id": "d"}], store, produce, backoff_s=0)


@pytest.mark.parametrize("bench, count, words", [("olympiad_bench", 674, "hub copy the authors used"),
                                                  ("olympiad_bench", 675, "DeepScaleR's local copy"),
                                                  ("math500", 500, None)])
def test_math_table_names_the_olympiadbench_copy(bench, count, words):
    found = math_eval.olympiad_copy(pd.DataFrame([{"benchmark": bench, "questions": count}]))
    assert found == words or words in found
