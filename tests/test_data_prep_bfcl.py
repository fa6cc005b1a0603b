"""BFCL v4: BFCL's preparation of test entries, ToolRL rendering, counts on the bundled data."""

from __future__ import annotations

import importlib.util
import json

import pyarrow.parquet as pq
import pytest

from data_prep import bfcl
from data_prep.__main__ import main as cli_main
from data_prep.common import DataPrepError, read_data_card
from tasks import toolrl as protocol

JAVA_FUNCTION = {"name": "Util.join", "description": "Join items.", "parameters": {"type": "dict", "properties": {
    "items": {"type": "Array", "description": "The items.", "items": {"type": "String"}},
    "sep": {"type": "String", "description": "Separator."}, "ctx": {"type": "any", "description": "Context."}},
    "required": ["items"]}}
MATH_DOCS = [{"name": name, "description": name, "parameters": {"type": "dict", "properties": {
    "x": {"type": "float", "description": "x"}}}} for name in ("add", "sqrt")]
FILES = {
    "BFCL_v4_simple_java.json": [{"id": "simple_java_0", "question": [[{"role": "user", "content": " Join a and b. "}]],
                                  "function": [JAVA_FUNCTION]}],
    "possible_answer/BFCL_v4_simple_java.json": [{"id": "simple_java_0", "ground_truth": [{"Util.join": {"items": ["[a, b]"]}}]}],
    "BFCL_v4_multi_turn_miss_func.json": [
        {"id": "multi_turn_miss_func_0", "question": [[{"role": "user", "content": "Add 1 and 2."}], [],
                                                      [{"role": "user", "content": "Root of 9?"}]],
         "initial_config": {"MathAPI": {}}, "involved_classes": ["MathAPI"], "missed_function": {"2": ["sqrt"]}},
        {"id": "multi_turn_miss_func_1", "question": [[{"role": "user", "content": "x"}]], "involved_classes": ["MathAPI"]}],
    "possible_answer/BFCL_v4_multi_turn_miss_func.json": [
        {"id": "multi_turn_miss_func_0", "ground_truth": [["add(x=1.0)"], [], ["sqrt(x=9.0)"]]}],
    "multi_turn_func_doc/math_api.json": MATH_DOCS,
}


@pytest.fixture()
def bfcl_folder(tmp_path):
    """A tiny folder in the layout bfcl-eval bundles: one Java case, one miss_func case and one without an answer."""
    for name, entries in FILES.items():
        (tmp_path / "data" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "data" / name).write_text("\n".join(json.dumps(e) for e in entries) + "\n")
    return tmp_path / "data"


def test_java_case_is_prepared_and_rendered_like_bfcl_and_toolrl(bfcl_folder, tmp_path):
    card = bfcl.build(tmp_path / "out", str(bfcl_folder), ["simple_java"])
    (row,) = pq.read_table(tmp_path / "out" / "test.parquet").to_pylist()
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
    assert row["data_source"] == "bfcl_simple_java"
    assert json.loads(row["reward_model"]["ground_truth"]) == [{"Util.join": {"items": ["[a, b]"]}}]
    assert row["extra_info"]["id"] == "simple_java_0" and row["extra_info"]["group"] == "non_live"
    assert JAVA_FUNCTION["parameters"]["properties"]["sep"]["type"] == "String"  # the input is not mutated
    assert card["unexpected_row_counts"] == {"simple_java": {"rows": 1, "expected": 100}}


def test_miss_func_holds_out_functions_and_drops_cases_without_answers(bfcl_folder, tmp_path):
    card = bfcl.build(tmp_path / "out", str(bfcl_folder), ["multi_turn_miss_func"])
    (row,) = pq.read_table(tmp_path / "out" / "test.parquet").to_pylist()
    assert {f["name"]: f["dropped"] for f in card["filters"]} == {"no_possible_answer": 1, "empty_question": 0}
    entry = json.loads(row["extra_info"]["entry"])
    assert [f["name"] for f in entry["function"]] == ["add"]
    assert entry["function"][0]["description"] == "add Note that the provided function is in Python 3 syntax."
    assert entry["missed_function"] == {"2": [MATH_DOCS[1]]}  # held out, without the hint, as BFCL does
    assert "Name: sqrt" not in row["prompt"][0]["content"] and "1. Name: add\n" in row["prompt"][0]["content"]
    assert protocol.BFCL_MULTI_TURN_INSTRUCTION in row["prompt"][1]["content"]
    assert row["extra_info"]["turns"] == 3 and row["extra_info"]["group"] == "multi_turn"
    assert "multi_turn_func_doc/math_api.json" in card["inputs_sha256"]


@pytest.mark.parametrize("categories, broken, message", [
    (["simple_cobol"], None, "unknown BFCL categories"), (["simple_python"], None, "BFCL file not found"),
    (["simple_java"], "{not json\n", "is not a JSON object"),
])
def test_bad_requests_give_clear_errors_and_no_output(bfcl_folder, tmp_path, categories, broken, message):
    if broken:
        (bfcl_folder / "BFCL_v4_simple_java.json").write_text(broken)
    with pytest.raises(DataPrepError, match=message):
        bfcl.build(tmp_path / "out", str(bfcl_folder), categories)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # builds all 3,301 BFCL cases (~6 s)
@pytest.mark.skipif(importlib.util.find_spec("bfcl_eval") is None, reason="bfcl-eval is not installed")
def test_bundled_data_gives_the_papers_3301_cases(tmp_path):
    assert cli_main(["bfcl", "--out", str(tmp_path / "out")]) == 0
    card = read_data_card(tmp_path / "out")
    assert card["rows_per_category"] == {name: count for name, (_, count) in bfcl.CATEGORIES.items()}
    assert card["splits"] == {"test": 3301} and card["unexpected_row_counts"] == {}
    rows = pq.read_table(tmp_path / "out" / "test.parquet", columns=["prompt"]).to_pylist()
    assert all(r["prompt"][0]["content"].startswith(protocol.SYSTEM_HEADER + "1. Name: ") for r in rows)
