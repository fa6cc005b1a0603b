"""Math data: the five evaluation sets (1,560 rows, self-verifying answers) and the DeepScaleR training rows."""

from __future__ import annotations

import json
import random

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
