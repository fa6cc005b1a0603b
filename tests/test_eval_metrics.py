"""Evaluation without a model: math Acc/Exceed/Joint and bootstrap CIs on outputs with known answers, ToolRL
held-out summaries, BFCL scoring through bfcl-eval's checkers, resumable case files; BFCL as the authors ran it:
ToolRL's BFCL handler's rendering, its decoding (last block, bad lines skipped, "none" dropped, values as
parsed), the dialogue driver on real BFCL entries with a scripted model."""

from __future__ import annotations

import ast
import importlib.util
import json

import numpy as np
import pandas as pd
import pytest

from results.evaluation import bfcl_eval, math_eval, toolrl_eval
from results.evaluation.backends import Completion, SamplingConfig
from results.evaluation.runner import case_seed, run_cases
from results.evaluation.store import CaseStore, CaseStoreError
from tasks import toolrl as protocol


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


# The handler's instructions (ToolRL's BFCL handler, "RLLA"); BFCL's own strings are checked against bfcl-eval below.
SINGLE, MULTI = protocol.BFCL_SINGLE_TURN_INSTRUCTION, protocol.BFCL_MULTI_TURN_INSTRUCTION
FOLLOW_UP = f"<user> {protocol.BFCL_FOLLOW_UP_INSTRUCTION} </user>"
FUNCTIONS = [
    {"name": "add", "description": "Add two numbers.",
     "parameters": {"type": "dict", "properties": {"a": {"type": "integer"},
                                                   "b": {"type": "integer", "description": "second"}},
                    "required": ["a", "b"]}},
    {"name": "ping", "description": "Ping.", "parameters": {"type": "dict", "properties": {}}},
]
CALL_ADD = '<think> add them </think>\n<tool_call>\n{"name": "add", "parameters": {"a": 2, "b": 3}}\n</tool_call>'


def test_single_turn_prompt_is_the_handlers():
    history = [{"role": "system", "content": "BFCL's own system prompt is skipped"},
               {"role": "user", "content": "  What is 2 + 3?\n"}]
    system, user = protocol.bfcl_messages(history, FUNCTIONS, multi_turn=False)
    assert user == {"role": "user", "content": f"**Dialogue Records History**\n<user> What is 2 + 3?\n{SINGLE} </user>"}
    # the training instruction (test_data_prep.py: the official rows) over BFCL's parameter properties
    assert system == {"role": "system", "content": protocol.system_prompt(protocol.bfcl_tools(FUNCTIONS)) + "\n"}
    assert ('1. Name: add\nDescription: Add two numbers.\nParameters: {"a": {"type": "integer"}, "b": {"type": '
            '"integer", "description": "second"}}\n2. Name: ping\nDescription: Ping.\nParameters: {}\n') in system["content"]


def test_multi_turn_history_with_tool_results_and_a_missed_function_turn():
    held_out = [{"name": "sort", "description": "Sort a file.", "parameters": {"type": "dict", "properties": {}}}]
    history = [
        {"role": "user", "content": "Add 2 and 3."},
        {"role": "assistant", "content": "  " + CALL_ADD + "\n"},
        {"role": "tool", "name": "add(a=2, b=3)", "content": " 5 "},
        {"role": "assistant", "content": "<think> done </think>\n<response> 5 </response>"},
        protocol.bfcl_more_functions_message(held_out),
        {"role": "assistant", "content": '<tool_call>\n{"name": "sort", "parameters": {}}\n</tool_call>'},
        {"role": "tool", "name": "sort()", "content": "Error during execution: no file"},
    ]
    expected = (
        f"**Dialogue Records History**\n<user> Add 2 and 3.\n{MULTI} </user>\n"
        f"\n{CALL_ADD}\n"
        "<obs> You have made the tool call add(a=2, b=3). Execution returns: 5 </obs>\n"
        "\n<think> done </think>\n<response> 5 </response>\n"
        "<user> [{'name': 'sort', 'description': 'Sort a file.', 'parameters': {'type': 'dict', 'properties': {}}}]\n"
        f"I have updated some more functions you can choose from. What about now?\n{MULTI} </user>\n"
        '\n<tool_call>\n{"name": "sort", "parameters": {}}\n</tool_call>\n'
        "<obs> You have made the tool call sort(). Execution returns: Error during execution: no file </obs>\n"
        f"\n{FOLLOW_UP}"
    )
    assert protocol.bfcl_user_prompt(history, multi_turn=True) == expected
    # the follow-up comes only after a tool result that ends the history
    assert FOLLOW_UP not in protocol.bfcl_user_prompt(history[:4], multi_turn=True)
    assert protocol.bfcl_user_prompt(history[:3], multi_turn=True).endswith("5 </obs>\n\n" + FOLLOW_UP)
    with pytest.raises(ValueError, match="unknown role"):
        protocol.bfcl_user_prompt([{"role": "critic", "content": "x"}], multi_turn=True)


def test_decode_ast_reads_the_last_block_skips_bad_lines_and_drops_none():
    text = (
        '<think> maybe <tool_call>\n{"name": "wrong", "parameters": {}}\n</tool_call> </think>\n<tool_call>\n'
        '{"name": "add", "parameters": {"a": 2, "b": 3.0}}\n'
        "not json\n"
        '{"name": "add", "parameters": {"a": 1}\n'  # truncated line
        '{"parameters": {"a": 1}}\n'  # no name
        '{"name": "None", "parameters": {}}\n'
        '{"name": " none ", "parameters": {"x": 1}}\n'
        '{"name": 7, "parameters": {}}\n'  # a name that is not a string
        '{"name": "ping", "parameters": {}}\n'
        '{"name": "odd", "parameters": [1, 2]}\n'  # kept as parsed: BFCL's format check fails it
        "</tool_call>"
    )
    assert protocol.decode_ast(text) == [{"add": {"a": 2, "b": 3.0}}, {"ping": {}}, {"odd": [1, 2]}]
    assert not bfcl_eval.is_call_list(protocol.decode_ast(text))
    assert bfcl_eval.is_call_list(protocol.decode_ast(text.replace('\n{"name": "odd", "parameters": [1, 2]}', "")))
    assert protocol.decode_ast("<think> x </think>\n<response> none </response>") == []
    assert protocol.decode_ast('<tool_call>\n{"name": "ping", "parameters": {}}') == [{"ping": {}}]  # unclosed
    # values stay as parsed: a Java boolean is True, not the source text "true"
    java = '<tool_call>\n{"name": "Util.join", "parameters": {"flag": true, "n": 5, "s": "x"}}\n</tool_call>'
    assert protocol.decode_ast(java) == [{"Util.join": {"flag": True, "n": 5, "s": "x"}}]


def test_decode_execute_follows_the_handler():
    text = (
        "<tool_call>\n"
        '{"name": "cd", "parameters": {"folder": "doc"}}\n'
        "garbage\n"
        "[1, 2]\n"  # not an object: skipped
        '{"name": "NONE", "parameters": "ignored"}\n'  # dropped before its parameters are read
        '{"name": "ls"}\n'  # parameters default to {}
        '{"parameters": {"a": true}}\n'  # name defaults to ""
        '{"name": "echo", "parameters": {"content": "it\'s", "n": null, "f": 1.5}}\n'
        "</tool_call>"
    )
    assert protocol.decode_execute(text) == [
        "cd(folder='doc')", "ls()", "(a=True)", "echo(content=\"it's\", n=None, f=1.5)"
    ]
    assert protocol.decode_execute("no call") == []
    with pytest.raises(protocol.UndecodableCalls, match="not a string"):
        protocol.decode_execute('<tool_call>\n{"name": 3}\n</tool_call>')
    with pytest.raises(protocol.UndecodableCalls, match="not an object"):
        protocol.decode_execute('<tool_call>\n{"name": "cd", "parameters": [1]}\n</tool_call>')
    assert bfcl_eval.step_calls('<tool_call>\n{"name": "cd", "parameters": [1]}\n</tool_call>') == []


@needs_bfcl
@pytest.mark.parametrize("category", ["simple_java", "simple_javascript"])
def test_java_and_javascript_values_are_checked_as_parsed(category):
    """Source-text values pass BFCL's checker; the same values parsed as JSON booleans or numbers fail, as
    they did for the authors (no conversion to source text)."""
    passed = failed = 0
    for case in bfcl_eval.load_bfcl_cases([category], limit=30):
        source, parsed = possible_answer(case["ground_truth"], source_text=True), possible_answer(case["ground_truth"])
        if source in (None, parsed) or not bfcl_eval.score_record(bfcl_record(case, toolrl_text(source)), case)["valid"]:
            continue
        passed += 1
        failed += not bfcl_eval.score_record(bfcl_record(case, toolrl_text(parsed)), case)["valid"]
    assert passed >= 4 and failed == passed


def test_emission_format_uses_the_original_format_test():
    texts = (CALL_ADD, "<think> a </think>\n<think> b </think>\n<response> c </response>",
             CALL_ADD + "\n<response> 5 </response>", "<response> c </response>")
    assert [bfcl_eval.emission_format(t) for t in texts] == [1.0, 1.0, 1.0, 0.0]


def authors_think_words(text: str) -> tuple[bool, int]:
    """The authors' diagnostics read plainly: the assistant text; valid when both think tags occur; the
    words of what follows the last "<think>" up to the next "</think>"."""
    text = text.split("<|im_start|>assistant")[-1].split("<|im_end|>")[0].strip()
    valid = "<think>" in text and "</think>" in text
    return valid, len(text.split("<think>")[-1].split("</think>")[0].strip().split()) if valid else 0


@pytest.mark.parametrize("text", [
    CALL_ADD,
    "<think> " + "w " * 16 + "</think>\n<response> r </response>",
    "<think> " + "w " * 17 + "</think>\n<response> r </response>",
    "<think> a b </think>\n<think> " + "w " * 20 + "</think>",  # the LAST span counts
    "<think> never closed",
    "no tags at all",
    "</think> closed first <think> one two",  # after the last <think> there is no </think>: to the end
    "<|im_start|>assistant\n<think> x y z </think>\n<response> r </response><|im_end|>",
])
def test_length_diagnostics_follow_the_authors_definitions(text):
    valid, words = authors_think_words(text)
    assert bfcl_eval.think_words(text) == words
    for limit in (2, 16):
        assert bfcl_eval.emission_length(text, limit) == float(valid and words <= limit)
    assert bfcl_eval.length_name(16) == "length_le_16"


def test_token_budget_is_the_authors_clamp():
    sampling = SamplingConfig(max_new_tokens=12, context_window=100)
    assert [sampling.token_budget(p) for p in (10, 90, 97, 98, 150)] == [12, 8, 1, 0, -52]
    assert SamplingConfig(max_new_tokens=12).token_budget(10**6) == 12  # no window: no clamp
    assert "context_window" not in SamplingConfig().as_dict()  # settings stored as before without a window


class ScriptedBackend:
    """A model that answers from a script and keeps every chat it received (and the seeds)."""

    def __init__(self, replies):
        self.replies, self.received, self.seeds = list(replies), [], []

    def chat(self, conversations, sampling, seeds):
        self.seeds.extend(seeds)
        self.received.extend(conversations)
        done = "<think> ok </think>\n<response> done </response>"
        return [[Completion(self.replies.pop(0) if self.replies else done, 5, "stop")] for _ in conversations]


@needs_bfcl
def test_miss_func_dialogue_renders_the_handlers_history():
    (case,) = bfcl_eval.load_bfcl_cases(["multi_turn_miss_func"], limit=1)
    held_out_turn, held_out = next(iter(case["entry"]["missed_function"].items()))
    backend = ScriptedBackend([
        '<think> where am I </think>\n<tool_call>\n{"name": "pwd", "parameters": {}}\n'
        '{"name": "none", "parameters": {}}\n</tool_call>',
        "<think> fine </think>\n<response> done </response>",
        '<think> nothing </think>\n<tool_call>\n{"name": "None", "parameters": {}}\n</tool_call>',
    ])
    (record,) = bfcl_eval.make_producer(backend, SamplingConfig(n=1, seed=0))([case])
    first, after_tool, next_turn = backend.received[:3]
    question = case["entry"]["question"]
    assert first == case["messages"]
    assert after_tool[0] == first[0]  # the tool list never changes
    assert after_tool[1]["content"].startswith(first[1]["content"] + "\n\n<think> where am I </think>")
    assert "<obs> You have made the tool call pwd(). Execution returns: " in after_tool[1]["content"]
    assert after_tool[1]["content"].endswith(FOLLOW_UP)
    assert next_turn[1]["content"].endswith(f"<response> done </response>\n<user> {question[1][0]['content']}\n{MULTI} </user>")
    # a "none" call alone decodes to nothing: the turn ends without a tool result
    assert len(record["turns"][1]) == 1
    assert backend.received[3][1]["content"].endswith(f"</tool_call>\n<user> {question[2][0]['content']}\n{MULTI} </user>")
    # the miss_func turn (turn 0 took two requests): BFCL's message, the functions not in the tool list
    from bfcl_eval.constants import default_prompts

    more = default_prompts.DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING.format(functions=held_out)
    missed_request = backend.received[1 + int(held_out_turn)]
    assert missed_request[1]["content"].endswith(f"<user> {more}\n{MULTI} </user>")
    assert all(f"Name: {f['name']}\n" not in missed_request[0]["content"] for f in held_out)
    assert len(record["turns"]) == len(question) and not record["force_quit"]
    assert set(backend.seeds) == {0}  # every request with the same seed, as the authors' handler
