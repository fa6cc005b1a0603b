"""Smoke assets: loadable offline, verl rows in ToolRL format, deterministic, reused when complete."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from data_prep import smoke
from data_prep.__main__ import main as cli_main
from data_prep.common import DATA_CARD, folder_is_complete, read_data_card
from tasks import toolrl as protocol


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
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    expect = {"dataset": "smoke", "seed": 0, "code_version": smoke.code_version()}
    assert folder_is_complete(copy, expect) and not folder_is_complete(copy, {**expect, "seed": 1})
    with open(copy / "test.parquet", "ab") as handle:
        handle.write(b"x")
    assert not folder_is_complete(copy, expect)


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
