"""Model facts (`run.model_facts` in conf/model/*.yaml): the numbers the preflight's arithmetic needs, copied from
the model's config.json on the hub (`facts_from_config_json` reads them from a local copy)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from omegaconf import DictConfig, OmegaConf


@dataclass(frozen=True)
class ModelFacts:
    num_parameters: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int  # the MLP's width
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool

    def kv_bytes_per_token(self, tensor_parallel: int = 1, dtype_bytes: int = 2) -> int:
        """K and V of every layer for one token on one GPU (KV heads split over TP, replicated when fewer)."""
        return 2 * self.num_hidden_layers * max(1, self.num_key_value_heads // tensor_parallel) * self.head_dim * dtype_bytes

    def embedding_parameters(self) -> int:
        return self.vocab_size * self.hidden_size


FACT_KEYS = tuple(f.name for f in fields(ModelFacts))


def facts_from_mapping(values: Mapping, where: str = "run.model_facts") -> ModelFacts:
    if missing := [key for key in FACT_KEYS if values.get(key) is None]:
        raise ValueError(f"{where} lacks {missing}")
    return ModelFacts(**{k: (bool if k == "tie_word_embeddings" else int)(values[k]) for k in FACT_KEYS})


def model_facts(cfg: DictConfig) -> ModelFacts | None:
    """The composed run's model facts, or None when the model file keeps none."""
    node = OmegaConf.select(cfg, "run.model_facts", default=None)
    return None if node is None else facts_from_mapping(OmegaConf.to_container(node, resolve=True))


def facts_from_config_json(config: Mapping, num_parameters: int) -> ModelFacts:
    """The facts of a transformers config.json (head_dim defaults to hidden_size / heads, as transformers does)."""
    values = {"num_key_value_heads": config["num_attention_heads"], "tie_word_embeddings": True, **config,
              "num_parameters": num_parameters}
    if values.get("head_dim") is None:
        values["head_dim"] = values["hidden_size"] // values["num_attention_heads"]
    return facts_from_mapping(values, "config.json")


def parameters_of_qwen(facts: ModelFacts, *, qkv_bias: bool, qk_norm: bool) -> int:
    """Parameter count of a Qwen2/Qwen3 decoder from its shape (checks the facts' num_parameters)."""
    h, d = facts.hidden_size, facts.head_dim
    q, kv = facts.num_attention_heads * d, facts.num_key_value_heads * d
    attention = 2 * h * q + 2 * h * kv + ((q + 2 * kv) if qkv_bias else 0) + (2 * d if qk_norm else 0)
    layer = attention + 3 * h * facts.intermediate_size + 2 * h
    return facts.num_hidden_layers * layer + facts.embedding_parameters() * (1 if facts.tie_word_embeddings else 2) + h
