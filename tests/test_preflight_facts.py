"""Model facts (conf/model/*.yaml `run.model_facts`) against config.json: the tiny model's generated one, and the
paper models' parameter counts against their architecture (intermediate sizes from their config.json)."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from dara.config import CONF_DIR
from dara.preflight.facts import FACT_KEYS, facts_from_config_json, facts_from_mapping, parameters_of_qwen


def facts_of(model: str):
    node = OmegaConf.load(CONF_DIR / "model" / f"{model}.yaml").run.model_facts
    assert set(node.keys()) == set(FACT_KEYS)
    return facts_from_mapping(OmegaConf.to_container(node))


def test_tiny_facts_match_the_generated_models_config_json(tmp_path):
    from data_prep import smoke

    model = smoke.new_model(smoke.train_tokenizer(smoke.chat_texts(smoke.synthetic_records(0, smoke.N_TRAIN))), seed=0)
    model.config.save_pretrained(tmp_path)  # the config.json data_prep writes next to the weights
    config = json.loads((tmp_path / "config.json").read_text())
    assert facts_of("tiny") == facts_from_config_json(config, sum(p.numel() for p in model.parameters()))


@pytest.mark.parametrize("model, intermediate, bias, qk_norm", [  # from each model's config.json on the hub
    ("qwen2.5-0.5b-instruct", 4864, True, False), ("qwen2.5-1.5b-instruct", 8960, True, False),
    ("qwen2.5-3b-instruct", 11008, True, False), ("deepseek-r1-distill-qwen-1.5b", 8960, True, False),
    ("deepseek-r1-distill-qwen-7b", 18944, True, False), ("qwen3-4b-instruct-2507", 9728, False, True)])
def test_paper_models_parameter_counts_follow_from_their_shape(model, intermediate, bias, qk_norm):
    facts = facts_of(model)
    assert facts.intermediate_size == intermediate
    assert parameters_of_qwen(facts, qkv_bias=bias, qk_norm=qk_norm) == facts.num_parameters
    assert facts.num_attention_heads * facts.head_dim in (facts.hidden_size, 4096)  # Qwen3-4B: 32 x 128 > 2560
    if model.startswith("qwen3"):  # its full context needs 36 GiB of KV cache
        assert facts.kv_bytes_per_token() == 144 * 1024
        assert facts.max_position_embeddings * facts.kv_bytes_per_token() == 36 * 2**30
