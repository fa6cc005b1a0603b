"""BFCL v4: BFCL's preparation of test entries and ToolRL's rendering (data_prep.bfcl, read by the evaluation)."""

from __future__ import annotations

import copy
import importlib.util
import json

import pytest

from data_prep import bfcl
from data_prep.common import DataPrepError
from results.bfcl import CASE_COUNTS
from tasks import toolrl as protocol

JAVA_FUNCTION = {"name": "Util.join", "description": "Join items.", "parameters": {"type": "dict", "properties": {
    "items": {"type": "Array", "description": "The items.", "items": {"type": "String"}},
    "sep": {"type": "String", "description": "Separator."}, "ctx": {"type": "any", "description": "Context."}},
    "required": ["items"]}}
MATH_DOCS = [{"name": name, "description": name, "parameters": {"type": "dict", "properties": {
    "x": {"type": "float", "description": "x"}}}} for name in ("add", "sqrt")]
MISS_FUNC = {"id": "multi_turn_miss_func_0", "question": [[{"role": "user", "content": "Add 1 and 2."}], [],
                                                          [{"role": "user", "content": "Root of 9?"}]],
             "initial_config": {"MathAPI": {}}, "involved_classes": ["MathAPI"], "missed_function": {"2": ["sqrt"]}}


@pytest.fixture()
def data_dir(tmp_path):
    (tmp_path / "multi_turn_func_doc").mkdir()
    (tmp_path / "multi_turn_func_doc" / "math_api.json").write_text("\n".join(json.dumps(d) for d in MATH_DOCS))
    return tmp_path


def test_java_case_is_prepared_and_rendered_like_bfcl_and_toolrl(data_dir):
    entry = {"id": "simple_java_0", "question": [[{"role": "user", "content": " Join a and b. "}]],
             "function": [JAVA_FUNCTION]}
    original = copy.deepcopy(entry)
    prepared = bfcl.prepare_entry(entry, "simple_java", data_dir, {})
    row = bfcl.entry_row(prepared, {"ground_truth": [{"Util.join": {"items": ["[a, b]"]}}]}, "simple_java", 0)
    note = "type parameter in string representation."
    tool = {"name": "Util.join", "description": "Join items. Note that the provided function is in Java 8 SDK syntax.",
            "parameters": {
                "items": {"type": "string", "description": f"The items. This is Java Array {note} The list elements "
                          "are of type String; they are not in string representation."},
                "sep": {"type": "string", "description": f"Separator. This is Java String {note}"},
                "ctx": {"type": "string", "description": "Context. This parameter can be of any type of Java object "
                        "in string representation."}}}
    assert row["prompt"] == [
        {"role": "system", "content": protocol.system_prompt([tool]) + "\n"},
        {"role": "user", "content": f"**Dialogue Records History**\n<user> Join a and b.\n"
                                    f"{protocol.BFCL_SINGLE_TURN_INSTRUCTION} </user>"}]
    assert row["data_source"] == "bfcl_simple_java" and entry == original  # the input is not mutated
    assert json.loads(row["reward_model"]["ground_truth"]) == [{"Util.join": {"items": ["[a, b]"]}}]
    assert row["extra_info"]["id"] == "simple_java_0" and row["extra_info"]["group"] == "non_live"


def test_miss_func_holds_out_functions_without_the_hint(data_dir):
    prepared = bfcl.prepare_entry(MISS_FUNC, "multi_turn_miss_func", data_dir, {})
    row = bfcl.entry_row(prepared, {"ground_truth": [["add(x=1.0)"], [], ["sqrt(x=9.0)"]]}, "multi_turn_miss_func", 0)
    entry = json.loads(row["extra_info"]["entry"])
    assert [f["name"] for f in entry["function"]] == ["add"]
    assert entry["function"][0]["description"] == "add Note that the provided function is in Python 3 syntax."
    assert entry["missed_function"] == {"2": [MATH_DOCS[1]]}  # held out, without the hint, as BFCL does
    assert "Name: sqrt" not in row["prompt"][0]["content"] and "1. Name: add\n" in row["prompt"][0]["content"]
    assert protocol.BFCL_MULTI_TURN_INSTRUCTION in row["prompt"][1]["content"]
    assert row["extra_info"]["turns"] == 3 and row["extra_info"]["group"] == "multi_turn"


@pytest.mark.parametrize("entry, content, message", [
    ({**MISS_FUNC, "involved_classes": ["Cobol"]}, None, "unknown multi-turn class 'Cobol'"),
    ({**MISS_FUNC, "missed_function": {"1": ["cube"]}}, None, "missed function 'cube' is not among"),
    (MISS_FUNC, "{not json\n", "math_api.json:1 is not a JSON object"),
])
def test_bad_data_gives_one_clear_error(data_dir, entry, content, message):
    if content is not None:
        (data_dir / "multi_turn_func_doc" / "math_api.json").write_text(content)
    with pytest.raises(DataPrepError, match=message):
        bfcl.prepare_entry(entry, "multi_turn_miss_func", data_dir, {})


@pytest.mark.slow  # prepares all 3,301 BFCL cases (~6 s)
@pytest.mark.skipif(importlib.util.find_spec("bfcl_eval") is None, reason="bfcl-eval is not installed")
def test_bundled_data_gives_the_papers_3301_cases():
    data_dir, cache, counts = bfcl.package_data_dir(), {}, {}
    for category in CASE_COUNTS:
        entries = bfcl.read_json_lines(data_dir / f"BFCL_v4_{category}.json")
        answers = {a["id"] for a in bfcl.read_json_lines(data_dir / "possible_answer" / f"BFCL_v4_{category}.json")}
        assert {e["id"] for e in entries} == answers
        for entry in entries:
            row = bfcl.entry_row(bfcl.prepare_entry(entry, category, data_dir, cache), {"ground_truth": []}, category, 0)
            assert row["prompt"][0]["content"].startswith(protocol.SYSTEM_HEADER + "1. Name: ")
        counts[category] = len(entries)
    assert counts == CASE_COUNTS and sum(counts.values()) == 3301
