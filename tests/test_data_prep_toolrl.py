"""ToolRL data: the official split and row layout, counted drops; the guarantees every builder shares
(data_prep.common: atomic output, byte-identical reruns, one-line errors); BFCL v4: BFCL's preparation of test
entries and ToolRL's rendering of them (data_prep.bfcl, read by the evaluation)."""

from __future__ import annotations

import copy
import importlib.util
import json
import re

import numpy as np
import pyarrow.parquet as pq
import pytest

from dara import SAMPLE_DATA
from data_prep import bfcl, toolrl
from data_prep.__main__ import main as cli_main
from data_prep.common import DataPrepError, atomic_folder, read_data_card
from results.bfcl import CASE_COUNTS
from tasks import toolrl as protocol

RAW = SAMPLE_DATA / "toolrl" / "rlla_sft.json"
OFFICIAL_TEST = pq.read_table(SAMPLE_DATA / "toolrl" / "rlla_4k_test.parquet").to_pylist()


def reference_split(records):
    """ToolRL's preprocessing: numpy seed 31415, in-place shuffle of the list, last 2% held out."""
    shuffled = list(records)
    np.random.RandomState(31415).shuffle(shuffled)
    held_out = int(len(shuffled) * 0.02)
    return shuffled[:-held_out], shuffled[-held_out:]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("toolrl") / "out"
    assert cli_main(["toolrl", "--source", str(RAW), "--out", str(out)]) == 0
    return out


def test_split_matches_the_seeded_rule_row_for_row(built):  # the rows' layout: the next test
    train, test = reference_split(json.loads(RAW.read_text()))
    for split, expected in (("train", train), ("test", test)):
        rows = pq.read_table(built / f"{split}.parquet").to_pylist()
        assert [r["extra_info"] for r in rows] == [{"split": split, "index": i, **r} for i, r in enumerate(expected)]
        assert [r["reward_model"]["ground_truth"] for r in rows] == [r["output"] for r in expected]
    card = read_data_card(built)
    assert card["splits"] == {"train": 392, "test": 8} and card["input_rows"] == 400
    assert sum(card["ground_truths_unreadable_by_scorer"].values()) == 17


def test_rows_and_instructions_equal_the_official_held_out_rows():
    records = [{k: row["extra_info"][k] for k in toolrl.FIELDS} for row in OFFICIAL_TEST]
    assert toolrl.to_rows(records, "test", toolrl.FilterLog(toolrl.FILTERS)) == OFFICIAL_TEST
    assert toolrl.scorer_unreadable(OFFICIAL_TEST) == 0  # the authors' held-out rows: all readable
    pattern = re.compile(r"\d+\. Name: (.*)\nDescription: (.*)\nParameters: (.*)\n")
    for row in OFFICIAL_TEST:
        instruction = row["extra_info"]["instruction"]
        tools = [{"name": n, "description": d, "parameters": json.loads(p)} for n, d, p in pattern.findall(instruction)]
        assert tools and protocol.system_prompt(tools) == instruction


def test_rerun_is_byte_identical_and_replaces_a_build(built, tmp_path):
    for _ in range(2):  # a build, then a rebuild over it
        assert cli_main(["toolrl", "--source", str(RAW), "--out", str(tmp_path / "again")]) == 0
        for name in ("train.parquet", "test.parquet"):
            assert (tmp_path / "again" / name).read_bytes() == (built / name).read_bytes()
    assert [p.name for p in tmp_path.iterdir()] == ["again"]  # no staging folder left


def test_full_size_source_gives_3920_and_80_and_unusable_rows_are_counted_after_the_split(tmp_path):
    """Ten copies of the 400 sample rows stand for rlla_rl.json; two made unusable are dropped after the split."""
    records = json.loads(RAW.read_text()) * 10
    train, test = reference_split(list(range(4000)))
    records[train[0]] = {**records[train[0]], "output": None}
    records[test[0]] = {**records[test[0]], "input": "   "}
    source = tmp_path / "rlla_rl.json"
    source.write_text(json.dumps(records))
    card = toolrl.build(tmp_path / "out", str(source))
    assert card["split_before_filters"] == {"train": 3920, "test": 80} and card["splits"] == {"train": 3919, "test": 79}
    assert {f["name"]: f["dropped"] for f in card["filters"]} == {"bad_instruction": 0, "bad_input": 1, "bad_output": 1}
    assert card["prompt_length"] == {"max_prompt_tokens": 2048, "overlong_filter": False, "truncation": "left"}
    kept = pq.read_table(tmp_path / "out" / "test.parquet").to_pylist()
    assert [r["extra_info"]["input"] for r in kept] == [records[i]["input"] for i in test[1:]]
    assert [r["extra_info"]["index"] for r in kept] == list(range(79))


@pytest.mark.parametrize("content, message", [
    (None, "not found"), ("[]", "holds no records"), ('[{"instruction": "a", "input": "b"}]', "lacks required field"),
    ('{"a": 1}', "expected a JSON list"), ("not json", "is not JSON"), ("[1]", "record 0 is a int"),
])
def test_bad_inputs_give_one_clear_error_exit_code_2_and_no_output(tmp_path, capsys, content, message):
    source = tmp_path / "in.json"
    if content is not None:
        source.write_text(content)
    with pytest.raises(DataPrepError, match=message):
        toolrl.build(tmp_path / "out", str(source))
    assert cli_main(["toolrl", "--source", str(source), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == (["in.json"] if content is not None else [])


def test_atomic_folder_never_replaces_unrelated_files_and_leaves_nothing_on_error(tmp_path):
    keep = tmp_path / "mine"
    keep.mkdir()
    (keep / "notes.txt").write_text("precious")
    with pytest.raises(DataPrepError, match="refusing to replace"), atomic_folder(keep):
        pass
    with pytest.raises(KeyboardInterrupt), atomic_folder(tmp_path / "new") as staging:
        (staging / "train.parquet").write_bytes(b"partial")
        raise KeyboardInterrupt
    assert [p.name for p in tmp_path.iterdir()] == ["mine"] and (keep / "notes.txt").read_text() == "precious"


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
