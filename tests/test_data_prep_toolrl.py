"""ToolRL data: the official split and row layout, counted drops; and the guarantees every builder shares
(data_prep.common: atomic output, byte-identical reruns, one-line errors)."""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow.parquet as pq
import pytest

from dara import SAMPLE_DATA
from data_prep import toolrl
from data_prep.__main__ import main as cli_main
from data_prep.common import DataPrepError, atomic_folder, read_data_card
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
