"""ToolRL data: the official seeded split row for row, the official row layout, errors and counted drops."""

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

TOOLRL_SAMPLE = str(SAMPLE_DATA / "toolrl")
RAW = f"{TOOLRL_SAMPLE}/rlla_sft.json"
OFFICIAL_TEST = f"{TOOLRL_SAMPLE}/rlla_4k_test.parquet"


def reference_split(records):
    """ToolRL's preprocessing, literally: global numpy seed, in-place shuffle of the list, last 2% held out."""
    state = np.random.get_state()
    try:
        np.random.seed(31415)
        shuffled = list(records)
        np.random.shuffle(shuffled)
    finally:
        np.random.set_state(state)
    held_out = int(len(shuffled) * 0.02)
    return shuffled[:-held_out], shuffled[-held_out:]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("toolrl") / "out"
    toolrl.build(out, RAW)
    return out


def test_split_matches_the_seeded_rule_row_for_row(built):
    records = json.load(open(RAW))
    train, test = reference_split(records)
    assert (len(train), len(test)) == (392, 8)
    for split, expected in (("train", train), ("test", test)):
        rows = pq.read_table(built / f"{split}.parquet").to_pylist()
        assert len(rows) == len(expected)
        for index, (row, record) in enumerate(zip(rows, expected, strict=True)):
            assert row["prompt"] == [
                {"role": "system", "content": record["instruction"]},
                {"role": "user", "content": record["input"]},
            ]
            assert row["reward_model"] == {"style": "rule", "ground_truth": record["output"]}
            assert row["extra_info"] == {"split": split, "index": index, **record}
            assert row["data_source"] == "rlla" and row["ability"] == "math"
    card = read_data_card(built)
    assert card["splits"] == {"train": 392, "test": 8} and card["input_rows"] == 400
    assert all(f["dropped"] == 0 for f in card["filters"])


def test_4000_rows_give_3920_and_80():
    train, test = toolrl.official_split(list(range(4000)))
    assert (len(train), len(test)) == (3920, 80)
    reference_train, reference_test = reference_split(list(range(4000)))
    assert train == reference_train and test == reference_test


def test_rows_equal_the_official_held_out_rows():
    official = pq.read_table(OFFICIAL_TEST).to_pylist()
    records = [{k: row["extra_info"][k] for k in ("instruction", "input", "output")} for row in official]
    ours = toolrl.to_rows(records, "test", toolrl.FilterLog(toolrl.FILTERS))
    for mine, theirs in zip(ours, official, strict=True):
        assert mine == theirs


def parse_tools(instruction: str) -> list[dict]:
    listing = instruction[len(protocol.SYSTEM_HEADER) : -len(protocol.SYSTEM_FOOTER)]
    pattern = re.compile(r"\d+\. Name: (.*)\nDescription: (.*)\nParameters: (.*)\n")
    tools = [
        {"name": n, "description": d, "parameters": json.loads(p)} for n, d, p in pattern.findall(listing)
    ]
    return tools


def test_system_prompt_renderer_reproduces_toolrl_instructions():
    official = pq.read_table(OFFICIAL_TEST).to_pylist()
    for row in official:
        instruction = row["extra_info"]["instruction"]
        tools = parse_tools(instruction)
        assert tools
        assert protocol.system_prompt(tools) == instruction


def test_rerun_is_byte_identical_and_cli_works(built, tmp_path, capsys):
    first = {p.name: p.read_bytes() for p in built.iterdir()}
    out = tmp_path / "again"
    assert cli_main(["toolrl", "--source", RAW, "--out", str(out)]) == 0
    assert '"train": 392' in capsys.readouterr().out
    second = {p.name: p.read_bytes() for p in out.iterdir()}
    assert first.keys() == second.keys() == {"train.parquet", "test.parquet", "data_card.json"}
    assert (
        first["train.parquet"] == second["train.parquet"] and first["test.parquet"] == second["test.parquet"]
    )
    assert cli_main(["toolrl", "--source", RAW, "--out", str(out)]) == 0
    assert {p.name: p.read_bytes() for p in out.iterdir()} == second


def test_checkout_folder_is_accepted(tmp_path):
    raw = tmp_path / "ToolRL" / "dataset" / "rlla_4k_raw"
    raw.mkdir(parents=True)
    (raw / "rlla_rl.json").write_bytes(open(RAW, "rb").read())
    card = toolrl.build(tmp_path / "out", str(tmp_path / "ToolRL"))
    assert card["splits"] == {"train": 392, "test": 8}


def test_unusable_rows_are_counted_and_others_keep_their_split(tmp_path):
    records = json.load(open(RAW))
    broken = [dict(r) for r in records]
    train, test = reference_split(list(range(400)))
    broken[train[0]]["output"] = None
    broken[test[0]]["input"] = "   "
    source = tmp_path / "broken.json"
    source.write_text(json.dumps(broken))
    card = toolrl.build(tmp_path / "out", str(source))
    assert card["splits"] == {"train": 391, "test": 7}
    drops = {f["name"]: f["dropped"] for f in card["filters"]}
    assert drops == {"bad_instruction": 0, "bad_input": 1, "bad_output": 1}
    kept_test = pq.read_table(tmp_path / "out" / "test.parquet").to_pylist()
    assert [r["extra_info"]["input"] for r in kept_test] == [records[i]["input"] for i in test[1:]]
    assert [r["extra_info"]["index"] for r in kept_test] == list(range(7))


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "not found"),
        ("[]", "holds no records"),
        ('[{"instruction": "a", "input": "b"}]', "lacks required field"),
        ('{"a": 1}', "expected a JSON list"),
        ("not json", "neither a JSON list nor JSON lines"),
    ],
)
def test_bad_inputs_give_clear_errors_and_no_output(tmp_path, content, message):
    source = tmp_path / "in.json"
    if content is not None:
        source.write_text(content)
    with pytest.raises(DataPrepError, match=message):
        toolrl.build(tmp_path / "out", str(source))
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == (["in.json"] if content is not None else [])


def test_cli_reports_errors_with_exit_code(tmp_path, capsys):
    assert cli_main(["toolrl", "--source", str(tmp_path / "missing.json"), "--out", str(tmp_path / "o")]) == 2
    assert "not found" in capsys.readouterr().err


def test_atomic_folder_never_replaces_unrelated_files(tmp_path):
    keep = tmp_path / "mine"
    keep.mkdir()
    (keep / "notes.txt").write_text("precious")
    with pytest.raises(DataPrepError, match="refusing to replace"):
        with atomic_folder(keep):
            pass
    assert (keep / "notes.txt").read_text() == "precious"


def test_cli_help_lists_every_dataset(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["--help"])
    assert exit_info.value.code == 0
    shown = capsys.readouterr().out
    assert all(name in shown for name in ("toolrl", "deepscaler", "math_eval", "bfcl", "smoke"))


def test_full_size_source_gives_3920_and_80_with_no_length_filter(tmp_path):
    """The full rlla_rl.json (4,000 rows) cannot be downloaded here: ten copies of the shared 400 rows run
    the same count logic end to end. No row is dropped for its length (verl truncates from the left)."""
    records = json.load(open(RAW))
    source = tmp_path / "rlla_rl.json"
    source.write_text(json.dumps(records * 10))
    card = toolrl.build(tmp_path / "out", str(source))
    assert card["input_rows"] == 4000
    assert card["split_before_filters"] == card["splits"] == {"train": 3920, "test": 80}
    assert card["prompt_length"] == {"max_prompt_tokens": 2048, "overlong_filter": False, "truncation": "left"}
    assert [f["name"] for f in card["filters"]] == ["bad_instruction", "bad_input", "bad_output"]
    # the shared SFT rows mention "<tool_call>" in 17 thoughts: ten copies hold 170 such ground truths
    assert sum(card["ground_truths_unreadable_by_scorer"].values()) == 170


def test_shared_rows_card_counts_392_and_8_and_scorer_readability(built):
    card = read_data_card(built)
    assert card["splits"] == {"train": 392, "test": 8}
    assert sum(card["ground_truths_unreadable_by_scorer"].values()) == 17
    official = pq.read_table(OFFICIAL_TEST).to_pylist()
    assert toolrl.scorer_unreadable(official) == 0  # the authors' held-out rows: all readable
