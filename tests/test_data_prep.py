"""Data preparation: ToolRL's official split and row layout, counted drops; the guarantees every builder shares
(data_prep.common: atomic output, byte-identical reruns, one-line errors); BFCL v4's test entries as BFCL prepares
them and ToolRL renders them (data_prep.bfcl, read by the evaluation); math: the five evaluation sets (1,560 rows,
self-verifying answers) and the DeepScaleR training rows; the smoke assets: loadable offline, verl rows in ToolRL
format, deterministic, reused when complete."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from dara import SAMPLE_DATA
from data_prep import bfcl, deepscaler, math_eval, smoke, toolrl
from data_prep.__main__ import main as cli_main
from data_prep.common import DATA_CARD, DataPrepError, atomic_folder, folder_is_complete, read_data_card
from results.bfcl import CASE_COUNTS
from tasks import toolrl as protocol
from tasks.math_answers import RULE, reference_answer

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


# The authors' prompt sentence, written out here on purpose (not imported): every row must carry exactly it.
AUTHORS_SUFFIX = "\n\nPlease reason step by step, and put your final answer within \\boxed{}."
BENCHMARKS = SAMPLE_DATA / "math_benchmarks"
TRAIN_SAMPLE = SAMPLE_DATA / "math_train_sample" / "aime_train.json"
NATIVE = {source: json.loads((BENCHMARKS / spec["file"]).read_text()) for source, spec in math_eval.BENCHMARKS.items()}


@pytest.fixture(scope="module")
def eval_rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("math_eval") / "out"
    assert cli_main(["math_eval", "--source", str(BENCHMARKS), "--out", str(out)]) == 0
    return out, pq.read_table(out / "test.parquet").to_pylist()


def test_math_eval_rows_counts_and_answers(eval_rows):
    """Every row: the authors' prompt, the first accepted answer as ground truth, which scores correct against
    itself and (where the rule rewrote it) against the benchmark's native answer."""
    from rewards.math import score

    out, rows = eval_rows
    counts, rewritten = {}, 0
    for row in rows:
        source, truth = row["data_source"], row["reward_model"]["ground_truth"]
        counts[source] = counts.get(source, 0) + 1
        native = NATIVE[source][row["extra_info"]["source_index"]]
        assert row["prompt"] == [{"role": "user", "content": native["problem"].strip() + AUTHORS_SUFFIX}]
        assert truth == row["extra_info"]["answer_alternatives"][0]
        response = f"The answer is \\boxed{{{truth}}}."
        assert score(response, truth, 10)["correctness"] == 1.0, truth
        first = native["answer"][0] if isinstance(native["answer"], list) else native["answer"]
        if not (isinstance(first, str) and first.strip() == truth):
            rewritten += 1
            assert score(response, native["answer"], 10)["correctness"] == 1.0, (truth, native["answer"])
    assert rewritten > 100  # AMC floats, OlympiadBench $...$ answers
    assert counts == {"aime24": 30, "amc23": 83, "math500": 500, "minerva": 272, "olympiad_bench": 675}
    card = read_data_card(out)
    assert card["rows_per_benchmark"] == counts and card["unexpected_row_counts"] == {} and card["answer_rule"] == RULE
    assert set(card["inputs_sha256"]) == {spec["file"] for spec in math_eval.BENCHMARKS.values()}


def partial_folder(tmp_path):
    (tmp_path / "partial").mkdir()
    (tmp_path / "partial" / "aime.json").write_text('[{"problem": "1+1?", "answer": "2"}]')
    return str(tmp_path / "partial")


@pytest.mark.parametrize("build, message", [
    (lambda tmp: math_eval.build(tmp / "out", str(BENCHMARKS / "aime.json")), "must be a folder"),
    (lambda tmp: math_eval.build(tmp / "out", partial_folder(tmp)), "amc.json"),
    (lambda tmp: math_eval.build(tmp / "out"), "could not load hub dataset .no-such-org/no-such-set"),
    (lambda tmp: deepscaler.build(tmp / "out", str(TRAIN_SAMPLE), str(tmp / "no-tokenizer")),
     "could not load tokenizer"),
])
def test_bad_sources_are_one_clear_error_and_no_output(tmp_path, monkeypatch, build, message):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setitem(math_eval.BENCHMARKS["aime24"], "hub", ("no-such-org/no-such-set", None, "train"))
    with pytest.raises(DataPrepError, match=message):
        build(tmp_path)
    assert not (tmp_path / "out").exists()


def test_deepscaler_filters_and_held_out_rows_match_a_plain_loop(tmp_path, smoke_assets):
    """The length filter as verl's filter_overlong_prompts counts it, held-out rows drawn by random.Random(0)."""
    from transformers import AutoTokenizer

    tokenizer_dir = smoke_assets["model_dir"]  # the session's one smoke build's tokenizer

    records = json.loads(TRAIN_SAMPLE.read_text())[:300] + [
        {"problem": "What is 2+2?", "answer": ""}, {"problem": "What is 3+3?", "answer": None},
        {"problem": "  ", "answer": "5"}, {"problem": "What is 4+4?", "answer": 8.0}]
    source = tmp_path / "train.json"
    source.write_text(json.dumps(records))
    limit = 400  # low enough that the smoke tokenizer drops a good share of the AIME problems
    args = ["deepscaler", "--source", str(source), "--tokenizer", tokenizer_dir, "--max-prompt-tokens", str(limit),
            "--val-rows", "20", "--out"]
    assert cli_main([*args, str(tmp_path / "out")]) == 0
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    kept = [i for i, r in enumerate(records) if isinstance(r["problem"], str) and r["problem"].strip()
            and r["answer"] not in ("", None) and len(tokenizer.apply_chat_template(
                [{"role": "user", "content": r["problem"].strip() + AUTHORS_SUFFIX}], add_generation_prompt=True,
                tokenize=True, return_dict=False)) <= limit]
    held_out = {kept[n] for n in random.Random(0).sample(range(len(kept)), 20)}
    card = read_data_card(tmp_path / "out")
    assert {f["name"]: f["dropped"] for f in card["filters"]} == {
        "no_problem": 1, "no_answer": 2, "prompt_too_long": len(records) - 3 - len(kept)}
    assert 0 < card["filters"][2]["dropped"] < 300
    assert card["splits"] == {"train": len(kept) - 20, "val": 20} and card["val_seed"] == 0
    assert card["reward"] == {"channels": ["correctness", "length"], "correctness_grader": "hendrycks",
                              "length_limit": 4000}
    for split, expected in (("train", [i for i in kept if i not in held_out]), ("val", sorted(held_out))):
        rows = pq.read_table(tmp_path / "out" / f"{split}.parquet").to_pylist()
        assert [r["extra_info"] for r in rows] == [{"split": split, "index": n, "source_index": i}
                                                   for n, i in enumerate(expected)]
        for row, i in zip(rows, expected, strict=True):
            assert row["prompt"] == [{"role": "user", "content": records[i]["problem"].strip() + AUTHORS_SUFFIX}]
            assert row["reward_model"] == {"style": "rule", "ground_truth": reference_answer(records[i]["answer"])}
            assert row["data_source"] == "deepscaler"


# smoke_assets_dir, smoke_assets: the session's one build (tests/conftest.py)
def test_card_and_model_load_offline(smoke_assets_dir, smoke_assets, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, paths = smoke_assets_dir, smoke_assets
    assert paths == {"model_dir": str(out / "model"), "train": str(out / "train.parquet"),
                     "test": str(out / "test.parquet")}
    card = read_data_card(out)
    assert card["splits"] == {"train": 256, "test": 32} and card["code_version"] == smoke.code_version()
    # the warm start leaves the format reward varying within prompt groups
    assert 0.1 <= card["format_probe"]["format_rate"] <= 0.6 and card["format_probe"]["groups_with_mixed_format"] >= 8
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tokenizer = AutoTokenizer.from_pretrained(paths["model_dir"])
    model = AutoModelForCausalLM.from_pretrained(paths["model_dir"])
    assert type(model).__name__ == "Qwen2ForCausalLM" and type(tokenizer).__name__.startswith("Qwen2Tokenizer")
    assert model.config.tie_word_embeddings and model.config.vocab_size == len(tokenizer)
    assert card["model"]["parameters"] == sum(p.numel() for p in model.parameters())
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|endoftext|>")
    assert model.generation_config.eos_token_id == tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    no_system = tokenizer.apply_chat_template(messages[1:], tokenize=False)
    assert no_system.startswith("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]  # special tokens stay single ids; a round trip
    assert ids.count(tokenizer.convert_tokens_to_ids("<|im_start|>")) == 3 and tokenizer.decode(ids) == text


def test_rows_follow_verl_schema_and_toolrl_format_within_the_prompt_limit(smoke_assets):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    paths = smoke_assets
    tokenizer = AutoTokenizer.from_pretrained(paths["model_dir"])
    kinds = set()
    for split in ("train", "test"):
        for index, row in enumerate(pq.read_table(paths[split]).to_pylist()):
            truth = row["reward_model"]["ground_truth"]
            assert (row["data_source"], row["reward_model"]["style"]) == ("rlla", "rule")
            assert [m["role"] for m in row["prompt"]] == ["system", "user"] and "1. Name: " in row["prompt"][0]["content"]
            assert (row["extra_info"]["split"], row["extra_info"]["index"]) == (split, index)
            assert protocol.matches_format(truth, truth)
            assert len(tokenizer(truth, add_special_tokens=False)["input_ids"]) < smoke.MAX_ANSWER_TOKENS
            kinds.add(protocol.ground_truth_kind(truth))
    assert kinds == {(True, False), (False, True)}
    config = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": smoke.MAX_PROMPT_TOKENS,
                               "filter_overlong_prompts": True, "truncation": "error", "return_raw_chat": True})
    dataset = RLHFDataset(data_files=paths["train"], tokenizer=tokenizer, config=config)
    assert len(dataset) == smoke.N_TRAIN  # verl's own length filter keeps every row
    assert dataset[3]["extra_info"]["index"] == 3 and dataset[3]["reward_model"]["ground_truth"].startswith("<think>")


def test_a_complete_build_is_reused_and_a_changed_one_is_not(smoke_assets_dir, smoke_assets, tmp_path, capsys):
    out, paths = smoke_assets_dir, smoke_assets
    before = {p: os.stat(p).st_mtime_ns for p in (out / DATA_CARD, Path(paths["train"]))}
    assert smoke.build(out, seed=0) == paths
    assert cli_main(["smoke", "--out", str(out)]) == 0 and str(out / "model") in capsys.readouterr().out
    assert {p: os.stat(p).st_mtime_ns for p in before} == before
    copied = tmp_path / "copy"
    shutil.copytree(out, copied)
    expect = {"dataset": "smoke", "seed": 0, "code_version": smoke.code_version()}
    assert folder_is_complete(copied, expect) and not folder_is_complete(copied, {**expect, "seed": 1})
    with open(copied / "test.parquet", "ab") as handle:
        handle.write(b"x")
    assert not folder_is_complete(copied, expect)


@pytest.mark.slow  # a second full smoke build (~20 s)
def test_forced_rebuild_is_byte_identical(smoke_assets_dir, smoke_assets):
    out = smoke_assets_dir
    before = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    smoke.build(out, seed=0, force=True)
    assert {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == before


def test_response_tokens_count_up_to_the_first_stop_token_like_a_loop():
    torch.manual_seed(0)
    responses, eos = torch.randint(0, 6, (50, 12)), [1, 4]
    expected = [next((i + 1 for i, t in enumerate(row.tolist()) if t in eos), len(row)) for row in responses]
    assert smoke.response_tokens(responses, eos).tolist() == expected
    assert smoke.response_tokens(torch.tensor([[3, 3, 3]]), 1).tolist() == [3]  # no stop token: the whole budget
