"""Math data: the five evaluation sets (1,560 rows, self-verifying answers) and the DeepScaleR training rows."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from dara import SAMPLE_DATA
from data_prep import deepscaler, math_eval
from data_prep.__main__ import main as cli_main
from data_prep.common import DataPrepError, read_data_card
from tasks.math_answers import RULE, reference_answer

# The authors' prompt sentence, written out here on purpose (not imported): every row must carry exactly it.
AUTHORS_SUFFIX = "\n\nPlease reason step by step, and put your final answer within \\boxed{}."


BENCHMARKS = SAMPLE_DATA / "math_benchmarks"
TRAIN_SAMPLE = SAMPLE_DATA / "math_train_sample" / "aime_train.json"
NATIVE_FILES = {
    "aime24": "aime",
    "amc23": "amc",
    "math500": "math",
    "minerva": "minerva",
    "olympiad_bench": "olympiad_bench",
}


@pytest.fixture(scope="module")
def eval_rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("math_eval") / "out"
    math_eval.build(out, str(BENCHMARKS))
    return out, pq.read_table(out / "test.parquet").to_pylist()


@pytest.fixture(scope="module")
def smoke_tokenizer_dir(smoke_assets):
    return smoke_assets["model_dir"]  # the session's one smoke build (tests/conftest.py)


# ---------------------------------------------------------------------------------------------- math_eval
def test_math_eval_counts_and_schema(eval_rows):
    out, rows = eval_rows
    assert len(rows) == 1560
    counts = {}
    for row in rows:
        counts[row["data_source"]] = counts.get(row["data_source"], 0) + 1
        assert row["prompt"][0]["role"] == "user" and len(row["prompt"]) == 1
        assert row["prompt"][0]["content"].endswith(AUTHORS_SUFFIX)
        assert row["prompt"][0]["content"] == row["prompt"][0]["content"].removesuffix(AUTHORS_SUFFIX).strip() \
            + AUTHORS_SUFFIX
        assert row["reward_model"]["style"] == "rule"
        assert row["reward_model"]["ground_truth"] == row["extra_info"]["answer_alternatives"][0]
    assert counts == {"aime24": 30, "amc23": 83, "math500": 500, "minerva": 272, "olympiad_bench": 675}
    card = read_data_card(out)
    assert card["rows_per_benchmark"] == counts and card["unexpected_row_counts"] == {}
    assert card["answer_rule"] == RULE
    assert set(card["inputs_sha256"]) == {f"{name}.json" for name in NATIVE_FILES.values()}


def test_math_eval_answers_verify_against_themselves_and_the_native_answers(eval_rows):
    from rewards.math import score

    native = {
        source: json.loads((BENCHMARKS / f"{name}.json").read_text()) for source, name in NATIVE_FILES.items()
    }
    failures, rewritten = [], 0
    for row in eval_rows[1]:
        truth = row["reward_model"]["ground_truth"]
        response = f"The answer is \\boxed{{{truth}}}."
        if score(response, truth, 10)["correctness"] != 1.0:
            failures.append(("self", row["data_source"], truth))
        original = native[row["data_source"]][row["extra_info"]["source_index"]]["answer"]
        # Where normalisation changed the text, the new text must still match the benchmark's own answer.
        first = original[0] if isinstance(original, list) else original
        if not (isinstance(first, str) and first.strip() == truth):
            rewritten += 1
            if score(response, original, 10)["correctness"] != 1.0:
                failures.append(("native", row["data_source"], truth, original))
    assert failures == []
    assert rewritten > 100  # AMC floats, OlympiadBench $...$ answers


def test_olympiad_multi_answers_keep_their_delimiters(eval_rows):
    """The authors' unwrap keeps "$69$,$84$" (its inner text holds a "$"): 21 OlympiadBench ground truths keep
    a "$" (18 of them several answers joined by commas), never strict-graded correct when written plainly."""
    from rewards.math import score

    native = json.loads((BENCHMARKS / "olympiad_bench.json").read_text())
    kept = [row for row in eval_rows[1] if row["data_source"] == "olympiad_bench"
            and "$" in row["reward_model"]["ground_truth"]]
    assert len(kept) == 21
    for row in kept:
        truth = row["reward_model"]["ground_truth"]
        assert truth == native[row["extra_info"]["source_index"]]["answer"][0].strip()
        plain = truth.replace("$", "")
        for response in (f"\\boxed{{{plain}}}", f"\\boxed{{{plain.replace(',', ', ')}}}"):
            assert score(response, truth, 10)["correctness"] == 0.0, (truth, response)
    first = next(row for row in kept if row["extra_info"]["source_index"] == 13)
    assert first["reward_model"]["ground_truth"] == "$69$,$84$"
    assert first["extra_info"]["answer_alternatives"] == ["$69$,$84$"]


def test_math_eval_rerun_is_byte_identical(eval_rows, tmp_path):
    out, _ = eval_rows
    assert cli_main(["math_eval", "--source", str(BENCHMARKS), "--out", str(tmp_path / "again")]) == 0
    assert (tmp_path / "again" / "test.parquet").read_bytes() == (out / "test.parquet").read_bytes()


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


# ---------------------------------------------------------------------------------------------- deepscaler
def plain_prompt_lengths(tokenizer, problems):
    """One prompt at a time, the way verl's filter_overlong_prompts measures it."""
    lengths = []
    for problem in problems:
        messages = [{"role": "user", "content": problem.strip() + AUTHORS_SUFFIX}]
        lengths.append(
            len(
                tokenizer.apply_chat_template(
                    messages, add_generation_prompt=True, tokenize=True, return_dict=False
                )
            )
        )
    return lengths


@pytest.mark.slow  # needs the session's smoke build (~15 s)
def test_deepscaler_filters_match_a_plain_loop(tmp_path, smoke_tokenizer_dir, monkeypatch):
    from transformers import AutoTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    records = json.loads(TRAIN_SAMPLE.read_text())
    limit = 400  # low enough that the smoke tokenizer drops a good share of the AIME problems
    card = deepscaler.build(tmp_path / "out", str(TRAIN_SAMPLE), smoke_tokenizer_dir, max_prompt_tokens=limit)
    tokenizer = AutoTokenizer.from_pretrained(smoke_tokenizer_dir)
    lengths = plain_prompt_lengths(tokenizer, [r["problem"] for r in records])
    kept = [i for i, n in enumerate(lengths) if n <= limit]
    assert 0 < len(records) - len(kept) < len(records)
    drops = {f["name"]: f["dropped"] for f in card["filters"]}
    assert drops == {"no_problem": 0, "no_answer": 0, "prompt_too_long": len(records) - len(kept)}
    rows = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert [r["extra_info"]["source_index"] for r in rows] == kept
    for index, (row, source_index) in enumerate(zip(rows, kept, strict=True)):
        record = records[source_index]
        assert row["data_source"] == "deepscaler" and row["extra_info"]["index"] == index
        assert row["prompt"] == [{"role": "user", "content": record["problem"].strip() + AUTHORS_SUFFIX}]
        assert row["reward_model"] == {"style": "rule", "ground_truth": reference_answer(record["answer"])}
    assert card["tokenizer"]["max_prompt_tokens"] == limit and card["splits"] == {"train": len(kept)}


def test_deepscaler_counts_rows_without_answer_or_problem(tmp_path, smoke_tokenizer_dir):
    records = [
        {"problem": "What is 1+1?", "answer": "2", "solution": "1+1=2"},
        {"problem": "What is 2+2?", "answer": "", "solution": ""},
        {"problem": "What is 3+3?", "solution": "6"},
        {"problem": "  ", "answer": "5"},
        {"problem": "What is 4+4?", "answer": 8.0},
    ]
    source = tmp_path / "small.json"
    source.write_text("\n".join(json.dumps(r) for r in records))  # JSON lines are accepted too
    with pytest.raises(DataPrepError, match="lacks required field"):
        deepscaler.build(tmp_path / "out", str(source), smoke_tokenizer_dir)
    records[2]["answer"] = None
    source.write_text("\n".join(json.dumps(r) for r in records))
    card = deepscaler.build(tmp_path / "out", str(source), smoke_tokenizer_dir)
    assert {f["name"]: f["dropped"] for f in card["filters"]} == {
        "no_problem": 1,
        "no_answer": 2,
        "prompt_too_long": 0,
    }
    rows = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["2", "8"]


def test_deepscaler_cli_and_rerun(tmp_path, smoke_tokenizer_dir, capsys):
    args = ["deepscaler", "--source", str(TRAIN_SAMPLE), "--tokenizer", smoke_tokenizer_dir]
    assert cli_main([*args, "--out", str(tmp_path / "a")]) == 0
    assert cli_main([*args, "--out", str(tmp_path / "b")]) == 0
    for name in ("train.parquet", "val.parquet"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    card = read_data_card(tmp_path / "a")
    assert card["splits"]["val"] == 200 and card["val_seed"] == 0  # the authors' 200-row monitoring split
    assert (
        card["input_rows"] == 975
        and card["splits"]["train"] + 200 + sum(f["dropped"] for f in card["filters"]) == 975
    )
    assert card["reward"] == {"channels": ["correctness", "length"], "correctness_grader": "hendrycks",
                              "length_limit": 4000}
    assert card["answer_rule"] == RULE
    train = pq.read_table(tmp_path / "a" / "train.parquet").to_pylist()
    val = pq.read_table(tmp_path / "a" / "val.parquet").to_pylist()
    assert {r["extra_info"]["split"] for r in val} == {"val"} and len(val) == 200
    held_out = {r["extra_info"]["source_index"] for r in val}
    assert not held_out & {r["extra_info"]["source_index"] for r in train}
    assert [r["extra_info"]["index"] for r in val] == list(range(200))
    assert card["inputs_sha256"] == {
        "aime_train.json": read_data_card(tmp_path / "b")["inputs_sha256"]["aime_train.json"]
    }

