"""Smoke assets: loadable offline, verl rows in ToolRL format, deterministic, idempotent, atomic."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from data_prep import smoke
from data_prep.__main__ import main as cli_main
from data_prep.common import DATA_CARD, folder_is_complete, read_data_card
from tasks import toolrl as protocol


@pytest.fixture(scope="module")
def built(smoke_assets_dir, smoke_assets):
    return smoke_assets_dir, smoke_assets  # the session's one build (tests/conftest.py)


def file_bytes(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_paths_and_card(built):
    out, paths = built
    assert paths == {
        "model_dir": str(out / "model"),
        "train": str(out / "train.parquet"),
        "test": str(out / "test.parquet"),
    }
    card = read_data_card(out)
    assert card["splits"] == {"train": smoke.N_TRAIN, "test": smoke.N_TEST}
    assert card["seed"] == 0 and card["code_version"] == smoke.code_version()
    assert set(card["outputs_sha256"]) >= {
        "train.parquet",
        "test.parquet",
        "model/model.safetensors",
        "model/tokenizer.json",
        "model/config.json",
    }
    # The warm start must leave the format reward varying within prompt groups.
    probe = card["format_probe"]
    assert 0.1 <= probe["format_rate"] <= 0.6
    assert probe["groups_with_mixed_format"] >= probe["groups"] // 4


def test_model_and_tokenizer_load_offline(built, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model_dir = built[1]["model_dir"]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert model.config.tie_word_embeddings and model.config.vocab_size == len(tokenizer)
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    im_end, end_of_text = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    assert model.generation_config.eos_token_id == [im_end, end_of_text]

    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    no_system = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert no_system.startswith("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.")
    # Special tokens stay single ids, and the text round-trips through the loaded tokenizer.
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids.count(tokenizer.convert_tokens_to_ids("<|im_start|>")) == 3
    assert tokenizer.decode(ids) == text


def test_rows_follow_verl_schema_and_toolrl_format(built):
    from transformers import AutoTokenizer

    paths = built[1]
    tokenizer = AutoTokenizer.from_pretrained(paths["model_dir"])
    for split, count in (("train", smoke.N_TRAIN), ("test", smoke.N_TEST)):
        rows = pq.read_table(paths[split]).to_pylist()
        assert len(rows) == count
        for index, row in enumerate(rows):
            assert list(row) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
            assert row["data_source"] == "rlla"
            assert [m["role"] for m in row["prompt"]] == ["system", "user"]
            assert row["extra_info"]["split"] == split and row["extra_info"]["index"] == index
            truth = row["reward_model"]["ground_truth"]
            assert row["reward_model"]["style"] == "rule"
            assert protocol.matches_format(truth, truth)
            assert re.search(r"Name: \w+", row["prompt"][0]["content"])
            prompt_ids = tokenizer.apply_chat_template(
                row["prompt"], add_generation_prompt=True, tokenize=True, return_dict=False
            )
            assert len(prompt_ids) < smoke.MAX_PROMPT_TOKENS
            assert len(tokenizer(truth, add_special_tokens=False)["input_ids"]) < smoke.MAX_ANSWER_TOKENS
    kinds = {
        (
            "<tool_call>" in r["reward_model"]["ground_truth"],
            "<response>" in r["reward_model"]["ground_truth"],
        )
        for r in pq.read_table(paths["train"]).to_pylist()
    }
    assert kinds == {(True, False), (False, True)}


def test_second_build_reuses_and_cli_returns_same_paths(built, capsys):
    out, paths = built
    before = {p: os.stat(p).st_mtime_ns for p in (out / DATA_CARD, Path(paths["train"]))}
    assert smoke.build(out, seed=0) == paths
    assert cli_main(["smoke", "--out", str(out)]) == 0
    assert str(out / "model") in capsys.readouterr().out
    assert {p: os.stat(p).st_mtime_ns for p in before} == before


def test_tampered_build_is_not_complete(built, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(built[0], copy)
    expect = {"dataset": "smoke", "seed": 0, "code_version": smoke.code_version()}
    assert folder_is_complete(copy, expect)
    assert not folder_is_complete(copy, {**expect, "seed": 1})
    with open(copy / "test.parquet", "ab") as handle:
        handle.write(b"x")
    assert not folder_is_complete(copy, expect)


@pytest.mark.slow  # a second full smoke build (~13 s)
def test_forced_rebuild_is_byte_identical(built):
    out, _ = built
    before = file_bytes(out)
    smoke.build(out, seed=0, force=True)
    assert file_bytes(out) == before


def test_interrupted_build_leaves_no_folder(tmp_path, monkeypatch):
    def crash(staging, *options):
        (staging / "train.parquet").write_bytes(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(smoke, "_build_into", crash)
    out = tmp_path / "assets"
    with pytest.raises(KeyboardInterrupt):
        smoke.build(out, seed=0)
    assert list(tmp_path.iterdir()) == []


def test_verl_dataset_reads_the_rows_within_the_prompt_limit(built):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    paths = built[1]
    tokenizer = AutoTokenizer.from_pretrained(paths["model_dir"])
    config = OmegaConf.create(
        {
            "prompt_key": "prompt",
            "max_prompt_length": smoke.MAX_PROMPT_TOKENS,
            "filter_overlong_prompts": True,
            "truncation": "error",
            "return_raw_chat": True,
        }
    )
    dataset = RLHFDataset(data_files=paths["train"], tokenizer=tokenizer, config=config)
    assert len(dataset) == smoke.N_TRAIN  # verl's own length filter keeps every row
    item = dataset[3]
    assert item["data_source"] == "rlla" and item["extra_info"]["index"] == 3
    assert item["reward_model"]["ground_truth"].startswith("<think>")


# ----------------------------------------------------------------------------- the tiny-model builder's parameters
def test_the_tiny_model_takes_its_shape_and_names_a_bad_one():
    from data_prep.tiny_model import SMOKE_SHAPE, model_shape, tiny_qwen2

    shape = {"hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 3}
    model = tiny_qwen2(100, shape=shape, seed=1)
    config = model.config
    assert (config.hidden_size, config.num_attention_heads, config.num_key_value_heads, config.num_hidden_layers) == \
        (64, 2, 1, 3)
    assert config.hidden_size // config.num_attention_heads == 32 and config.intermediate_size == 192
    assert len(model.model.layers) == 3 and model.lm_head.weight is model.model.embed_tokens.weight  # tied
    again = tiny_qwen2(100, shape=shape, seed=1)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values(),
                                                  strict=True))  # seeded
    assert model_shape() == SMOKE_SHAPE
    for bad, named in (({"hidden": 8}, "unknown keys ['hidden']"), ({"num_attention_heads": 3}, "divide"),
                       ({"num_hidden_layers": 0}, "positive integer")):
        with pytest.raises(ValueError, match=re.escape(named)):
            model_shape(bad)
    assert smoke.shape_argument("hidden_size=128,num_hidden_layers=4") == {"hidden_size": 128, "num_hidden_layers": 4}


@pytest.mark.slow  # a smoke build of another shape and no warm start (~10 s)
def test_a_build_of_another_shape_and_difficulty_records_both_and_is_not_taken_for_the_default(built, tmp_path):
    out, _ = built
    shape = {"hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1}
    paths = smoke.build(tmp_path / "cold", seed=0, shape=shape, warm_start_steps=0)
    card = json.loads((tmp_path / "cold" / DATA_CARD).read_text())
    default = json.loads((out / DATA_CARD).read_text())
    assert card["model"]["hidden_size"] == 32 and card["model"]["num_key_value_heads"] == 1
    assert card["build_options"]["warm_start_steps"] == 0 and card["warm_start"]["steps"] == 0
    assert card["model"]["parameters"] < default["model"]["parameters"]
    # no warm start: an untrained model never writes the exact format
    assert card["format_probe"]["format_rate"] < default["format_probe"]["format_rate"]
    assert smoke.load(paths["model_dir"])[0].config.hidden_size == 32
    expect = {key: card[key] for key in ("dataset", "seed", "code_version", "build_options")}
    assert folder_is_complete(tmp_path / "cold", expect)
    assert not folder_is_complete(out, expect)  # the default build is not reused for another shape


def test_response_tokens_count_up_to_the_first_stop_token_like_a_loop():
    from data_prep.smoke import response_tokens

    torch.manual_seed(0)
    responses = torch.randint(0, 6, (50, 12))
    eos = [1, 4]

    def loop_length(row):
        for i, token in enumerate(row.tolist()):
            if token in eos:
                return i + 1
        return len(row)

    assert response_tokens(responses, eos).tolist() == [loop_length(row) for row in responses]
    assert response_tokens(torch.tensor([[3, 3, 3]]), 1).tolist() == [3]  # no stop token: the whole budget
