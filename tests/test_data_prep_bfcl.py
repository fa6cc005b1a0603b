"""BFCL v4: BFCL's preparation of test entries, ToolRL rendering, counts on the bundled data."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from data_prep import bfcl
from data_prep.__main__ import main as cli_main
from data_prep.common import DataPrepError, read_data_card
from tasks import toolrl as protocol

JAVA_FUNCTION = {
    "name": "Util.join",
    "description": "Join items.",
    "parameters": {
        "type": "dict",
        "properties": {
            "items": {"type": "Array", "description": "The items.", "items": {"type": "String"}},
            "sep": {"type": "String", "description": "Separator."},
            "ctx": {"type": "any", "description": "Context."},
        },
        "required": ["items"],
    },
}
MATH_DOCS = [
    {
        "name": "add",
        "description": "Add two numbers.",
        "parameters": {"type": "dict", "properties": {"a": {"type": "float", "description": "a"}}},
    },
    {
        "name": "sqrt",
        "description": "Square root.",
        "parameters": {"type": "dict", "properties": {"x": {"type": "float", "description": "x"}}},
    },
]


def write_lines(path: Path, entries: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(json.dumps(e) for e in entries) + "\n")


@pytest.fixture()
def bfcl_folder(tmp_path):
    """A tiny folder in the layout bfcl-eval bundles: one Java case and one miss_func multi-turn case."""
    data = tmp_path / "data"
    write_lines(
        data / "BFCL_v4_simple_java.json",
        [
            {
                "id": "simple_java_0",
                "question": [[{"role": "user", "content": " Join a and b. "}]],
                "function": [JAVA_FUNCTION],
            },
        ],
    )
    write_lines(
        data / "possible_answer" / "BFCL_v4_simple_java.json",
        [
            {"id": "simple_java_0", "ground_truth": [{"Util.join": {"items": ["[a, b]"]}}]},
        ],
    )
    write_lines(
        data / "BFCL_v4_multi_turn_miss_func.json",
        [
            {
                "id": "multi_turn_miss_func_0",
                "question": [
                    [{"role": "user", "content": "Add 1 and 2."}],
                    [],
                    [{"role": "user", "content": "Root of 9?"}],
                ],
                "initial_config": {"MathAPI": {}},
                "path": ["MathAPI.add"],
                "involved_classes": ["MathAPI"],
                "missed_function": {"2": ["sqrt"]},
                "excluded_function": [],
            },
            {
                "id": "multi_turn_miss_func_1",
                "question": [[{"role": "user", "content": "x"}]],
                "involved_classes": ["MathAPI"],
            },
        ],
    )
    write_lines(
        data / "possible_answer" / "BFCL_v4_multi_turn_miss_func.json",
        [
            {"id": "multi_turn_miss_func_0", "ground_truth": [["add(a=1.0)"], [], ["sqrt(x=9.0)"]]},
        ],
    )
    write_lines(data / "multi_turn_func_doc" / "math_api.json", MATH_DOCS)
    return data


def test_java_case_is_prepared_and_rendered_like_bfcl_and_toolrl(bfcl_folder, tmp_path):
    card = bfcl.build(tmp_path / "out", str(bfcl_folder), ["simple_java"])
    (row,) = pq.read_table(tmp_path / "out" / "test.parquet").to_pylist()
    assert row["data_source"] == "bfcl_simple_java"
    expected_parameters = {
        "items": {
            "type": "string",
            "description": "The items. This is Java Array type parameter in string "
            "representation. The list elements are of type String; they are not in string representation.",
        },
        "sep": {
            "type": "string",
            "description": "Separator. This is Java String type parameter in string representation.",
        },
        "ctx": {
            "type": "string",
            "description": "Context. This parameter can be of any type of Java object in "
            "string representation.",
        },
    }
    tool = {
        "name": "Util.join",
        "description": "Join items. Note that the provided function is in Java 8 SDK syntax.",
        "parameters": expected_parameters,
    }
    assert row["prompt"][0] == {"role": "system", "content": protocol.system_prompt([tool]) + "\n"}
    assert row["prompt"][1]["content"] == (
        "**Dialogue Records History**\n<user> Join a and b.\n" + protocol.BFCL_SINGLE_TURN_INSTRUCTION + " </user>"
    )
    assert json.loads(row["reward_model"]["ground_truth"]) == [{"Util.join": {"items": ["[a, b]"]}}]
    assert row["extra_info"]["id"] == "simple_java_0" and row["extra_info"]["group"] == "non_live"
    assert JAVA_FUNCTION["parameters"]["properties"]["sep"]["type"] == "String"  # the input is not mutated
    assert card["unexpected_row_counts"] == {"simple_java": {"rows": 1, "expected": 100}}


def test_miss_func_holds_out_functions_and_drops_cases_without_answers(bfcl_folder, tmp_path):
    card = bfcl.build(tmp_path / "out", str(bfcl_folder), ["multi_turn_miss_func"])
    rows = pq.read_table(tmp_path / "out" / "test.parquet").to_pylist()
    assert len(rows) == 1
    assert {f["name"]: f["dropped"] for f in card["filters"]} == {
        "no_possible_answer": 1,
        "empty_question": 0,
    }
    row = rows[0]
    entry = json.loads(row["extra_info"]["entry"])
    assert [f["name"] for f in entry["function"]] == ["add"]
    assert entry["function"][0]["description"].endswith(
        "Note that the provided function is in Python 3 syntax."
    )
    assert entry["missed_function"] == {"2": [MATH_DOCS[1]]}  # held out, without the hint, as BFCL does
    assert "Name: sqrt" not in row["prompt"][0]["content"] and "1. Name: add\n" in row["prompt"][0]["content"]
    assert protocol.BFCL_MULTI_TURN_INSTRUCTION in row["prompt"][1]["content"]
    assert row["extra_info"]["turns"] == 3 and row["extra_info"]["group"] == "multi_turn"
    assert card["inputs_sha256"].keys() >= {"multi_turn_func_doc/math_api.json"}


def test_bad_requests_give_clear_errors(bfcl_folder, tmp_path):
    with pytest.raises(DataPrepError, match="unknown BFCL categories"):
        bfcl.build(tmp_path / "out", str(bfcl_folder), ["simple_cobol"])
    with pytest.raises(DataPrepError, match="BFCL file not found"):
        bfcl.build(tmp_path / "out", str(bfcl_folder), ["simple_python"])
    (bfcl_folder / "BFCL_v4_simple_java.json").write_text("{not json\n")
    with pytest.raises(DataPrepError, match="is not a JSON object"):
        bfcl.build(tmp_path / "out", str(bfcl_folder), ["simple_java"])
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # builds all 3,301 BFCL cases (~6 s)
@pytest.mark.skipif(importlib.util.find_spec("bfcl_eval") is None, reason="bfcl-eval is not installed")
def test_bundled_data_gives_the_papers_3301_cases(tmp_path, capsys):
    assert cli_main(["bfcl", "--out", str(tmp_path / "out")]) == 0
    card = read_data_card(tmp_path / "out")
    assert card["rows_per_category"] == {name: count for name, (_, count) in bfcl.CATEGORIES.items()}
    assert card["splits"] == {"test": 3301} and card["unexpected_row_counts"] == {}
    rows = pq.read_table(tmp_path / "out" / "test.parquet", columns=["data_source", "prompt"]).to_pylist()
    assert all(r["prompt"][0]["content"].startswith(protocol.SYSTEM_HEADER + "1. Name: ") for r in rows)
    first = (tmp_path / "out" / "test.parquet").read_bytes()
    assert cli_main(["bfcl", "--out", str(tmp_path / "again")]) == 0
    assert (tmp_path / "again" / "test.parquet").read_bytes() == first
